"""Does the boosted-tree centre over-cover across units because it keeps 5 centre folds? (issue 70)

    python -m benchmarks.hgb_folds                  # the splits where --centre auto chose hgb
    python -m benchmarks.hgb_folds --cached-only    # summarise what ran

On the splits of ``benchmarks.shift_product`` where ``--centre auto`` chose ``hgb`` (leave-phone-out
seeds 1 and 2, leave-user-out seed 0), ``training.pipeline.train`` runs with ``--centre hgb
--calibrate-across`` and GE and NLE twice: with the default allowance
(``TrainConfig.across_centre_seconds`` 60 s of costed fits: a boosted fit on the whole survey's train part,
costed at 16-17 s, keeps the shapes' 5 centre folds; measured by wall-clock time when this ran) and with
none (one unit per centre fold, 12-17 folds). Per run: the centre folds, the test coverage (pooled and per
unit), the mean true area (m^2) and the command's seconds. Runs are cached in
``benchmarks/cache/hgb_folds/runs.jsonl``; writes ``benchmarks/results/hgb_folds.{md,csv}``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from benchmarks.common import DATA_DIR, M2_PER_KM2, RESULTS, cache_dir, command, commit, write_rows, write_text

CACHE = cache_dir("hgb_folds") / "runs.jsonl"
OUT = RESULTS
SPLITS = [("leave-phone-out", 1), ("leave-phone-out", 2), ("leave-user-out", 0)]
ALLOWANCES = (60.0, 1e5)


def run(ds, protocol: str, seed: int, seconds: float) -> dict:
    """One ``train`` of the split at the centre-fold allowance ``seconds``."""
    from benchmarks.harness.shift import ACROSS_PROTOCOLS as PROTOCOLS
    from benchmarks.harness.shift import unit_coverage
    from training.calibration.across import across_split, unit_codes
    from training.pipeline import TrainConfig, train

    column = PROTOCOLS[protocol]
    units = unit_codes(ds, [column])
    split = across_split(ds, [column], seed, 0.9)
    t0 = time.perf_counter()
    config = TrainConfig(coverage=0.9, seed=seed, centre="hgb", rssi="auto", calibrate_across=(column,),
                         methods=("ge", "nle"), across_centre_seconds=seconds, primary="ge")
    result = train(ds, config, split=split)
    record = {"protocol": protocol, "seed": seed, "secs": seconds, "folds": result.centre.get("centre_folds"),
              "seconds": time.perf_counter() - t0, "commit": commit()}
    test = split.test
    for name in result.model.methods:
        region = result.model.predict_region(ds.X[test], method=name).regions
        inside = region.contains(ds.Y[test])
        record[name] = [float(inside.mean()), unit_coverage(inside, units[test]),
                        float(region.volume("lebesgue").mean()) * M2_PER_KM2]
    return record


def summarise(records: list[dict], argv: list[str]) -> tuple[list[dict], str]:
    rows = []
    for r in records:
        for method in ("ge", "nle"):
            cov, unit, area = r[method]
            rows.append({"protocol": r["protocol"], "seed": r["seed"], "allowance_s": r["secs"],
                         "centre_folds": r["folds"], "method": method, "coverage": cov, "unit_coverage": unit,
                         "area_m2": area, "seconds": r["seconds"], "commit": r.get("commit", "62e568c")})
    by = {(x["protocol"], x["seed"], x["method"], x["allowance_s"]): x for x in rows}
    lines = ["## The boosted-tree centre across units: 5 centre folds or one unit per fold", "",
             f"Command: `{command('hgb_folds', argv)}` at commit {commit()}; runs at "
             f"{', '.join(sorted({x['commit'][:7] for x in rows}))}. `--centre hgb --calibrate-across`, GE and NLE "
             "at 0.9, on the `shift_product` splits where `--centre auto` chose `hgb`; `5 folds`: the default "
             "allowance (60 s: a 20 s fit keeps the shapes' 5 folds), `per unit`: no allowance.", "",
             "| protocol | seed | method | folds | coverage % (5 / per unit) | area m^2 (5 / per unit) | "
             "per unit / 5 | seconds (5 / per unit) |", "|---|---|---|---|---|---|---|---|"]
    for protocol, seed in sorted({(x["protocol"], x["seed"]) for x in rows}):
        for method in ("ge", "nle"):
            a, b = by.get((protocol, seed, method, ALLOWANCES[0])), by.get((protocol, seed, method, ALLOWANCES[1]))
            if a is None or b is None:
                continue
            lines.append(f"| {protocol} | {seed} | {method} | {a['centre_folds']} / {b['centre_folds']} | "
                         f"{100 * a['coverage']:.1f} / {100 * b['coverage']:.1f} | {a['area_m2']:.4g} / "
                         f"{b['area_m2']:.4g} | {b['area_m2'] / a['area_m2']:.2f} | {a['seconds']:.0f} / "
                         f"{b['seconds']:.0f} |")
    lines += ["", "One unit per fold shrank the area 3-5x on one split of three (new phones, seed 1), 0.7x on "
              "another and not on the third (0.9-1.1x), and the coverage stayed 98-100 % on all three: the boosted centre's "
              "over-coverage there is mostly the test units' (their errors are below the training units' "
              "unit-fold errors), not its folds. One unit per fold cost 2-3x the command's time (the "
              "`uji_across` budget is 360 s), so the allowance stays."]
    return rows, "\n".join(lines) + "\n"


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data-dir", type=Path, default=DATA_DIR)
    p.add_argument("--cached-only", action="store_true")
    args = p.parse_args(argv)
    records = [json.loads(line) for line in CACHE.read_text().splitlines()] if CACHE.is_file() else []
    done = {(r["protocol"], r["seed"], r["secs"]) for r in records}
    if not args.cached_only:
        from training.data.datasets import group_by_position, load_dataset

        ds = group_by_position(load_dataset("indoor_localization", args.data_dir))
        for protocol, seed in SPLITS:
            for seconds in ALLOWANCES:
                if (protocol, seed, seconds) in done:
                    continue
                record = run(ds, protocol, seed, seconds)
                records.append(record)
                CACHE.parent.mkdir(parents=True, exist_ok=True)
                with open(CACHE, "a") as f:
                    f.write(json.dumps(record) + "\n")
    rows, text = summarise(records, argv)
    write_rows(OUT / "hgb_folds.csv", rows, list(rows[0]))
    write_text(OUT / "hgb_folds.md", text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
