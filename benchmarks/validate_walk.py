"""The loop of ``docs/guides/validate.md`` on UJIIndoorLoc, as a user runs it: survey, walk, evaluate,
recalibrate on half of the walk, evaluate on the other half.

    python -m benchmarks.validate_walk            # about 5 minutes on 2 cores

Runs the guide's commands (the installed ``lmve-*`` entry points, ``examples/uji_walks.py``) under
``benchmarks/cache/validate_walk/`` (the trained bundle is reused when present) and writes
``benchmarks/results/validate_walk.md``: per evaluation the coverage with its interval and verdict, the
area, the errors, the floor figures and the per-phone coverage, short levels and typicality, with the command
and commit; and ``docs/assets/validate_reliability.png``, the survey bundle's per-phone reliability plot on the
whole walk, which the validate guide shows.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import shutil

from benchmarks.common import RESULTS, ROOT, cache_dir, command, commit, write_text

CACHE = cache_dir("validate_walk")
OUT = RESULTS / "validate_walk.md"
PLOT = ROOT / "docs" / "assets" / "validate_reliability.png"
BIN = Path(sys.executable).parent


def sh(*argv: str, ok=(0,)) -> int:
    print("$", " ".join(argv), flush=True)
    code = subprocess.run(list(argv)).returncode
    if code not in ok:
        raise SystemExit(f"{argv[0]} exited {code}")
    return code


def evaluate(bundle: Path, walk: str, name: str) -> dict:
    out = CACHE / name
    code = sh(str(BIN / "lmve-evaluate"), "--bundle", str(bundle), "--csv", str(CACHE / walk), "--group-by",
              "PHONEID,day:TIMESTAMP", "--out", str(out), ok=(0, 1))
    figures = json.loads((out / "metrics.json").read_text())
    figures["exit"] = code
    return figures


def main() -> int:
    t0 = time.time()
    if not (CACHE / "walk-b.csv").is_file():
        sh(sys.executable, str(ROOT / "examples" / "uji_walks.py"), "--out", str(CACHE))
    site = CACHE / "site" / "bundle"
    if not (site / "manifest.json").is_file():
        sh(str(BIN / "lmve-train"), "--csv", str(CACHE / "survey.csv"), "--targets", "LONGITUDE,LATITUDE",
           "--floor-column", "FLOOR", "--building-column", "BUILDINGID", "--crs", "EPSG:3857", "--out",
           str(CACHE / "site"), "--quiet")
    runs = {"survey bundle, whole walk": evaluate(site, "walk.csv", "eval-survey"),
            "survey bundle, walk-b": evaluate(site, "walk-b.csv", "eval-survey-b")}
    walked = CACHE / "site-walked"
    sh(str(BIN / "lmve-recalibrate"), str(site), str(CACHE / "walk-a.csv"), "--out", str(walked))
    runs["recalibrated on walk-a, walk-b"] = evaluate(walked, "walk-b.csv", "eval-walked-b")
    shutil.copyfile(CACHE / "eval-survey" / "reliability.png", PLOT)
    write_text(OUT, report(runs, time.time() - t0))
    print(OUT.read_text())
    return 0


def pct(v) -> str:
    return f"{100 * v:.1f} %"


def short(levels: list[float]) -> str:
    """A group's short levels in a few words."""
    if not levels:
        return "no level short"
    if len(levels) <= 2:
        return "short at " + ", ".join(f"{v:g}" for v in levels)
    return f"short at {len(levels)} levels ({levels[0]:g} to {levels[-1]:g})"


def report(runs: dict, seconds: float) -> str:
    lines = [f"Command: `{command('validate_walk')}` at commit "
             f"`{commit()}`, {time.strftime('%Y-%m-%d')}, {seconds / 60:.0f} minutes on this {os.cpu_count()}-core "
             "machine. UJIIndoorLoc TrainingData: phones 6, 7 and 23 walk (4,070 readings), the other 13 phones are "
             "the survey; the walk is split by reference position into walk-a (recalibration) and walk-b "
             "(evaluation). Level 90 %; errors and areas on the ground.", "",
             "| bundle, walk | rows | coverage (95 % interval) | verdict | area mean (m²) | error median / p75 / CE95 (m) "
             "| floor hit rate | floor-set coverage | IPIN score (m) | per phone: coverage, short levels, typicality |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name, f in runs.items():
        lo, hi = f["coverage_interval"]
        e, fl = f["error"], f.get("floors", {})
        phones = "; ".join(f"{k}: {pct(v['coverage'])}, {short(v['short_levels'])}, typicality {v['typicality_mean']:.2f}"
                           for k, v in f["groups"]["PHONEID"].items())
        lines.append(f"| {name} | {f['n_rows']:,} | {pct(f['coverage'])} ({pct(lo)}-{pct(hi)}) | "
                     f"{'holds' if f['verdict']['holds'] else 'fails'} (exit {f['exit']}) | {f['area_mean']:.0f} | "
                     f"{e['median']:.1f} / {e['p75']:.1f} / {e['ce95']:.1f} | {pct(fl.get('floor_hit_rate', 0))} | "
                     f"{pct(fl.get('floor_set_coverage', 0))} | {fl.get('ipin_score', 0):.1f} | {phones} |")
    lines += ["", "Verdicts, in the evaluations' words:", ""]
    lines += [f"- {name}: {f['verdict']['words']}" for name, f in runs.items()]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
