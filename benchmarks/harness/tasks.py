"""The benchmark's unit of work: one split of one data set under one variant (:class:`SplitTask`), run,
cached as JSON (one file per split, written whole) and read back, locally or on a Dask cluster.

A task runs ``training.pipeline.train`` on the paper's split (or a shift protocol's,
:mod:`benchmarks.harness.shift`) with the variant's settings, and the peer method on the same split
(:mod:`benchmarks.harness.peer`). ``reference-quantile`` calibrates each fit twice, and :data:`TWINS`
reads the ``paper`` variant's records off its splits.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field, replace
from functools import lru_cache
from pathlib import Path

import numpy as np

from benchmarks.common import parallel, write_json
from benchmarks.harness.peer import PEER
from benchmarks.harness.variants import VARIANTS
from models.exceptions import InputError


@dataclass(frozen=True)
class SplitTask:
    dataset: str
    seed: int
    variant: str = "paper"
    coverage: float = 0.9
    methods: tuple[str, ...] = ("ge", "nle", "lmve", "copula")
    lmve_overrides: dict = field(default_factory=dict, hash=False, compare=False)
    data_dir: str | None = None
    protocol: str | None = None  # a shift protocol (benchmarks.harness.shift) instead of the paper's split
    peer_epochs: int = 300  # the peer's training epochs (MAPIE's default)

    def key(self) -> str:
        if self.protocol is not None:
            return (f"shift-{self.variant}/{self.protocol}/{self.dataset}/{'-'.join(self.methods)}/"
                    f"seed_{self.seed:03d}.json")
        return f"{self.variant}/{self.dataset}/seed_{self.seed:03d}.json"


@lru_cache(maxsize=4)
def dataset(name: str, data_dir: str | None):
    """``training.data.datasets.load_dataset``, kept for the process's next splits of the same data set."""
    from training.data.datasets import load_dataset

    return load_dataset(name, data_dir)


def _run_shift(task: SplitTask) -> dict:
    from benchmarks.harness.shift import run_shift_split

    lmve = {**VARIANTS[task.variant].get("lmve", {}), **task.lmve_overrides}
    record = run_shift_split(dataset(task.dataset, task.data_dir), task.protocol, task.seed, task.methods,
                             task.coverage, method_params={"lmve": lmve})
    return {"task": {**asdict(task), "methods": list(task.methods)}, **record}


def _config_and_data(task: SplitTask):
    """The task's :class:`~training.pipeline.config.TrainConfig` (our methods only), dataset and split
    (``None``: the pipeline's default)."""
    from training.pipeline import TrainConfig

    spec = VARIANTS[task.variant]
    lmve = {**spec.get("lmve", {}), **task.lmve_overrides}
    ours = tuple(m for m in task.methods if m != PEER)
    config = TrainConfig(coverage=task.coverage, seed=task.seed, methods=ours, fallbacks=False, device="auto",
                         method_params={"lmve": lmve}, centre_params=spec.get("centre", {}),
                         cross_fit=spec.get("cross_fit"), centre=spec.get("centre_name", "paper"),
                         rssi=spec.get("rssi", "off"), centre_criterion=spec.get("centre_criterion", "rmse"),
                         primary_folds=0,  # the bench measures every method; no cross-fit for the served choice
                         use_groups=False,  # the paper's row protocol, the peer's split too
                         **({"centre_candidates": spec["centre_candidates"]} if "centre_candidates" in spec else {}))
    ds = dataset(task.dataset, task.data_dir)
    if spec.get("true_centre"):
        if "true_mean" not in ds.meta:
            raise InputError(f"variant true-centre needs a data set that knows its true mean (synthetic_oracle); "
                             f"{task.dataset} does not", field="variant", expected="synthetic_oracle",
                             received=task.dataset)
        ds = replace(ds, centers=ds.meta["true_mean"], centre_columns=[f"true_{t}" for t in ds.target_names])
    mult = spec.get("y_multiplier", {}).get(task.dataset)
    if mult:
        ds = replace(ds, Y=ds.Y * mult)
    split = None
    if "calibration_fraction" in spec:
        from training.pipeline import paper_split

        split = paper_split(ds.X.shape[0], task.seed, calibration_fraction=spec["calibration_fraction"])
    return config, ds, split


def run_peer(task: SplitTask) -> dict:
    """The peer's metrics on the task's split, seeing the features our methods see (the same RSSI step
    and scaler, fitted on the train part); fits nothing of ours."""
    import torch

    from benchmarks.harness.peer import evaluate_peer
    from training.pipeline import default_split, standardise

    torch.set_num_threads(int(os.environ.get("LMVE_BENCH_THREADS", "1")))
    config, ds, split = _config_and_data(task)
    split = split or default_split(ds, config)
    return evaluate_peer(standardise(ds.X, split, config)[2], ds.Y, split, task.coverage, task.seed,
                         num_epochs=task.peer_epochs)


def run_split(task: SplitTask) -> dict:
    """Fit, calibrate and test every method of ours on one split; return a JSON-able record
    (:func:`run_and_cache` adds the peer's metrics when the task asks for it)."""
    import torch

    from training.pipeline import train

    torch.set_num_threads(int(os.environ.get("LMVE_BENCH_THREADS", "1")))
    if task.protocol is not None:
        return _run_shift(task)
    config, ds, split = _config_and_data(task)
    t0 = time.perf_counter()
    result = train(ds, config, split=split)
    record = {"task": {**asdict(task), "methods": list(task.methods)}, "wall_seconds": time.perf_counter() - t0,
              "timings": result.timings, "metrics": result.metrics, "n_train": len(result.split.train),
              "n_calibration": len(result.split.calibration), "n_test": len(result.split.test),
              "centre": result.centre}
    from training.data.datasets import oracle_volume

    optimum = oracle_volume(ds, result.split.test, task.coverage)
    if optimum is not None:  # a data set whose smallest regions are known (synthetic_oracle)
        record["oracle_volume"] = optimum
    if VARIANTS[task.variant].get("reference_quantile"):
        record["metrics_exact"] = record["metrics"]
        record["metrics"] = reference_metrics(result, ds, task.coverage)
    if "lmve" in result.model.methods:
        shape = result.model.methods["lmve"].shape_
        record["lmve"] = {"history": shape.history_, "config": asdict(shape.config_), "grid": shape.grid_results_}
    return record


def reference_threshold(scores, eta: float) -> float:
    """The paper's reference code's threshold: ``np.quantile(scores, floor((n + 1) eta) / n)`` with numpy's
    linear interpolation (the level is at most 1: ``(n + 1) eta < n + 1``). With ``k = floor((n + 1) eta)`` it sits at 0-based position
    ``k - k / n`` of the sorted scores, where the exact split-conformal threshold
    (:func:`~models.calibration.conformal.conformal_quantile`, the ``ceil((n + 1) eta)``-th score) sits at ``k``
    (``k - 1`` when ``(n + 1) eta`` is a whole number): about ``eta`` of a rank below it, so the coverage
    guarantee is lost; the ``reference-quantile`` variant measures what that costs in coverage and saves in
    volume. Benchmark only: no bundle calibrates this way."""
    import math

    scores = np.asarray(scores, float)
    n = scores.size
    return float(np.quantile(scores, math.floor((n + 1) * eta) / n))


def reference_metrics(result, ds, coverage: float) -> dict:
    """The test metrics of ``result``'s methods with each threshold replaced by :func:`reference_threshold` of
    its calibration scores (the fitted model is left as it is); ``fit_seconds`` carried over."""
    from training.pipeline import evaluate

    thresholds = {name: (reference_threshold(reg.calibrator_.scores_, coverage), coverage)
                  for name, reg in result.model.methods.items()}
    test = result.split.test
    metrics = evaluate(result.model, ds.X[test], ds.Y[test], thresholds=thresholds)
    for name, m in metrics.items():
        m["fit_seconds"] = result.metrics[name]["fit_seconds"]
    return metrics


def _needs_peer(task: SplitTask, record: dict) -> bool:
    return task.protocol is None and PEER in task.methods and PEER not in record.get("metrics", {})


def peer_key(task: SplitTask) -> str:
    """Where the peer's result on a task's split is cached: it depends on the split and the features
    (the RSSI step, the calibration share), the level and the epochs, not on our variant's methods, so
    variants that share those share it."""
    spec = VARIANTS[task.variant]
    split = f"cal{spec['calibration_fraction']}" if "calibration_fraction" in spec else "default-split"
    targets = "_raw-targets" if "y_multiplier" in spec else ""
    return (f"{PEER}/rssi-{spec.get('rssi', 'off')}_{split}{targets}_eta{task.coverage}_epochs{task.peer_epochs}/"
            f"{task.dataset}/seed_{task.seed:03d}.json")


def cached_peer(task: SplitTask, cache: str) -> dict:
    """:func:`run_peer`'s metrics, from the peer cache or run and cached there."""
    path = Path(cache) / peer_key(task)
    if path.is_file():
        return json.loads(path.read_text())
    metrics = run_peer(task)
    write_json(path, metrics)
    return metrics


#: variant -> the variant whose cached split holds its record: ``reference-quantile`` calibrates the same fits
#: with both rules, and its exact half (``metrics_exact``) is the ``paper`` variant's split
TWINS = {"paper": "reference-quantile"}


def from_twin(task: SplitTask, cache: str) -> dict | None:
    """The task's record read off its :data:`TWINS` variant's cached split of the same task (dataset, seed,
    methods, coverage, settings), or ``None`` where there is none: the same fits, calibrated by the exact rule."""
    twin = TWINS.get(task.variant)
    if twin is None or task.protocol is not None:
        return None
    path = Path(cache) / replace(task, variant=twin).key()
    if not path.is_file():
        return None
    record = json.loads(path.read_text())
    same = {k: v for k, v in record["task"].items() if k != "variant"} == \
        {k: v for k, v in {**asdict(task), "methods": list(task.methods)}.items() if k != "variant"}
    if not same or "metrics_exact" not in record:
        return None
    record["metrics"] = record.pop("metrics_exact")
    record["task"]["variant"] = task.variant
    record["from_variant"] = twin
    return record


def run_and_cache(task: SplitTask, cache: str) -> dict:
    """The task's record from the cache (its own, or its :data:`TWINS` variant's), or run and cached. A
    cached record that lacks the peer asked for gets it added (the peer runs alone on the same split): our
    methods are not refitted."""
    path = Path(cache) / task.key()
    if path.is_file():
        record = json.loads(path.read_text())
        if not _needs_peer(task, record):
            return record
        record["task"]["methods"] = list(dict.fromkeys([*record["task"]["methods"], PEER]))
    else:
        record = from_twin(task, cache) or run_split(task)
    if _needs_peer(task, record):
        record["metrics"][PEER] = cached_peer(task, cache)
    write_json(path, record)
    return record


def run_tasks(tasks: list[SplitTask], cache: Path, jobs: int = 1, scheduler: str | None = None,
              progress: bool = True) -> list[dict]:
    """Run (or read from cache) every task; in local processes (:func:`benchmarks.common.parallel`), or on the
    Dask cluster at ``scheduler`` (its workers must import ``benchmarks``: start them in the repository root)."""
    todo = [t for t in tasks if not (cache / t.key()).is_file()
            or _needs_peer(t, json.loads((cache / t.key()).read_text()))]
    if todo and scheduler is not None:
        from dask.distributed import Client, as_completed
        from tqdm.auto import tqdm

        with Client(scheduler) as client:
            futures = client.map(run_and_cache, todo, cache=str(cache), pure=False)
            for fut in tqdm(as_completed(futures), total=len(futures), desc="splits (dask)", disable=not progress):
                fut.result()
    elif todo:
        parallel(run_and_cache, [(t, str(cache)) for t in todo], jobs, desc="splits" if progress else None)
    return [json.loads((cache / t.key()).read_text()) for t in tasks]
