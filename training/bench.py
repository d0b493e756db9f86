"""``lmve-bench``: datasets x split seeds x methods, following the paper's protocol.

    lmve-bench --datasets enb,ble_rssi,residential_building --seeds 0-49 --jobs 2
    lmve-bench --datasets enb --seeds 0-9 --variant nll            # a variant beyond the paper
    lmve-bench --datasets enb --seeds 0-49 --scheduler tcp://10.0.0.5:8786   # on a Dask cluster

Each (variant, dataset, seed) is one task whose result is cached as JSON under ``--cache``;
a rerun skips what is cached (resumable). Tasks run in local processes with joblib, or on a
Dask cluster when ``--scheduler`` names one. ``--out`` receives ``table1.csv`` (one row per
dataset and method), ``runs_<variant>.csv`` (one row per split and method), a markdown table
beside the paper's Table I, and a plot of the volume distributions.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from functools import lru_cache
from pathlib import Path

import numpy as np

from models.exceptions import InputError, LMVEError
from training import require_training_install
from training.peer import PEER

#: the paper's Table I (eta = 0.9, 50 splits): coverage %, volume (det(C)^1/2)
PAPER_TABLE1 = {
    "ble_rssi": {"ge": (89.8, 10.2), "nle": (90.1, 9.6), "lmve": (89.6, 7.8), "copula": (88.8, 54.8)},
    "enb": {"ge": (88.2, 34.0), "nle": (89.8, 18.3), "lmve": (89.3, 17.9), "copula": (88.9, 263.9)},
    "indoor_localization": {"ge": (89.8, 7.0e3), "nle": (89.7, 4.3e3), "lmve": (89.6, 2.0e3),
                            "copula": (89.8, 22.4e3)},
    "residential_building": {"ge": (88.6, 2.2e5), "nle": (88.5, 1.3e5), "lmve": (88.7, 1.1e5),
                             "copula": (83.9, 69.9e5)},
}

#: Our volume times this factor is in the paper's units. The paper's volumes are in the datasets'
#: original units, while the loaders scale both targets (residential_building / 100, as the reference
#: loader does; indoor_localization metres -> kilometres) and det(C)^1/2 scales with the product of
#: the two target scales (the evidence, GE on indoor_localization in m^2 beside the paper's, is in
#: benchmarks/results/indoor.md).
PAPER_UNIT_FACTOR = {"residential_building": 100.0**2, "indoor_localization": 1000.0**2}

#: named variants: what changes from the paper protocol
VARIANTS = {
    "paper": {},
    # lmve-train's defaults: the centre chosen by cross-validation (--centre auto), the RSSI step where
    # the columns look like RSSI, shapes from the selection's 5-fold out-of-fold residuals
    "defaults": {"centre_name": "auto", "rssi": "auto"},
    "nll": {"lmve": {"loss": "nll"}},
    "volume": {"lmve": {"loss": "volume"}},
    "scaled-centre": {"centre": {"scale_targets": True}},
    "paper-schedule": {"lmve": {"learning_rates_init": (1e-3, 1e-5), "learning_rates_train": (1e-3, 1e-5),
                                "max_steps": 100_000, "patience": None}},
    "no-init": {"lmve": {"init": "none"}},
    "lambda-1": {"lmve": {"lambda_": 1.0}},
    "stop-loss": {"lmve": {"stop_on": "loss"}},  # early stopping on the held-out training loss
    # the paper's model (no GE share), stopping on the held-out loss: compare with stop-loss
    "no-floor": {"lmve": {"floor_weight": 0.0, "stop_on": "loss"}},
    "2-layers": {"lmve": {"n_layers": 2}},
    # benchmark only, for a data set that knows its true mean (synthetic_oracle): every shape on the true
    # centre, as a client's own estimate would be given (how close the shapes come when the centre is exact)
    "true-centre": {"true_centre": True},
    # benchmark only: the paper's reference code's calibration, np.quantile(scores, floor((n + 1) eta) / n)
    # interpolated, instead of the exact ceil((n + 1) eta)-th score; each record keeps both on the same fits
    "reference-quantile": {"reference_quantile": True},
    "50pct-validation": {"calibration_fraction": 0.5},
    # every shape method learns from 5-fold out-of-fold centre residuals (served centre unchanged)
    "cross-fit": {"cross_fit": 5},
    # mini-batches of 256 rows instead of 1,024 (sets over 4,096 rows; smaller ones are full-batch by default)
    "minibatch-256": {"lmve": {"batch_size": 256}},
    # both: indoor_localization with lmve-train's default centre, on a CPU
    "scaled-centre-minibatch-256": {"centre": {"scale_targets": True}, "lmve": {"batch_size": 256}},
    # and shapes learned from out-of-fold residuals
    "scaled-centre-cross-fit-minibatch-256": {"centre": {"scale_targets": True}, "lmve": {"batch_size": 256},
                                              "cross_fit": 5},
    # undo the loaders' target scaling (residential_building / 100, indoor_localization km):
    # shows with numbers which units the paper's volumes are in
    "raw-targets": {"y_multiplier": {"residential_building": 100.0, "indoor_localization": 1000.0}},
    # lmve-train's --centre auto with the stack candidate added (--centre-candidates
    # paper,scaled,knn,hgb,stack): the centre chosen by cross-validation on the train part, after the
    # RSSI step where it applies; writes centre.{csv,md} beside table1_auto-centre
    "auto-centre": {"centre_name": "auto", "rssi": "auto",
                    "centre_candidates": ("paper", "scaled", "knn", "hgb", "stack")},
    # the same, choosing the candidate of smallest out-of-fold error quantile at the coverage level
    # (lmve-train --centre-criterion quantile) instead of RMSE
    "auto-centre-quantile": {"centre_name": "auto", "rssi": "auto", "centre_criterion": "quantile",
                             "centre_candidates": ("paper", "scaled", "knn", "hgb", "stack")},
    "auto-centre-fingerprint-quantile": {"centre_name": "auto", "rssi": "auto", "centre_criterion": "quantile",
                                         "centre_candidates": ("knn", "hgb", "stack")},
    # the same with the shapes learning from the centre's in-sample residuals (before lmve-train's
    # default became the selection's 5-fold out-of-fold residuals)
    "auto-centre-in-sample": {"centre_name": "auto", "rssi": "auto", "cross_fit": 0,
                              "centre_candidates": ("paper", "scaled", "knn", "hgb", "stack")},
    # the same with the MLP among the candidates (six network fits per split: a few splits only)
    "auto-centre-mlp": {"centre_name": "auto", "rssi": "auto",
                        "centre_candidates": ("paper", "scaled", "knn", "hgb", "mlp", "stack")},
    # indoor_localization: the fingerprint candidates only (the SVRs' O(n^2) fits on 16,000 rows x 5
    # folds are beyond this machine, and lost to kNN by 2x in centre_uji.md), and their blend
    "auto-centre-fingerprint": {"centre_name": "auto", "rssi": "auto", "centre_candidates": ("knn", "hgb", "stack")},
    # the auto centre with shapes learned from its 5-fold out-of-fold residuals (the reference for
    # joint-centre-cross-fit: the same residuals, no learned correction)
    "auto-centre-cross-fit": {"centre_name": "auto", "rssi": "auto", "cross_fit": 5},
    # LMVE learns a correction to the auto centre jointly with its shape (a mean head; lmve-train
    # --learned-centre): with the paper's loss, on the centre's residuals as lmve-train fits them
    "joint-centre": {"centre_name": "auto", "rssi": "auto", "lmve": {"mean_head": True}},
    # the same with the Gaussian NLL and a Cholesky output, and on 5-fold out-of-fold residuals
    "joint-centre-nll": {"centre_name": "auto", "rssi": "auto", "lmve": {"mean_head": True, "loss": "nll"}},
    "joint-centre-cross-fit": {"centre_name": "auto", "rssi": "auto", "cross_fit": 5, "lmve": {"mean_head": True}},
    # the mean head on the auto centre with stack among the candidates (the auto-centre variant's centre)
    "joint-centre-stack": {"centre_name": "auto", "rssi": "auto", "lmve": {"mean_head": True},
                           "centre_candidates": ("paper", "scaled", "knn", "hgb", "stack")},
    # the mean head on the auto centre with the MLP among the candidates
    "joint-centre-mlp": {"centre_name": "auto", "rssi": "auto", "lmve": {"mean_head": True},
                         "centre_candidates": ("paper", "scaled", "knn", "hgb", "mlp", "stack")},
}

TABLE1_COLUMNS = ["dataset", "method", "n_splits", "coverage_mean", "coverage_std", "volume_mean", "volume_std",
                  "paper_volume", "fit_seconds_mean"]


@dataclass(frozen=True)
class SplitTask:
    dataset: str
    seed: int
    variant: str = "paper"
    coverage: float = 0.9
    methods: tuple[str, ...] = ("ge", "nle", "lmve", "copula")
    lmve_overrides: dict = field(default_factory=dict, hash=False, compare=False)
    data_dir: str | None = None
    protocol: str | None = None  # a shift protocol (training.shift) instead of the paper's split
    peer_epochs: int = 300  # the peer's training epochs (MAPIE's default)

    def key(self) -> str:
        if self.protocol is not None:
            return (f"shift-{self.variant}/{self.protocol}/{self.dataset}/{'-'.join(self.methods)}/"
                    f"seed_{self.seed:03d}.json")
        return f"{self.variant}/{self.dataset}/seed_{self.seed:03d}.json"


@lru_cache(maxsize=4)
def _dataset(name: str, data_dir: str | None):
    from training.datasets import load_dataset

    return load_dataset(name, data_dir)


def _run_shift(task: SplitTask) -> dict:
    from training.shift import run_shift_split

    lmve = {**VARIANTS[task.variant].get("lmve", {}), **task.lmve_overrides}
    record = run_shift_split(_dataset(task.dataset, task.data_dir), task.protocol, task.seed, task.methods,
                             task.coverage, method_params={"lmve": lmve})
    return {"task": {**asdict(task), "methods": list(task.methods)}, **record}


def _config_and_data(task: SplitTask):
    """The task's :class:`~training.pipeline.TrainConfig` (our methods only), dataset and split
    (``None``: the pipeline's default)."""
    from training.pipeline import TrainConfig

    spec = VARIANTS[task.variant]
    lmve = {**spec.get("lmve", {}), **task.lmve_overrides}
    ours = tuple(m for m in task.methods if m != PEER)
    config = TrainConfig(coverage=task.coverage, seed=task.seed, methods=ours, device="auto",
                         method_params={"lmve": lmve}, centre_params=spec.get("centre", {}),
                         cross_fit=spec.get("cross_fit"), centre=spec.get("centre_name", "paper"),
                         rssi=spec.get("rssi", "off"), centre_criterion=spec.get("centre_criterion", "rmse"),
                         primary_folds=0,  # the bench measures every method; no cross-fit for the served choice
                         **({"centre_candidates": spec["centre_candidates"]} if "centre_candidates" in spec else {}))
    ds = _dataset(task.dataset, task.data_dir)
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

    from training.peer import evaluate_peer
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
    from training.datasets import oracle_volume

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
    _write_json(path, metrics)
    return metrics


def _write_json(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(obj))
    os.replace(tmp, path)  # a killed run never leaves a half-written cache entry


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


def _twin_note(records: list[dict]) -> str:
    """A sentence for the table's footer when some of its splits were read off their twin variant's."""
    twins = sorted({r["from_variant"] for r in records if r.get("from_variant")})
    n = sum(bool(r.get("from_variant")) for r in records)
    return (f" {n} of these {len(records)} splits are the `{'`, `'.join(twins)}` run's fits calibrated by the exact "
            f"rule (the same fits and fit times; `training.bench.TWINS`)." if n else "")


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
    _write_json(path, record)
    return record


def run_tasks(tasks: list[SplitTask], cache: Path, jobs: int = 1, scheduler: str | None = None,
              progress: bool = True) -> list[dict]:
    """Run (or read from cache) every task; locally with joblib, or on a Dask cluster."""
    from tqdm.auto import tqdm

    todo = [t for t in tasks if not (cache / t.key()).is_file()
            or _needs_peer(t, json.loads((cache / t.key()).read_text()))]
    if todo:
        if scheduler is not None:
            from dask.distributed import Client, as_completed

            with Client(scheduler) as client:
                futures = client.map(run_and_cache, todo, cache=str(cache), pure=False)
                for fut in tqdm(as_completed(futures), total=len(futures), desc="splits (dask)",
                                disable=not progress):
                    fut.result()
        else:
            from joblib import Parallel, delayed

            par = Parallel(n_jobs=jobs, return_as="generator_unordered", backend="loky")
            for _ in tqdm(par(delayed(run_and_cache)(t, str(cache)) for t in todo), total=len(todo),
                          desc="splits", disable=not progress):
                pass
    return [json.loads((cache / t.key()).read_text()) for t in tasks]


def runs_table(records: list[dict]):
    """One row per (variant, dataset, seed, method)."""
    import pandas as pd

    rows = []
    for r in records:
        t = r["task"]
        for method, m in r["metrics"].items():
            rows.append({"variant": t["variant"], "dataset": t["dataset"], "seed": t["seed"], "method": method,
                         "coverage": m["coverage"], "volume_paper": m["volume_paper"], "volume": m["volume"],
                         "alpha_q": m["alpha_q"], "fit_seconds": m["fit_seconds"],
                         "centre_seconds": r["timings"].get("centre"), "wall_seconds": r["wall_seconds"],
                         "centre": (r.get("centre") or {}).get("name"),
                         "centre_rmse": ((r.get("centre") or {}).get("test") or {}).get("rmse"),
                         # records from before the field: the regions' centre was the shared one
                         "region_centre_rmse": m.get("centre_rmse",
                                                     ((r.get("centre") or {}).get("test") or {}).get("rmse")),
                         "oracle_volume": r.get("oracle_volume"),
                         # the reference-quantile variant: the same fits with the exact rule
                         "coverage_exact": r.get("metrics_exact", {}).get(method, {}).get("coverage"),
                         "volume_paper_exact": r.get("metrics_exact", {}).get(method, {}).get("volume_paper"),
                         "lmve_init_steps": r.get("lmve", {}).get("history", {}).get("init", {}).get("steps")
                         if method == "lmve" else None,
                         "lmve_train_steps": r.get("lmve", {}).get("history", {}).get("train", {}).get("steps")
                         if method == "lmve" else None})
    return pd.DataFrame(rows)


def table1(runs) -> "pd.DataFrame":  # noqa: F821
    """Aggregate per dataset and method (coverage as a fraction; volume in the paper convention)."""
    g = runs.groupby(["dataset", "method"], sort=False)
    out = g.agg(n_splits=("seed", "nunique"), coverage_mean=("coverage", "mean"), coverage_std=("coverage", "std"),
                volume_mean=("volume_paper", "mean"), volume_std=("volume_paper", "std"),
                fit_seconds_mean=("fit_seconds", "mean")).reset_index()
    out["paper_volume"] = [PAPER_TABLE1.get(d, {}).get(m, (None, None))[1] for d, m in zip(out.dataset, out.method)]
    return out[TABLE1_COLUMNS]


#: what the centre column says for the peer
PEER_CENTRE = "its own network"


def _peer_ratios(runs) -> dict:
    """``(dataset, method) -> mean over splits of volume / the peer's volume on the same split``."""
    peer = runs.loc[runs.method == PEER, ["dataset", "seed", "volume_paper"]].rename(columns={"volume_paper": "peer"})
    paired = runs.merge(peer, on=["dataset", "seed"])
    return (paired.volume_paper / paired.peer).groupby([paired.dataset, paired.method], sort=False).mean().to_dict()


def centre_tables(runs, t1, out: Path, command: str, wall: float, suffix: str = "") -> None:
    """``centre.{csv,md}``: Table I's columns plus the centre chosen (how often each candidate won)
    and its mean test RMSE (Euclidean, in the loader's target units)."""
    chosen = runs.groupby("dataset").apply(
        lambda g: ", ".join(f"{name} {n}/{g.seed.nunique()}" for name, n in
                            g.drop_duplicates("seed").centre.value_counts().items()), include_groups=False)
    rmse = runs.drop_duplicates(["dataset", "seed"]).groupby("dataset").centre_rmse.mean()
    own = runs.groupby(["dataset", "method"]).region_centre_rmse.mean()
    table = t1.copy()
    table["centre"] = [PEER_CENTRE if m == PEER else c for m, c in zip(table.method, table.dataset.map(chosen))]
    table["centre_rmse_mean"] = [own.get((d, m), np.nan) if m == PEER else r
                                 for d, m, r in zip(table.dataset, table.method, table.dataset.map(rmse))]
    table["region_centre_rmse_mean"] = [own.get((d, m), np.nan) for d, m in zip(table.dataset, table.method)]
    table.to_csv(out / f"centre{suffix}.csv", index=False)
    lines = ["## The centre chosen by `--centre auto`, every method on it", "",
             f"Command: `{command}`; this invocation's wall time {wall:.0f} s (cached splits are not re-run). "
             "The paper's split per seed; the centre is chosen per split by 5-fold cross-validation on the train "
             "part among the candidates (`auto-centre`: the paper SVR, the scaled SVR, kNN, boosted trees and their "
             "blend `stack`, i.e. `--centre-candidates paper,scaled,knn,hgb,stack`; "
             "`auto-centre-mlp`: and the MLP) after the RSSI step where the columns look like RSSI; `centre` says "
             "how often each won. Volume: det(alpha C)^1/2 in the loader's units "
             "(paper convention); centre RMSE: Euclidean, same units, of the shared centre; `region centre RMSE`: "
             f"of the regions' own centres (LMVE's corrected one with a mean head; `{PEER}` is MAPIE 1.6's "
             "multivariate standardised-residual score with its own network for mean and covariance, on the same "
             "splits and features, region read off its covariance and conformal threshold). `vs peer`: volume over "
             "the peer's on the same splits (mean of the per-split ratios).", "",
             "| dataset | method | splits | coverage % | volume | vs peer | centre | centre RMSE | region centre RMSE |",
             "|---|---|---|---|---|---|---|---|---|"]
    ratio = _peer_ratios(runs)
    for _, r in table.iterrows():
        vs = ratio.get((r.dataset, r.method))
        lines.append(f"| {r.dataset} | {r.method} | {r.n_splits} | {100 * r.coverage_mean:.1f} "
                     f"({100 * (r.coverage_std if r.coverage_std == r.coverage_std else 0):.1f}) | "
                     f"{r.volume_mean:.4g} ({r.volume_std:.3g}) | {'-' if vs is None else f'{vs:.2f}'} | {r.centre} | "
                     f"{r.centre_rmse_mean:.4g} | {r.region_centre_rmse_mean:.4g} |")
    (out / f"centre{suffix}.md").write_text("\n".join(lines) + "\n")


def reference_pairs(runs) -> str:
    """Markdown: the reference-quantile rule against the exact one on the same fits, per dataset and method
    (mean over splits of the volume ratio, coverage of each), and the share of the gap to the paper's Table I
    it explains: ``(exact - reference) / (exact - paper)`` in the paper's units."""
    lines = ["", "### The reference rule against the exact one, paired", "",
             "The same fits per split, calibrated twice: the exact split-conformal threshold (the "
             "`ceil((n + 1) eta)`-th calibration score; what the bundles serve) and the paper's reference code's "
             "`np.quantile(scores, floor((n + 1) eta) / n)` (interpolated). `ref / exact`: the mean over splits "
             "of the per-split volume ratio; `gap explained`: how much of our exact volume's excess over the "
             "paper's Table I the reference rule removes, `(exact - reference) / (exact - paper)`, where that excess is "
             "over 5 %.", "",
             "| dataset | method | splits | coverage exact % | coverage ref % | volume exact | volume ref | "
             "ref / exact | exact / paper | ref / paper | gap explained |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for (d, m), g in runs.groupby(["dataset", "method"], sort=False):
        if g.volume_paper_exact.isna().any():
            continue
        factor = PAPER_UNIT_FACTOR.get(d, 1.0)
        paper = PAPER_TABLE1.get(d, {}).get(m, (None, None))[1]
        exact, ref = g.volume_paper_exact.mean(), g.volume_paper.mean()
        cells = ["-", "-", "-"]
        if paper:
            gap = exact * factor - paper
            cells = [f"{exact * factor / paper:.2f}", f"{ref * factor / paper:.2f}",
                     f"{100 * (exact - ref) * factor / gap:.0f} %" if gap > 0.05 * paper else "under 5 %"]
        lines.append(f"| {d} | {m} | {g.seed.nunique()} | {100 * g.coverage_exact.mean():.1f} | "
                     f"{100 * g.coverage.mean():.1f} | {exact:.4g} | {ref:.4g} | "
                     f"{(g.volume_paper / g.volume_paper_exact).mean():.3f} | {' | '.join(cells)} |")
    return "\n".join(lines) + "\n"


def markdown_table(t1, title: str) -> str:
    lines = [f"## {title}", "",
             "Coverage in % and volume as mean (std) over splits. **Volume is the paper's convention, "
             "det(C)^1/2 without the unit-ball constant** (multiply by pi for the area). "
             "`paper` columns are the paper's Table I. `in paper units` = our volume times the unit "
             "factor of the dataset's loader (below), and `ratio` = that / paper.", "",
             "| dataset | method | splits | coverage % | paper cov. % | volume | in paper units | paper volume "
             "| ratio | fit s |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for _, r in t1.iterrows():
        paper_cov, paper_vol = PAPER_TABLE1.get(r.dataset, {}).get(r.method, (None, None))
        factor = PAPER_UNIT_FACTOR.get(r.dataset, 1.0)
        ratio = f"{r.volume_mean * factor / paper_vol:.2f}" if paper_vol else "-"
        lines.append(f"| {r.dataset} | {r.method} | {r.n_splits} | {100 * r.coverage_mean:.1f} "
                     f"({100 * (r.coverage_std if r.coverage_std == r.coverage_std else 0):.1f}) | "
                     f"{paper_cov if paper_cov is not None else '-'} | {r.volume_mean:.4g} ({r.volume_std:.3g}) | "
                     f"{r.volume_mean * factor:.3g} | {paper_vol if paper_vol is not None else '-'} | {ratio} | "
                     f"{r.fit_seconds_mean:.2f} |")
    notes = [f"- {d}: unit factor {PAPER_UNIT_FACTOR[d]:.0e}" for d in dict.fromkeys(t1.dataset)
             if d in PAPER_UNIT_FACTOR]
    if notes:
        lines += ["", "Unit factors: the loaders scale both targets (residential_building / 100; "
                  "indoor_localization in km, not m) and det(C)^1/2 scales with the product of the two target "
                  "scales, while the paper reports its volumes in the original units.", *notes]
    return "\n".join(lines) + "\n"


def plot_volumes(runs, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    datasets = list(dict.fromkeys(runs.dataset))
    fig, axes = plt.subplots(1, len(datasets), figsize=(4.2 * len(datasets), 3.8), squeeze=False)
    for ax, d in zip(axes[0], datasets):
        sub = runs[runs.dataset == d]
        methods = list(dict.fromkeys(sub.method))
        ax.boxplot([sub[sub.method == m].volume_paper for m in methods], tick_labels=[m.upper() for m in methods],
                   showfliers=False)
        for i, m in enumerate(methods, start=1):
            paper = PAPER_TABLE1.get(d, {}).get(m)
            if paper:  # drawn in our units
                ax.plot([i - 0.35, i + 0.35], [paper[1] / PAPER_UNIT_FACTOR.get(d, 1.0)] * 2, color="tab:red",
                        lw=1.5, label="paper (in our units)" if i == 1 else None)
        ax.set_yscale("log")
        ax.set_title(f"{d} ({sub.seed.nunique()} splits)", fontsize=10)
        ax.set_ylabel("det(C)^1/2 (paper convention)")
    if axes[0][0].get_legend_handles_labels()[0]:  # a data set of the paper's: its figures drawn
        axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def parse_seeds(text: str) -> list[int]:
    """Split seeds from ``--seeds``: ranges ``A-B`` (inclusive) and single seeds, comma-separated (``0-49``,
    ``0,3,7``, ``0-4,9``); empty parts are skipped. The benchmarks' ``--seeds`` use it too."""
    out = []
    for part in text.split(","):
        if "-" in part:
            a, b = part.split("-")
            out += list(range(int(a), int(b) + 1))
        elif part.strip():
            out.append(int(part))
    return out


def build_parser() -> argparse.ArgumentParser:
    from training.datasets import PAPER_DATASETS

    p = argparse.ArgumentParser(prog="lmve-bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--datasets", default="enb,ble_rssi,residential_building",
                   help=f"comma-separated subset of {','.join(PAPER_DATASETS)},synthetic")
    p.add_argument("--seeds", default="0-49", help="split seeds, e.g. 0-49 or 0,3,7 (default 0-49)")
    p.add_argument("--methods", default="ge,nle,lmve,copula",
                   help=f"comma-separated: ge, nle, lmve, copula, and {PEER} (the peer: MAPIE 1.6's multivariate "
                        "standardised residuals, its own network for mean and covariance; the bench extra)")
    p.add_argument("--coverage", type=float, default=0.9, help="target coverage eta (default 0.9)")
    p.add_argument("--variant", default="paper", choices=sorted(VARIANTS),
                   help="what differs from the paper's protocol (default paper; training.bench.VARIANTS); the "
                        "results carry the suffix _VARIANT")
    p.add_argument("--jobs", type=int, default=2, help="local worker processes (default 2)")
    p.add_argument("--scheduler", default=None, help="Dask scheduler address (tcp://host:8786); default: local")
    p.add_argument("--cache", type=Path, default=Path("benchmarks/cache"),
                   help="one JSON file per split, so a rerun resumes (default benchmarks/cache)")
    p.add_argument("--out", type=Path, default=Path("benchmarks/results"),
                   help="where the tables go (default benchmarks/results)")
    p.add_argument("--data-dir", default=None, help="folder of the paper datasets (default $LMVE_DATA_DIR)")
    p.add_argument("--lmve-max-steps", type=int, default=None, help="LMVE: cap on steps per phase")
    p.add_argument("--peer-epochs", type=int, default=300, help=f"{PEER}: training epochs (default 300, MAPIE's)")
    p.add_argument("--protocol", default=None,
                   help="shift protocols instead of the paper's split, comma-separated: random, leave-location-out, "
                        "leave-phone-out, leave-user-out (indoor_localization); writes shift.csv and shift.md")
    p.add_argument("--calibration", default="rows,groups,groups-pooled,across",
                   help="with --protocol: which calibrations to tabulate: rows, groups (exact rule), groups-pooled, "
                        "across (across-PHONEID / across-USERID on leave-phone-out / leave-user-out: calibration "
                        "units held out of training, training.across; all are computed)")
    p.add_argument("--cached-only", action="store_true",
                   help="tabulate the splits already in the cache and run none (says which are missing)")
    p.add_argument("--merge", action="store_true",
                   help="keep the rows of datasets not in this run from the existing runs csv, and tabulate all")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    return p


def main(argv: list[str] | None = None) -> int:
    require_training_install("lmve-bench")
    args = build_parser().parse_args(argv)
    try:
        datasets = [d.strip() for d in args.datasets.split(",") if d.strip()]
        methods = tuple(m.strip() for m in args.methods.split(",") if m.strip())
        overrides = {"max_steps": args.lmve_max_steps} if args.lmve_max_steps else {}
        protocols = [None] if args.protocol is None else [p.strip() for p in args.protocol.split(",") if p.strip()]
        if args.protocol is not None:
            from training.shift import CALIBRATIONS, PROTOCOLS

            bad = [p for p in protocols if p not in PROTOCOLS]
            bad += [c for c in args.calibration.split(",") if c not in CALIBRATIONS]
            if bad:
                raise InputError(f"unknown protocol or calibration {', '.join(bad)}; protocols: {', '.join(PROTOCOLS)}; "
                                 f"calibrations: {', '.join(CALIBRATIONS)}")
        tasks = [SplitTask(d, s, args.variant, args.coverage, methods, overrides, args.data_dir, protocol,
                           args.peer_epochs)
                 for protocol in protocols for d in datasets for s in parse_seeds(args.seeds)]
        for d in set(datasets):  # fail early on a bad name or a missing data directory
            _dataset(d, args.data_dir)
        if args.cached_only:
            missing = [t for t in tasks if not (args.cache / t.key()).is_file() and from_twin(t, str(args.cache)) is None]
            tasks = [t for t in tasks if t not in missing]
            if missing:
                print(f"lmve-bench: --cached-only: {len(missing)} of {len(tasks) + len(missing)} splits are not "
                      f"in {args.cache} and are left out, e.g. {missing[0].key()}", file=sys.stderr)
            if not tasks:
                raise InputError(f"--cached-only: none of the requested splits is in {args.cache}")
        t0 = time.perf_counter()
        records = run_tasks(tasks, args.cache, args.jobs, args.scheduler, progress=not args.quiet)
        wall = time.perf_counter() - t0
    except LMVEError as exc:
        print(f"lmve-bench: error: {exc}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    if args.protocol is not None:
        from training.shift import shift_tables

        table, md = shift_tables(records, args.calibration.split(","),
                                 f"lmve-bench {' '.join(argv if argv is not None else sys.argv[1:])}", wall)
        table.to_csv(args.out / "shift.csv", index=False)
        (args.out / "shift.md").write_text(md)
        print(md)
        return 0
    runs = runs_table(records)
    suffix = "" if args.variant == "paper" else f"_{args.variant}"
    kept = []
    if args.merge and (args.out / f"runs{suffix}.csv").is_file():
        import pandas as pd

        old = pd.read_csv(args.out / f"runs{suffix}.csv")
        old = old[~old.dataset.isin(set(runs.dataset))]
        kept = list(dict.fromkeys(old.dataset))
        runs = pd.concat([old, runs], ignore_index=True)
    t1 = table1(runs)
    runs.to_csv(args.out / f"runs{suffix}.csv", index=False)
    t1.to_csv(args.out / f"table1{suffix}.csv", index=False)
    (args.out / f"table1{suffix}.md").write_text(
        markdown_table(t1, f"Table I reproduction, variant `{args.variant}`, coverage {args.coverage}")
        + f"\nCommand: `lmve-bench {' '.join(argv if argv is not None else sys.argv[1:])}`; "
          f"this invocation's wall time {wall:.0f} s (cached splits are not re-run)."
        + (f" Rows of {', '.join(kept)} are kept from the previous `runs{suffix}.csv` (--merge)." if kept else "")
        + _twin_note(records) + "\n"
        + (reference_pairs(runs) if "volume_paper_exact" in runs and runs.volume_paper_exact.notna().any() else ""))
    plot_volumes(runs, args.out / f"volumes{suffix}.png")
    if args.variant.startswith(("auto-centre", "joint-centre")):
        centre_tables(runs, t1, args.out, f"lmve-bench {' '.join(argv if argv is not None else sys.argv[1:])}", wall,
                      suffix="" if args.variant == "auto-centre" else suffix)
    print(markdown_table(t1, f"variant {args.variant}"))
    print(f"wall {wall:.1f} s; results in {args.out}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
