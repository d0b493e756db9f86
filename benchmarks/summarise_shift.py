"""Write ``benchmarks/results/shift.{csv,md}`` from the cached shift splits of ``python -m benchmarks.bench`` runs.

    python -m benchmarks.summarise_shift

Reads every cached ``shift-paper/<protocol>/indoor_localization/ge-nle/seed_*.json`` (``python -m
benchmarks.bench --datasets indoor_localization --protocol ... --seeds 0-9 --methods ge,nle``; leave-phone-out and leave-user-out carry the
``across-PHONEID`` / ``across-USERID`` calibrations, held-out and cross-fitted, :mod:`training.calibration.across`) and, for LMVE,
``.../ge-nle-lmve/seed_*.json``. The rows of protocols with no cached split are carried over from the
``shift.{csv,md}`` already there (caches are not kept between machines), and the table says which were.
"""

from __future__ import annotations

import json
import sys

import numpy as np
import pandas as pd

from benchmarks.common import CACHE, RESULTS, write_csv, write_text
from benchmarks.harness.shift import shift_tables

OUT = RESULTS
CALIBRATIONS = ["rows", "groups", "groups-pooled", "across"]


def load(pattern: str) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(CACHE.glob(pattern))]


VARIANTS = {"": "held-out units (`--across-mode held-out`)", "-position-folds": "held-out units, shapes from position folds",
            "-cv": "cross-fitted units (`--across-mode cross-fit`, the default)",
            "-cv-subsample": "cross-fitted units, one score per unit (`--calibration group-subsample`)"}


def across_lines(records: list[dict]) -> list[str]:
    """Per protocol, method and across variant: coverage per split, the calibration units and the volume
    against ``groups``."""
    lines = []
    for protocol in dict.fromkeys(r["protocol"] for r in records if "across" in r):
        rs = [r for r in records if r["protocol"] == protocol and "across" in r]
        col = next(k.split("/")[0] for k in rs[0]["results"] if k.startswith("across-") and "folds" not in k
                   and "-cv" not in k)
        units = {"": [r["across"]["calibration_units"] for r in rs]}
        units["-position-folds"] = units[""]
        if "cv" in rs[0]["across"]:
            units["-cv"] = units["-cv-subsample"] = [r["across"]["cv"]["calibration_units"] for r in rs]
        for method in ("ge", "nle", "lmve"):
            for suffix, words in VARIANTS.items():
                key = f"{col}{suffix}/{method}"
                if key not in rs[0]["results"]:
                    continue
                cov = np.array([r["results"][key]["coverage"] for r in rs])
                unit = np.array([r["results"][key]["unit_coverage_mean"] for r in rs])
                ratio = np.array([r["results"][key]["volume_paper"] / r["results"][f"groups/{method}"]["volume_paper"]
                                  for r in rs])
                rules = sorted({r["results"][key].get("rule", r["across"]["rule"]) for r in rs})
                lines.append(f"- {protocol}, {method.upper()}, {words}: coverage **{100 * cov.mean():.1f} %** over "
                             f"{len(rs)} splits (per split {100 * cov.min():.0f}-{100 * cov.max():.0f} %, "
                             f"{np.sum(cov >= 0.85)} of {len(rs)} at 85 % or more; mean over test units "
                             f"{100 * unit.mean():.1f} %); volume {ratio.mean():.2f}x that of `groups` (paired, range "
                             f"{ratio.min():.2f}-{ratio.max():.2f}); calibration units {min(units[suffix])}-"
                             f"{max(units[suffix])}, rule {', '.join(rules)}")
    return lines

def main() -> int:
    base = load("shift-paper/*/indoor_localization/ge-nle/seed_*.json")
    lmve = load("shift-paper/*/indoor_localization/ge-nle-lmve/seed_*.json")
    lmve_only = [{**r, "results": {k: v for k, v in r["results"].items() if k.endswith("/lmve")}} for r in lmve]
    if not base:
        print("no cached shift splits under benchmarks/cache/shift-paper; run python -m benchmarks.bench --protocol first",
              file=sys.stderr)
        return 2
    command = ("python -m benchmarks.bench --datasets indoor_localization --protocol leave-phone-out,leave-user-out --seeds 0-9 "
               "--methods ge,nle; merged by python -m benchmarks.summarise_shift")
    wall = sum(r["wall_seconds"] for r in base + lmve)
    table, md = shift_tables(base + lmve_only, CALIBRATIONS, command, wall)
    ran = set(table.protocol)
    carried_md = []
    if (OUT / "shift.csv").is_file() and (OUT / "shift.md").is_file():
        old = pd.read_csv(OUT / "shift.csv")
        keep = old[~old.protocol.isin(ran)]
        table = pd.concat([table, keep], ignore_index=True)
        for line in (OUT / "shift.md").read_text().splitlines():
            cells = [c.strip() for c in line.split("|")]
            if len(cells) > 3 and cells[2] in set(keep.protocol) and "carried" not in line:
                carried_md.append(line)
            if line.startswith("- ") and "paired over" in line and line.split(", ")[1] in set(keep.protocol):
                carried_md.append(line)
    head, _, tail = md.partition("\nPaired ratios")
    rows = [x for x in carried_md if x.startswith("|")]
    notes = [x for x in carried_md if x.startswith("- ")]
    carried_protocols = sorted({c.split("|")[2].strip() for c in rows})
    md = head.rstrip() + "\n" + "\n".join(rows) + "\n"
    if carried_protocols:
        md += (f"\nRows of {', '.join(carried_protocols)} are carried over from the previous table (their splits are "
               "not in this machine's cache; the command that made them: `python -m benchmarks.bench --datasets indoor_localization "
               "--protocol random,leave-location-out --seeds 0-9 --methods ge,nle` and `... --protocol "
               "leave-location-out --methods ge,nle,lmve`).\n")
    md += ("\n`across-<COL>` (`lmve-train --calibrate-across COL --across-mode held-out`, `training.calibration.across`): "
           "calibrated on whole units of the protocol's column held out of training (2-3 phones or users, 10 % of "
           "the non-test rows) at positions drawn out of training (20 % of the rows), with a centre of its own "
           "trained on rows sharing neither; shapes from unit out-of-fold residuals (`-position-folds`: position "
           "folds). With fewer than 9 calibration units at 0.9 the rule is `group-weighted` (each unit 1/m, the "
           "pooled 0.9-quantile): approximate. `across-<COL>-cv` (`--calibrate-across COL`, the default "
           "`--across-mode cross-fit`): every non-test unit trains at the positions not drawn and is scored at the "
           "drawn ones by a centre and shapes fitted without its unit fold (5 unit folds, cross-conformal), so "
           "all of them (13-16) calibrate, rule `group-weighted`; `-cv-subsample`: the same scores, one per unit "
           "drawn at random (the exact rule's form; cross-fitted, so approximate too).\n\n")
    md += "\n".join(across_lines(base)) + "\n"
    if tail or notes:
        md += "\nPaired ratios" + tail.rstrip() + ("\n" if tail else ":\n") + "\n".join(notes) + "\n"
    md = md.replace("this invocation's wall time", "summed split time").replace(
        " (cached splits are not re-run)", "")
    write_csv(table, OUT / "shift.csv")
    write_text(OUT / "shift.md", md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
