"""The centre cost model against the clock: one fit of each centre kind on UJIIndoorLoc rows, timed, beside
what ``training.calibration.centre_cost.fit_seconds`` costs it at.

    python -m benchmarks.centre_cost                      # every kind at 1,000, 4,000 and 12,000 rows
    python -m benchmarks.centre_cost --rows 4000 --kinds knn,hgb
    python -m benchmarks.centre_cost --cached-only        # summarise what ran

The cross-fit across units cuts the centre's unit folds by that cost, not by a clock, so a bundle depends on
the data alone; the model only has to be right to within a small factor on the reference machine (2 cores).
Each fit: rows drawn at random from TrainingData (seeded), standardised as ``lmve-train`` does (RSSI step
``auto``), the kind's defaults, alone on the machine. Runs are cached as JSON under
``benchmarks/cache/centre_cost/``; writes ``benchmarks/results/centre_cost.{csv,md}`` (measured / costed per
run).
"""

from __future__ import annotations

import argparse
import sys
import time

from benchmarks.common import RESULTS, cache_dir, cached, command, commit, machine, write_rows, write_text

CACHE = cache_dir("centre_cost")
COLUMNS = ["kind", "rows", "features", "fit_s", "costed_s", "ratio", "commit"]


def measure(kind: str, rows: int) -> dict:
    """One fit of ``kind`` on ``rows`` random UJIIndoorLoc rows, timed, with its cost."""
    import numpy as np

    from training.calibration.centre_cost import fit_seconds
    from training.calibration.splits import Split
    from training.data.datasets import load_dataset
    from training.pipeline import TrainConfig
    from training.pipeline.stages import standardise

    ds = load_dataset("indoor_localization")
    order = np.random.default_rng(0).permutation(len(ds.Y))
    train = order[:rows]
    config = TrainConfig(rssi="auto")
    _, _, Xs = standardise(ds.X, Split(train=train, calibration=order[rows:rows + 10], test=order[rows + 10:rows + 20]),
                           config)
    centre = config.make_centre(kind)
    t0 = time.perf_counter()
    centre.fit(Xs[train], ds.Y[train])
    seconds = time.perf_counter() - t0
    costed = fit_seconds(config, kind, rows, Xs.shape[1])
    return {"kind": kind, "rows": rows, "features": int(Xs.shape[1]), "fit_s": seconds, "costed_s": costed,
            "ratio": seconds / costed, "commit": commit()}


def summarise(records: list[dict], argv) -> str:
    ratios = sorted(r["ratio"] for r in records)
    lines = ["## The centre cost model against the clock", "",
             f"Command: `{command('centre_cost', argv)}` at commit {commit()}; {machine()['cores']} cores. "
             "One fit per row, timed, beside `training.calibration.centre_cost.fit_seconds`. The cost decides how "
             "many unit folds the cross-fit across units refits the centre on, so it only needs the right order "
             f"of magnitude: measured / costed from {ratios[0]:.2f} to {ratios[-1]:.2f} over {len(ratios)} fits.",
             "", "| kind | rows | features | fit s | costed s | measured / costed |", "|---|---|---|---|---|---|"]
    for r in records:
        lines.append(f"| {r['kind']} | {r['rows']:,} | {r['features']} | {r['fit_s']:.3g} | {r['costed_s']:.3g} | "
                     f"{r['ratio']:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    from training.calibration.centre_cost import RATES

    p = argparse.ArgumentParser(prog="python -m benchmarks.centre_cost", description=__doc__.splitlines()[0])
    p.add_argument("--kinds", default=",".join(RATES), help="centre kinds, comma-separated (default: every kind)")
    p.add_argument("--rows", default="1000,4000,12000", help="training rows per fit, comma-separated")
    p.add_argument("--cached-only", action="store_true", help="summarise the cached runs; fit nothing")
    args = p.parse_args(argv)
    argv = sys.argv[1:] if argv is None else argv
    unknown = sorted(set(args.kinds.split(",")) - set(RATES))
    if unknown:
        p.error(f"--kinds: unknown centre kind {', '.join(unknown)}; choose from {', '.join(RATES)}")
    records = []
    for rows in (int(x) for x in args.rows.split(",")):
        for kind in args.kinds.split(","):
            path = CACHE / f"{kind}_{rows}.json"
            if args.cached_only and not path.exists():
                continue
            records.append(cached(path, lambda kind=kind, rows=rows: measure(kind, rows)))
            print(f"{kind} {rows}: {records[-1]['fit_s']:.2f} s, costed {records[-1]['costed_s']:.2f} s", flush=True)
    if not records:
        print("no runs cached; run without --cached-only", file=sys.stderr)
        return 1
    write_rows(RESULTS / "centre_cost.csv", records, COLUMNS)
    write_text(RESULTS / "centre_cost.md", summarise(records, argv))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
