"""The learned shape against GE and NLE, free of the calibration draw's noise.

    python -m benchmarks.shape_survey [--datasets synthetic] [--seeds 0-19] [--draws 300] [--jobs 2]

On the splits of ``benchmarks.primary`` (``lmve-train``'s default run: ``--centre auto``, grouped by
position when most rows repeat a position, the test part cut in halves and every figure from the second),
each method's regions are evaluated at the threshold of every one of ``--draws`` calibrations rather than at the
single one a bundle holds. Under ``group-subsample`` (the grouped survey's rule) a calibration keeps one random
reading per position; which reading it keeps moves one split's served area by tens of percent (one split:
346 against 137 m^2 expected), more than the shape methods differ, so comparing single draws compares draws.
Each draw is the product's own :class:`~models.calibration.conformal.SplitConformalCalibrator` with
``random_state`` 0 .. draws - 1 on the same calibration scores; its regions are the product's own
(:meth:`~models.model.RegionModel.predict_region` with that threshold, scored by
:func:`training.pipeline.region_metrics`). A rule without a draw (``rows``) has one threshold.

LMVE is fitted twice per split, on the same centre: with its default ensemble (``n_ensemble="auto"``) and
with one network (``n_ensemble=1``, row ``lmve-1``), so the table shows what the ensemble buys.

Writes ``benchmarks/results/shape_survey.csv`` (``dataset,method,n_splits,coverage_mean,volume_mean,
served_coverage_mean,served_volume_mean``: per method, means over splits of the expected coverage and area over
the draws, and of the one draw the bundle holds) and ``shape_survey.md`` (with LMVE's area over the smaller of
GE's and NLE's, and its bootstrap standard error over splits). Each split is cached as JSON under
``benchmarks/cache/shape_survey/`` (resumable).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace

import numpy as np

from benchmarks.common import RESULTS, cache_dir, cached, command, commit, parallel, parse_seeds, to_m2, write_text
from benchmarks.harness.splits import default_dataset, halves

CACHE = cache_dir("shape_survey")
OUT = RESULTS
METHODS = ("ge", "nle", "lmve", "lmve-1")


def draw_figures(model, method: str, scores, groups_cal, X_test, Y_test, draws: int) -> dict:
    """Coverage and mean area of ``method``'s regions on the test rows, averaged over the thresholds of
    ``draws`` calibrations (one per ``random_state``) of its calibration ``scores``."""
    from models.calibration.conformal import SplitConformalCalibrator
    from training.pipeline import region_metrics

    rule, eta = model.methods[method].calibrator_.rule, model.coverage
    seeds = range(draws) if rule == "group-subsample" else range(1)
    alphas = np.array([SplitConformalCalibrator(rule, s).fit(scores, groups_cal).quantile(eta) for s in seeds])
    values, counts = np.unique(alphas, return_counts=True)
    figures = [region_metrics(model.predict_region(X_test, method=method, thresholds={method: (a, eta)}).regions,
                              Y_test) for a in values]
    w = counts / counts.sum()
    return {"coverage": float(w @ [f["coverage"] for f in figures]),
            "volume": float(w @ [f["volume"] for f in figures]), "thresholds": int(len(values))}


def run_one(dataset: str, seed: int, draws: int) -> dict:
    """One split's record (cached per number of draws)."""
    path = CACHE / dataset / f"seed_{seed:03d}.json"
    if path.is_file() and json.loads(path.read_text())["draws"] != draws:
        path.unlink()  # another number of draws: run again
    return cached(path, lambda: _run(dataset, seed, draws))


def _run(dataset: str, seed: int, draws: int) -> dict:
    from training.pipeline import TrainConfig, default_split, train

    ds = default_dataset(dataset, seed)
    config = TrainConfig(seed=seed, methods=("ge", "nle", "lmve"), centre="auto", rssi="auto", progress=False)
    split = halves(default_split(ds, config), ds.groups, seed)
    full = train(ds, config, split=split)
    single = train(ds, replace(config, methods=("lmve",), fallbacks=False, primary_folds=0,
                               method_params={"lmve": {"n_ensemble": 1}}), split=split)
    cal, test = split.calibration, split.test
    g_cal = None if ds.groups is None else np.asarray(ds.groups)[cal]
    record = {"dataset": dataset, "seed": seed, "draws": draws, "centre": full.centre.get("name"),
              "centre_lmve_1": single.centre.get("name"),
              "members": full.model.methods["lmve"].shape_.n_members_, "methods": {}}
    for result, names in ((full, {"ge": "ge", "nle": "nle", "lmve": "lmve"}), (single, {"lmve-1": "lmve"})):
        scores = result.model.score_points(ds.X[cal], ds.Y[cal])  # every method's, scored once
        for name, method in names.items():
            served = result.metrics[method]
            record["methods"][name] = {
                **draw_figures(result.model, method, scores[method], g_cal, ds.X[test], ds.Y[test], draws),
                "served_coverage": served["coverage"], "served_volume": served["volume"]}
    return record


def ratio_se(num: np.ndarray, den: np.ndarray, rng: np.random.Generator, n_boot: int = 2000) -> float:
    """Bootstrap standard error over splits of ``mean(num) / mean(den)`` (splits resampled in pairs)."""
    idx = rng.integers(0, len(num), size=(n_boot, len(num)))
    return float(np.std(num[idx].mean(1) / den[idx].mean(1), ddof=1))


def main(argv: list[str] | None = None) -> int:
    import pandas as pd

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--datasets", default="synthetic", help="comma-separated built-in data sets (benchmarks.primary's)")
    p.add_argument("--seeds", default="0-19", help="split seeds A-B")
    p.add_argument("--draws", type=int, default=300, help="calibration draws per split (group-subsample)")
    p.add_argument("--jobs", type=int, default=2, help="parallel splits")
    args = p.parse_args(argv)
    datasets = [d for d in args.datasets.split(",") if d]
    todo = [(d, s) for d in datasets for s in parse_seeds(args.seeds)]
    records = parallel(run_one, [(d, s, args.draws) for d, s in todo], args.jobs, desc="splits")
    rows, lines = [], []
    lines += ["## The learned shape against GE and NLE, over calibration draws", "",
              f"Command: `{command('shape_survey', argv)}` at "
              f"commit `{commit()}`. primary.py's splits (lmve-train's default run; figures from the evaluation "
              "half). `area`, `coverage`: means over splits of each method's expected mean area (m^2) and coverage "
              "over the calibration draws; `served`: the one draw the bundle holds. `lmve`: the default ensemble; "
              "`lmve-1`: one network on the same centre. `/ min(GE, NLE)`: the method's mean area over the smaller of "
              "GE's and NLE's, ± its bootstrap standard error over splits (splits resampled in pairs).", "",
              "| data set | splits | method | area | coverage | / min(GE, NLE) | served area | served coverage |",
              "|---|---|---|---|---|---|---|---|"]
    rng = np.random.default_rng(0)
    for d in datasets:
        runs = [r for r in records if r["dataset"] == d]
        k = to_m2(d)
        vol = {m: k * np.array([r["methods"][m]["volume"] for r in runs]) for m in METHODS}
        best = min(("ge", "nle"), key=lambda m: vol[m].mean())
        for m in METHODS:
            f = {key: np.mean([r["methods"][m][key] for r in runs])
                 for key in ("coverage", "volume", "served_coverage", "served_volume")}
            rows.append({"dataset": d, "method": m, "n_splits": len(runs), "coverage_mean": f["coverage"],
                         "volume_mean": k * f["volume"], "served_coverage_mean": f["served_coverage"],
                         "served_volume_mean": k * f["served_volume"]})
            ratio = vol[m].mean() / vol[best].mean()
            lines.append(f"| {d} | {len(runs)} | {m} | {k * f['volume']:.4g} | {100 * f['coverage']:.1f} % | "
                         f"{ratio:.3f} ± {ratio_se(vol[m], vol[best], rng):.3f} | {k * f['served_volume']:.4g} | "
                         f"{100 * f['served_coverage']:.1f} % |")
    write_text(OUT / "shape_survey.csv", pd.DataFrame(rows).to_csv(index=False, float_format="%.6g"))
    write_text(OUT / "shape_survey.md", "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
