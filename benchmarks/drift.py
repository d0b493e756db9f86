"""UJIIndoorLoc drift: held-out phones streamed in time order; before and after recalibration, and adaptive.

    python -m benchmarks.drift --seeds 0-9 [--jobs 2] [--cached-only]

One draw (seed) holds out whole phones (``PHONEID``, about 20 % of the rows) as the *stream*,
sorted by ``TIMESTAMP``; of the other phones' rows a random 10 % calibrates and the rest trains
``lmve-train``'s pipeline (kNN centre after the RSSI step; GE, NLE, LMVE at 90 %), as a deployed
bundle would be. Then, per method:

* ``before``: the bundle as trained, on the second half of the stream;
* ``recalibrated``: ``RegionModel.recalibrated`` (what ``lmve-recalibrate`` and
  ``/admin/recalibrate`` run) with k = 25, 50, 100, 200 fresh rows (5 draws per seed), drawn at
  random from the first half of the stream and evaluated on the second half (the rows come before
  the ones they serve), or drawn from the whole stream and evaluated on the other rows (fresh rows
  exchangeable with the served ones: what the guarantee assumes);
* ``adaptive``: the whole stream fed in time order to an online rule, each row scored against the
  region served before its update (long-run coverage): ACI (Gibbs & Candes 2021) at several step
  sizes ``gamma``, and quantile tracking (conformal P control, Angelopoulos et al. 2023) at
  several learning rates (in units of the bundle's threshold).

Volumes are the paper's det(alpha C)^1/2 in m^2 (the loader's km^2 times 1e6), averaged over the
evaluated rows. Cached per seed under ``benchmarks/cache/drift/``; writes
``benchmarks/results/drift.{csv,md}``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time

import numpy as np

from benchmarks.common import (M2_PER_KM2, RESULTS, cache_dir, command, parallel, parse_seeds, write_csv, write_json,
                               write_text)


CACHE = cache_dir("drift")
OUT = RESULTS
METHODS = ("ge", "nle", "lmve")
FRESH = (25, 50, 100, 200)
SUBSETS = 5
FRESH_FROM = {"first-half": "k random rows of the stream's first half; evaluated on its second half",
              "anywhere": "k random rows of the whole stream; evaluated on the other rows"}
GAMMAS = (0.005, 0.01, 0.02, 0.05)
LRS = (0.01, 0.05, 0.1)
COVERAGE = 0.9


def stream_split(ds, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(train, calibration, stream)`` row indices; the stream (held-out phones) in time order."""
    from training.data.datasets import group_codes_of
    from benchmarks.harness.shift import take_groups

    rng = np.random.default_rng(seed)
    m = ds.X.shape[0]
    phones = group_codes_of({"PHONEID": ds.meta["PHONEID"]})
    stream = take_groups(phones, np.arange(m), math.ceil(0.2 * m), rng)
    rest = rng.permutation(np.setdiff1d(np.arange(m), stream))
    n_cal = math.ceil(0.1 * len(rest))
    order = np.lexsort((stream, ds.meta["TIMESTAMP"][stream]))
    return np.sort(rest[n_cal:]), np.sort(rest[:n_cal]), stream[order]


def run(seed: int, data_dir: str | None) -> dict:
    path = CACHE / f"seed_{seed:03d}.json"
    if path.is_file():
        return json.loads(path.read_text())
    import torch

    from models.calibration.adaptive import AdaptiveConformal, QuantileTracker, run_stream
    from training.data.datasets import load_dataset
    from training.pipeline import Split, TrainConfig, train

    torch.set_num_threads(1)
    t0 = time.perf_counter()
    ds = load_dataset("indoor_localization", data_dir)
    tr, cal, stream = stream_split(ds, seed)
    result = train(ds, TrainConfig(seed=seed, methods=METHODS, centre="knn", rssi="auto", coverage=COVERAGE,
                                   use_groups=False),
                   split=Split(train=tr, calibration=cal, test=stream))
    fit_s = time.perf_counter() - t0
    model = result.model
    Xs, Ys = ds.X[stream], ds.Y[stream]
    T = len(stream)
    pool, ev = np.arange(T // 2), np.arange(T // 2, T)
    scores = model.score_points(Xs, Ys)
    Z = model.standardise(Xs)
    rng = np.random.default_rng(1000 + seed)
    record = {"seed": seed, "stream_rows": T, "train_rows": len(tr), "calibration_rows": len(cal),
              "stream_phones": sorted({int(p) for p in ds.meta["PHONEID"][stream]}), "fit_seconds": fit_s,
              "methods": {}}
    # fresh rows: from the first half, evaluated on the second; or from anywhere, evaluated on the rest
    fresh_draws = {(src, k): [rng.choice(pool if src == "first-half" else np.arange(T), size=k, replace=False)
                              for _ in range(SUBSETS)] for src in FRESH_FROM for k in FRESH}
    recal = {key: [(idx, model.recalibrated(Xs[idx], Ys[idx], random_state=j)) for j, idx in enumerate(draws)]
             for key, draws in fresh_draws.items()}
    for name in METHODS:
        reg = model.methods[name]
        s = scores[name]
        sqrtdet = np.sqrt(np.linalg.det(reg.shape_.predict_shape(Z))) * M2_PER_KM2
        a = reg.threshold(None)
        out = {"before": {"coverage": float(np.mean(s[ev] <= a)), "volume": float(a * np.mean(sqrtdet[ev])),
                          "coverage_whole_stream": float(np.mean(s <= a))},
               "recalibrated": {}, "adaptive": {}}
        for (src, k), models in recal.items():
            cov, vol = [], []
            for idx, new in models:
                rows = ev if src == "first-half" else np.setdiff1d(np.arange(T), idx)
                b = new.methods[name].threshold(None)
                cov.append(float(np.mean(s[rows] <= b)))
                vol.append(float(b * np.mean(sqrtdet[rows])))
            out["recalibrated"][f"{src}/{k}"] = {"coverage": cov, "volume": vol}
        # the real serving path agrees with the direct computation (one check per method and seed)
        check = recal[("first-half", FRESH[-1])][0][1].assess(Xs[ev], Ys[ev], method=name)
        assert abs(float(np.mean(check.inside)) - out["recalibrated"][f"first-half/{FRESH[-1]}"]["coverage"][0]) < 1e-12
        cal_ = reg.calibrator_
        rules = {f"aci gamma={g}": AdaptiveConformal(target=COVERAGE, quantile=cal_.quantile, gamma=g,
                                                      min_level=0.5, max_level=cal_.max_coverage) for g in GAMMAS}
        rules.update({f"quantile-tracking lr={lr}": QuantileTracker(target=COVERAGE, q0=a, lr=lr) for lr in LRS})
        for label, rule in rules.items():
            misses, thresholds = run_stream(rule, s)
            half = T // 2
            out["adaptive"][label] = {"coverage": float(1 - misses.mean()),
                                      "coverage_second_half": float(1 - misses[half:].mean()),
                                      "volume": float(np.mean(thresholds * sqrtdet)),
                                      "volume_second_half": float(np.mean(thresholds[half:] * sqrtdet[half:]))}
        record["methods"][name] = out
    record["wall_seconds"] = time.perf_counter() - t0
    write_json(path, record)
    return record


def tabulate(records: list[dict]) -> list[dict]:
    rows = []
    n = len(records)
    for name in METHODS:
        cov = [r["methods"][name]["before"]["coverage"] for r in records]
        vol = [r["methods"][name]["before"]["volume"] for r in records]
        rows.append(_row("before", 0, name, "bundle as trained", "second half", cov, vol))
        cov = [r["methods"][name]["before"]["coverage_whole_stream"] for r in records]
        rows.append(_row("before", 0, name, "bundle as trained", "whole stream", cov, [np.nan]))
        for src in FRESH_FROM:
            for k in FRESH:
                cov = [c for r in records for c in r["methods"][name]["recalibrated"][f"{src}/{k}"]["coverage"]]
                vol = [v for r in records for v in r["methods"][name]["recalibrated"][f"{src}/{k}"]["volume"]]
                rows.append(_row("recalibrated", k, name, f"fresh from {src} ({SUBSETS} draws per seed)",
                                 "second half" if src == "first-half" else "rest of the stream", cov, vol))
        for label in records[0]["methods"][name]["adaptive"]:
            for part, suffix in (("whole stream", ""), ("second half", "_second_half")):
                cov = [r["methods"][name]["adaptive"][label]["coverage" + suffix] for r in records]
                vol = [r["methods"][name]["adaptive"][label]["volume" + suffix] for r in records]
                rows.append(_row("adaptive", 0, name, label, part, cov, vol))
    assert all(r["n_draws"] in (n, n * SUBSETS) for r in rows)
    return rows


def _row(scenario, k, method, variant, evaluated_on, cov, vol) -> dict:
    return {"scenario": scenario, "fresh_rows": k, "n_draws": len(cov), "coverage_mean": float(np.mean(cov)),
            "coverage_std": float(np.std(cov, ddof=1)) if len(cov) > 1 else 0.0,
            "volume_mean": float(np.nanmean(vol)) if np.isfinite(vol).any() else float("nan"),
            "method": method, "variant": variant, "evaluated_on": evaluated_on}


def main(argv: list[str] | None = None) -> int:
    import pandas as pd

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", default="0-9")
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--data-dir", default=None)
    p.add_argument("--cached-only", action="store_true", help="tabulate the cached seeds; run nothing")
    args = p.parse_args(argv)
    seeds = parse_seeds(args.seeds)
    if args.cached_only:
        seeds = [s for s in seeds if (CACHE / f"seed_{s:03d}.json").is_file()]
    t0 = time.perf_counter()
    records = parallel(run, [(s, args.data_dir) for s in seeds], args.jobs, desc="seeds")
    wall = time.perf_counter() - t0
    rows = tabulate(records)
    table = pd.DataFrame(rows)
    write_csv(table, OUT / "drift.csv")
    stream = np.mean([r["stream_rows"] for r in records])
    lines = ["## Drift on UJIIndoorLoc: held-out phones streamed in time order", "",
             f"Command: `{command('drift', argv)}` "
             f"({len(records)} seeds; this invocation's wall time {wall:.0f} s, cached seeds are not re-run; "
             f"mean fit {np.mean([r['fit_seconds'] for r in records]):.0f} s per seed). "
             f"Stream: whole phones held out (mean {stream:.0f} rows), sorted by TIMESTAMP; the bundle trained and "
             "calibrated (rows, 90 %) on the other phones with a kNN centre after the RSSI step. "
             "`before` and `recalibrated` are evaluated on the second half of the stream (the fresh rows are drawn "
             "from the first half); `adaptive` scores every row against the region served before its update. "
             "Coverage in %, mean (std over draws); volume: mean det(alpha C)^1/2 in m^2.", ""]
    for name in METHODS:
        lines += [f"### {name}", "", "| scenario | fresh rows | variant | evaluated on | draws | coverage % | volume m^2 |",
                  "|---|---|---|---|---|---|---|"]
        for r in rows:
            if r["method"] != name:
                continue
            vol = "" if not np.isfinite(r["volume_mean"]) else f"{r['volume_mean']:.4g}"
            lines.append(f"| {r['scenario']} | {r['fresh_rows'] or ''} | {r['variant']} | {r['evaluated_on']} | "
                         f"{r['n_draws']} | {100 * r['coverage_mean']:.1f} ({100 * r['coverage_std']:.1f}) | {vol} |")
        lines.append("")
    write_text(OUT / "drift.md", "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
