"""UJIIndoorLoc: the centre and the fingerprint preprocessing against the SVR, at new positions.

    python -m benchmarks.centre_uji --seeds 0-2 [--methods ge,nle] [--jobs 2]

Leave-location-out splits (``benchmarks.harness.shift``: whole surveyed positions held out for test and for
grouped calibration; shapes from 5-fold group out-of-fold residuals). Per split and centre
configuration: the centre's test error in metres (median, mean), and per method the coverage
and mean det(alpha C)^1/2 in m^2 under grouped calibration (exact rule). Configurations:
``svr``: the scaled SVR on the raw features (what the shift benchmark uses); ``svr-rssi``: the
same after the RSSI step; ``knn-rssi``: 3-NN fingerprinting after the RSSI step; ``knn``: 3-NN
on the raw codes. Cached per (configuration, seed) under ``benchmarks/cache/centre_uji/``;
writes ``benchmarks/results/centre_uji.{csv,md}``.
"""

from __future__ import annotations

import argparse
import sys

from benchmarks.common import M_PER_KM as M
from benchmarks.common import RESULTS, cache_dir, cached, command, parallel, parse_seeds, write_csv, write_text

CONFIGS = {"svr": ("scaled", "off"), "svr-rssi": ("scaled", "auto"), "knn": ("knn", "off"),
           "knn-rssi": ("knn", "auto")}
CACHE = cache_dir("centre_uji")
OUT = RESULTS


def run(config: str, seed: int, methods: tuple[str, ...], data_dir: str | None) -> dict:
    """One split of one configuration (cached)."""
    return cached(CACHE / config / "-".join(methods) / f"seed_{seed:03d}.json",
                  lambda: _run(config, seed, methods, data_dir))


def _run(config: str, seed: int, methods: tuple[str, ...], data_dir: str | None) -> dict:
    import torch

    from benchmarks.harness.shift import run_shift_split
    from training.data.datasets import load_dataset

    torch.set_num_threads(1)
    centre, rssi = CONFIGS[config]
    record = run_shift_split(load_dataset("indoor_localization", data_dir), "leave-location-out", seed, methods,
                             centre=centre, rssi=rssi)
    record["config"] = config
    return record


def main(argv: list[str] | None = None) -> int:
    import pandas as pd

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", default="0-2")
    p.add_argument("--configs", default=",".join(CONFIGS))
    p.add_argument("--methods", default="ge,nle")
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--data-dir", default=None)
    p.add_argument("--cached-only", action="store_true", help="tabulate the cached splits; run nothing")
    args = p.parse_args(argv)
    configs = [c for c in args.configs.split(",") if c]
    methods = tuple(m for m in args.methods.split(",") if m)
    tasks = [(c, s) for s in parse_seeds(args.seeds) for c in configs]
    if args.cached_only:
        tasks = [(c, s) for c, s in tasks if (CACHE / c / "-".join(methods) / f"seed_{s:03d}.json").is_file()]
    records = parallel(run, [(c, s, methods, args.data_dir) for c, s in tasks], args.jobs, desc="splits")
    rows = []
    for r in records:
        for key, m in r["results"].items():
            calibration, method = key.split("/")
            if calibration != "groups":
                continue
            rows.append({"config": r["config"], "seed": r["seed"], "method": method,
                         "centre_median_m": r["centre_test"]["median"] * M, "centre_mean_m": r["centre_test"]["mean"] * M,
                         "coverage": m["coverage"], "volume_m2": m["volume_paper"] * M * M,
                         "seconds": r["wall_seconds"]})
    runs = pd.DataFrame(rows)
    table = runs.groupby(["config", "method"], sort=False).agg(
        n_splits=("seed", "nunique"), centre_median_m=("centre_median_m", "mean"),
        centre_mean_m=("centre_mean_m", "mean"), coverage_mean=("coverage", "mean"),
        volume_mean_m2=("volume_m2", "mean"), split_seconds=("seconds", "mean")).reset_index()
    write_csv(table, OUT / "centre_uji.csv")
    lines = ["## UJIIndoorLoc at new positions: the centre and the RSSI step", "",
             f"Command: `{command('centre_uji', argv)}`. "
             "Leave-location-out splits, grouped calibration (exact rule) at 90 %; the centre's test error "
             "(Euclidean, metres: median and mean, averaged over splits) and the mean det(alpha C)^1/2 in m^2.", "",
             "| centre | method | splits | centre median m | centre mean m | coverage % | volume m^2 | split s |",
             "|---|---|---|---|---|---|---|---|"]
    for _, t in table.iterrows():
        lines.append(f"| {t.config} | {t.method} | {t.n_splits} | {t.centre_median_m:.1f} | {t.centre_mean_m:.1f} | "
                     f"{100 * t.coverage_mean:.1f} | {t.volume_mean_m2:.4g} | {t.split_seconds:.0f} |")
    write_text(OUT / "centre_uji.md", "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
