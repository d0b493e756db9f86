"""Which method ``--primary auto`` serves, and what it costs or saves, per data set.

    python -m benchmarks.primary [--datasets synthetic,enb,ble_rssi,residential_building,indoor_localization]
                                 [--seeds 0-19] [--uji-seeds 0-2] [--jobs 2]

Per data set and split seed, ``lmve-train``'s default run (as the CLI builds it: ``--centre auto``, RSSI step,
grouped by position when most rows repeat a position, GE, NLE and LMVE; ``indoor_localization`` is
UJIIndoorLoc, grouped by position: leave-location-out) on the default split, with one change so that the
choice is measured on rows it did not see: the test part is cut in two halves (whole groups with groups,
seeded); ``auto`` chooses on the first (``Split.selection``) with the train part cross-fitted, as it
does by default, and every figure comes from the second.

Writes ``benchmarks/results/primary.csv`` (``dataset,method,n_splits,coverage_mean,volume_mean,served_share``:
per method, the mean over splits of its coverage and mean area on the evaluation half (m^2 for
indoor_localization, whose targets are km), and the share of splits
on which ``auto`` served it; the row ``auto`` is the regions ``auto`` served) and ``primary.md``. Each run is
cached as JSON under ``benchmarks/cache/primary/`` (resumable).
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from benchmarks.common import RESULTS, cache_dir, cached, command, commit, parallel, parse_seeds, to_m2, write_text
from benchmarks.harness.splits import default_dataset, halves

CACHE = cache_dir("primary")
OUT = RESULTS
DATASETS = ("synthetic", "enb", "ble_rssi", "residential_building", "indoor_localization")
METHODS = ("ge", "nle", "lmve")


def run_one(dataset: str, seed: int) -> dict:
    """One split's record (cached)."""
    return cached(CACHE / dataset / f"seed_{seed:03d}.json", lambda: _run(dataset, seed))


def _run(dataset: str, seed: int) -> dict:
    from training.pipeline import TrainConfig, default_split, train

    ds = default_dataset(dataset, seed)
    config = TrainConfig(seed=seed, methods=METHODS, centre="auto", rssi="auto")
    split = halves(default_split(ds, config), ds.groups, seed)
    result = train(ds, config, split=split)
    sel = result.model.selection
    record = {"dataset": dataset, "seed": seed, "grouped": ds.groups is not None, "served": sel["primary"],
              "order": sel["order"], "selection_rows": len(split.selection), "evaluation_rows": len(split.test),
              "metrics": {m: {"coverage": v["coverage"], "volume": v["volume"]} for m, v in result.metrics.items()},
              "held_out": sel["held_out"]}
    return record


def main(argv: list[str] | None = None) -> int:
    import pandas as pd

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--datasets", default=",".join(DATASETS))
    p.add_argument("--seeds", default="0-19", help="split seeds A-B of the small data sets")
    p.add_argument("--uji-seeds", default="0-2", help="split seeds A-B of indoor_localization (about 3 min each)")
    p.add_argument("--jobs", type=int, default=2, help="parallel runs of the small data sets (UJIIndoorLoc: 1)")
    args = p.parse_args(argv)
    datasets = [d for d in args.datasets.split(",") if d]
    small = [(d, s) for d in datasets if d != "indoor_localization" for s in parse_seeds(args.seeds)]
    records = parallel(run_one, small, args.jobs, desc="runs")
    if "indoor_localization" in datasets:
        records += parallel(run_one, [("indoor_localization", s) for s in parse_seeds(args.uji_seeds)],
                            desc="UJIIndoorLoc")
    for r in records:  # UJIIndoorLoc's targets are km: its areas in m^2, as in shift.md
        for v in r["metrics"].values():
            v["volume"] *= to_m2(r["dataset"])
    rows = []
    for d in datasets:
        runs = [r for r in records if r["dataset"] == d]
        for m in METHODS:
            rows.append({"dataset": d, "method": m, "n_splits": len(runs),
                         "coverage_mean": np.mean([r["metrics"][m]["coverage"] for r in runs]),
                         "volume_mean": np.mean([r["metrics"][m]["volume"] for r in runs]),
                         "served_share": np.mean([r["served"] == m for r in runs])})
        rows.append({"dataset": d, "method": "auto", "n_splits": len(runs),
                     "coverage_mean": np.mean([r["metrics"][r["served"]]["coverage"] for r in runs]),
                     "volume_mean": np.mean([r["metrics"][r["served"]]["volume"] for r in runs]),
                     "served_share": 1.0})
    df = pd.DataFrame(rows)
    write_text(OUT / "primary.csv", df.to_csv(index=False, float_format="%.6g"))
    lines = ["## `--primary auto`: the served method per data set", "",
             f"Command: `{command('primary', argv)}` at commit "
             f"`{commit()}`. lmve-train's default run per split; `auto` chooses on the train part "
             "(3-fold cross-fit) and half of the test part, and every figure is from the other half (whole groups "
             "with groups), so the served method's figures are not the ones it was chosen on. Area: the true mean area of the 90 % regions (target units squared; m^2 for indoor_localization); "
             "`auto / best`: `auto`'s mean area over the smallest method's; `oracle`: the mean over splits of each "
             "split's smallest area (the choice no rule can beat, made on the evaluation rows themselves); `hits`: "
             "the splits on which `auto` served that split's smallest. Coverage ± its standard error over splits.", "",
             "| data set | splits | grouped | served (share of splits) | GE | NLE | LMVE | auto | auto / best | "
             "oracle | hits | auto coverage |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for d in datasets:
        sub = df[df.dataset == d].set_index("method")
        runs = [r for r in records if r["dataset"] == d]
        served = ", ".join(f"{m} {100 * sub.loc[m, 'served_share']:.0f} %" for m in METHODS
                           if sub.loc[m, "served_share"] > 0)
        best = sub.loc[list(METHODS), "volume_mean"].min()
        cells = " | ".join(f"{sub.loc[m, 'volume_mean']:.4g} ({100 * sub.loc[m, 'coverage_mean']:.1f} %)"
                           for m in METHODS)
        oracle = np.mean([min(r["metrics"][m]["volume"] for m in METHODS) for r in runs])
        hits = sum(r["served"] == min(METHODS, key=lambda m: r["metrics"][m]["volume"]) for r in runs)
        served_cov = [r["metrics"][r["served"]]["coverage"] for r in runs]
        se = np.std(served_cov, ddof=1) / np.sqrt(len(runs)) if len(runs) > 1 else float("nan")
        lines.append(f"| {d} | {len(runs)} | {'by position' if runs[0]['grouped'] else 'rows'} | {served} | {cells} | "
                     f"{sub.loc['auto', 'volume_mean']:.4g} | {sub.loc['auto', 'volume_mean'] / best:.3f} | "
                     f"{oracle:.4g} | {hits}/{len(runs)} | {100 * sub.loc['auto', 'coverage_mean']:.1f} ± "
                     f"{100 * se:.1f} % |")
    write_text(OUT / "primary.md", "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
