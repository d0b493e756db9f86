"""UJIIndoorLoc: the centre and the fingerprint preprocessing against the SVR, at new positions.

    .venv/bin/python benchmarks/centre_uji.py --seeds 0-2 [--methods ge,nle] [--jobs 2]

Leave-location-out splits (``training.shift``: whole surveyed positions held out for test and for
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
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CONFIGS = {"svr": ("scaled", "off"), "svr-rssi": ("scaled", "auto"), "knn": ("knn", "off"),
           "knn-rssi": ("knn", "auto")}
CACHE = ROOT / "benchmarks" / "cache" / "centre_uji"
OUT = ROOT / "benchmarks" / "results"
M = 1000.0  # km -> m


def run(config: str, seed: int, methods: tuple[str, ...], data_dir: str | None) -> dict:
    path = CACHE / config / "-".join(methods) / f"seed_{seed:03d}.json"
    if path.is_file():
        return json.loads(path.read_text())
    import torch

    from training.datasets import load_dataset
    from training.shift import run_shift_split

    torch.set_num_threads(1)
    centre, rssi = CONFIGS[config]
    record = run_shift_split(load_dataset("indoor_localization", data_dir), "leave-location-out", seed, methods,
                             centre=centre, rssi=rssi)
    record["config"] = config
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record))
    os.replace(tmp, path)
    return record


def main(argv: list[str] | None = None) -> int:
    import pandas as pd
    from joblib import Parallel, delayed

    from training.bench import parse_seeds

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
    records = Parallel(n_jobs=args.jobs, backend="loky")(delayed(run)(c, s, methods, args.data_dir) for c, s in tasks)
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
    OUT.mkdir(parents=True, exist_ok=True)
    table.to_csv(OUT / "centre_uji.csv", index=False)
    lines = ["## UJIIndoorLoc at new positions: the centre and the RSSI step", "",
             f"Command: `benchmarks/centre_uji.py {' '.join(argv if argv is not None else sys.argv[1:])}`. "
             "Leave-location-out splits, grouped calibration (exact rule) at 90 %; the centre's test error "
             "(Euclidean, metres: median and mean, averaged over splits) and the mean det(alpha C)^1/2 in m^2.", "",
             "| centre | method | splits | centre median m | centre mean m | coverage % | volume m^2 | split s |",
             "|---|---|---|---|---|---|---|---|"]
    for _, t in table.iterrows():
        lines.append(f"| {t.config} | {t.method} | {t.n_splits} | {t.centre_median_m:.1f} | {t.centre_mean_m:.1f} | "
                     f"{100 * t.coverage_mean:.1f} | {t.volume_mean_m2:.4g} | {t.split_seconds:.0f} |")
    (OUT / "centre_uji.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
