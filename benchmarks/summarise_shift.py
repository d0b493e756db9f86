"""Write ``benchmarks/results/shift.{csv,md}`` from the cached shift splits of two ``lmve-bench`` runs.

    .venv/bin/python benchmarks/summarise_shift.py

GE and NLE come from ``lmve-bench --datasets indoor_localization --protocol random,leave-location-out,
leave-phone-out,leave-user-out --seeds 0-9 --methods ge,nle`` (cache ``shift-paper/*/ge-nle``);
LMVE from ``lmve-bench --datasets indoor_localization --protocol leave-location-out --seeds 0-9 --methods
ge,nle,lmve`` (cache ``shift-paper/*/ge-nle-lmve``; LMVE's default trainer), whose GE and NLE on the
same splits give the paired ratios. Splits that are not cached are left out; the table says how many ran.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from training.shift import shift_tables  # noqa: E402

CACHE = ROOT / "benchmarks" / "cache"
OUT = ROOT / "benchmarks" / "results"


def load(pattern: str, keep=None) -> list[dict]:
    records = []
    for path in sorted(CACHE.glob(pattern)):
        r = json.loads(path.read_text())
        if keep is not None:
            r["results"] = {k: v for k, v in r["results"].items() if keep(k)}
        records.append(r)
    return records


def main() -> int:
    base = load("shift-paper/*/indoor_localization/ge-nle/seed_*.json")
    lmve = load("shift-paper/*/indoor_localization/ge-nle-lmve/seed_*.json")
    lmve_only = [{**r, "results": {k: v for k, v in r["results"].items() if k.endswith("/lmve")}} for r in lmve]
    command = ("lmve-bench --datasets indoor_localization --protocol random,leave-location-out,leave-phone-out,"
               "leave-user-out --seeds 0-9 --methods ge,nle (GE, NLE) and lmve-bench --datasets indoor_localization "
               "--protocol leave-location-out --seeds 0-9 --methods ge,nle,lmve (LMVE); merged by "
               "python benchmarks/summarise_shift.py")
    wall = sum(r["wall_seconds"] for r in base + lmve)
    table, md = shift_tables(base + lmve_only, ["rows", "groups", "groups-pooled"], command, wall)
    tail = ""
    if lmve:
        _, paired = shift_tables(lmve, ["rows", "groups", "groups-pooled"], command, wall)
        tail = paired[paired.find("Paired ratios"):] if "Paired ratios" in paired else ""
    md = md.split("\nPaired ratios")[0].rstrip() + "\n\n" + tail
    md = md.replace("this invocation's wall time", "summed split time").replace(
        " (cached splits are not re-run)", "")
    OUT.mkdir(parents=True, exist_ok=True)
    table.to_csv(OUT / "shift.csv", index=False)
    (OUT / "shift.md").write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
