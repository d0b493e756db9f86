"""`lmve-train` with defaults, before and after the centre screen: wall time and peak memory per stage,
and the served region paired on the same splits.

    .venv/bin/python benchmarks/train_speed.py                      # everything (about 90 min on 2 cores)
    .venv/bin/python benchmarks/train_speed.py --datasets enb --seeds 0-2   # a part

Each run is the real command, ``python -m training.cli`` in a child process, with the defaults but
``--seed`` and ``--quiet``: ``before`` adds ``--centre-screen off`` (every centre candidate on every fold
with all rows: what ``lmve-train`` did before the screen), ``after`` is today's default. Per run the child's
``metrics.json`` gives each stage's seconds and peak resident memory (``training.stages``), the child's
rusage its whole peak, and the served method's (LMVE's) test coverage and mean volume. UJIIndoorLoc is
its TrainingData with the 520 WAP columns as features and LONGITUDE, LATITUDE as targets (a CSV written
once under ``benchmarks/cache/train_speed/``); the small sets are the built-in ones. Runs are cached as
JSON under ``benchmarks/cache/train_speed/runs/`` (a rerun resumes); ``--cached-only`` just summarises.

Writes ``benchmarks/results/train_speed.csv`` (one row per run) and ``train_speed.md``.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.load.run_load import commit  # noqa: E402
from training.bench import parse_seeds  # noqa: E402  (the benchmarks' one --seeds parser: "0-9", "0,3", "0-2,5")

CACHE = ROOT / "benchmarks" / "cache" / "train_speed"
OUT = ROOT / "benchmarks" / "results"
VARIANTS = {"before": ["--centre-screen", "off"], "after": []}
#: dataset -> (lmve-train source flags, paired splits wanted: seeds 0, 1, ... until that many ran in both
#: variants; a seed lmve-train refuses, e.g. too few calibration groups for the level, is recorded and skipped)
DATASETS = {
    "indoor_localization": (None, 3),
    "enb": (["--dataset", "enb"], 10),
    "ble_rssi": (["--dataset", "ble_rssi"], 10),
    "residential_building": (["--dataset", "residential_building"], 10),
    "synthetic": (["--dataset", "synthetic"], 10),
}
SERVED = ("lmve", "nle", "ge")  # the served method: the first the run has
CSV_COLUMNS = ["dataset", "variant", "seed", "wall_s", "peak_mib", "centre", "candidates", "served", "coverage",
               "volume", "stages_json", "commit"]


def uji_csv(data_dir: Path) -> Path:
    """UJIIndoorLoc's TrainingData as a user's CSV: WAP001..WAP520, LONGITUDE, LATITUDE."""
    path = CACHE / "uji.csv"
    if not path.is_file():
        import pandas as pd

        df = pd.read_csv(data_dir / "indoor_localization" / "TrainingData.csv.gz")
        cols = [c for c in df.columns if c.startswith("WAP")] + ["LONGITUDE", "LATITUDE"]
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        df[cols].to_csv(tmp, index=False)
        tmp.replace(path)
    return path


def source(dataset: str, data_dir: Path) -> list[str]:
    flags = DATASETS[dataset][0]
    if flags is None:
        return ["--csv", str(uji_csv(data_dir)), "--targets", "LONGITUDE,LATITUDE"]
    return [*flags, "--data-dir", str(data_dir)]


def run_one(dataset: str, variant: str, seed: int, data_dir: Path) -> dict:
    """One ``lmve-train`` run in a child process; its figures (cached)."""
    cached = CACHE / "runs" / f"{dataset}_{variant}_{seed}.json"
    if cached.is_file():
        return json.loads(cached.read_text())
    out = CACHE / "out" / f"{dataset}_{variant}_{seed}"
    cmd = [sys.executable, "-m", "training.cli", *source(dataset, data_dir), "--seed", str(seed), "--quiet",
           "--out", str(out), *VARIANTS[variant]]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    text = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    code = os.waitstatus_to_exitcode(status)
    if code == 2 and "lmve-train: error:" in text:  # refused with a message (e.g. too few calibration groups)
        row = {"dataset": dataset, "variant": variant, "seed": seed, "refused": text.split("lmve-train: error:")[1].strip(),
               "commit": commit(), "command": " ".join(cmd[1:])}
        cached.parent.mkdir(parents=True, exist_ok=True)
        cached.write_text(json.dumps(row, indent=1))
        return row
    if code != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{text[-3000:]}")
    metrics = json.loads((out / "metrics.json").read_text())
    centre = json.loads((out / "bundle" / "manifest.json").read_text())["training"]["centre"]
    served = next(m for m in SERVED if m in metrics["metrics"])
    row = {"dataset": dataset, "variant": variant, "seed": seed, "wall_s": round(wall, 2),
           # the stages' peaks: resetting the high-water mark per stage lowers what rusage reports at exit
           "peak_mib": round(max([usage.ru_maxrss / 1024, *(s["peak_rss_mib"] for s in metrics["stages"].values())]), 1),
           "centre": centre["name"],
           "candidates": {n: {k: r.get(k) for k in ("status", "rows", "folds", "rmse", "seconds")}
                          for n, r in centre.get("cv", {}).items()},
           "served": served, "coverage": metrics["metrics"][served]["coverage"],
           "volume": metrics["metrics"][served]["volume"], "stages": metrics["stages"], "commit": commit(),
           "command": " ".join(cmd[1:])}
    cached.parent.mkdir(parents=True, exist_ok=True)
    cached.write_text(json.dumps(row, indent=1))
    return row


def mean(xs) -> float:
    xs = list(xs)
    return sum(xs) / len(xs) if xs else float("nan")


def summarise(rows: list[dict], argv: list[str]) -> str:
    lines = ["## `lmve-train` with defaults: before and after the centre screen", "",
             f"Command: `python benchmarks/train_speed.py {' '.join(argv)}` at commit {commit()}; 2 cores, "
             "each run a child process alone on the machine. `before`: `--centre-screen off` (every candidate on "
             "every fold with all rows, as before); `after`: the defaults (screen above 5,000 train rows). "
             "Seconds and peak resident memory per stage from each run's `metrics.json` (means over the seeds); "
             "`wall` is the whole command (imports included), `peak` the child's peak resident set (the largest stage "
             "peak). `before` runs today's code, so its load (CSV separator sniffed) and kNN search (no chunk of "
             "distances kept) are today's too; the issue's own run of the old code: 12 min 4 s, 1.8 GB.", ""]
    for dataset in DATASETS:
        refused = sorted({r["seed"]: r["refused"] for r in rows if r["dataset"] == dataset and "refused" in r}.items())
        mine = [r for r in rows if r["dataset"] == dataset and "refused" not in r]
        if not mine:
            continue
        by = {v: {r["seed"]: r for r in mine if r["variant"] == v} for v in VARIANTS}
        paired = sorted(set(by["before"]) & set(by["after"]))
        lines += [f"### {dataset}", ""]
        stages = list(dict.fromkeys(s for r in mine for s in r["stages"]))
        head = "| stage | " + " | ".join(f"{v} s | {v} peak MiB" for v in VARIANTS) + " |"
        lines += [head, "|---|" + "---|" * (2 * len(VARIANTS))]
        for s in stages:
            cells = []
            for v in VARIANTS:
                runs = [r["stages"][s] for r in by[v].values() if s in r["stages"]]
                cells += [f"{mean(x['seconds'] for x in runs):.1f}" if runs else "-",
                          f"{max(x['peak_rss_mib'] for x in runs):.0f}" if runs else "-"]
            lines.append(f"| {s} | " + " | ".join(cells) + " |")
        cells = []
        for v in VARIANTS:
            runs = list(by[v].values())
            cells += [f"**{mean(r['wall_s'] for r in runs):.1f}**" if runs else "-",
                      f"**{max(r['peak_mib'] for r in runs):.0f}**" if runs else "-"]
        lines += ["| **wall (whole command)** | " + " | ".join(cells) + " |", ""]
        if paired:
            lines += [f"Paired on {len(paired)} splits (the served method, {by['after'][paired[0]]['served']}; "
                      "volume: mean true area of the test regions):", "",
                      "| seed | centre before | centre after | coverage before | coverage after | volume before | "
                      "volume after | after / before | wall before s | wall after s |",
                      "|---|---|---|---|---|---|---|---|---|---|"]
            ratios = []
            for s in paired:
                b, a = by["before"][s], by["after"][s]
                ratios.append(a["volume"] / b["volume"])
                lines.append(f"| {s} | {b['centre']} | {a['centre']} | {100 * b['coverage']:.1f} % | "
                             f"{100 * a['coverage']:.1f} % | {b['volume']:.4g} | {a['volume']:.4g} | {ratios[-1]:.4f} | "
                             f"{b['wall_s']:.0f} | {a['wall_s']:.0f} |")
            lines += ["", f"Mean volume after / before **{mean(ratios):.4f}** (max {max(ratios):.4f}); coverage "
                      f"{100 * mean(by['before'][s]['coverage'] for s in paired):.2f} % before, "
                      f"{100 * mean(by['after'][s]['coverage'] for s in paired):.2f} % after; wall "
                      f"{mean(by['before'][s]['wall_s'] for s in paired):.0f} s -> "
                      f"{mean(by['after'][s]['wall_s'] for s in paired):.0f} s.", ""]
            for seed, why in refused:
                lines.append(f"Seed {seed}: refused by `lmve-train` with its defaults, before and after alike: {why}")
            if refused:
                lines.append("")
            dropped = {}
            for s in paired:
                for n, c in by["after"][s]["candidates"].items():
                    if c.get("status") == "dropped":
                        dropped.setdefault(n, []).append(f"seed {s}: {c['rows']} rows x {c['folds']} fold(s), "
                                                         f"RMSE {c['rmse']:.4g}" if c.get("rmse") is not None
                                                         else f"seed {s}")
            if dropped:
                lines += ["Dropped by the screen or the race (after):", ""]
                lines += [f"- {n}: " + "; ".join(v) for n, v in dropped.items()]
                lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--datasets", default=",".join(DATASETS), help="comma-separated (default: all)")
    p.add_argument("--seeds", default=None, help="e.g. 0-9 or 0,3 (default: from 0 until 3 paired splits ran on "
                                                 "UJIIndoorLoc, 10 on the others)")
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--data-dir", type=Path, default=Path(os.environ.get("LMVE_DATA_DIR", ROOT.parent / "shared" /
                                                                          "datasets")))
    p.add_argument("--cached-only", action="store_true", help="summarise the cached runs only")
    args = p.parse_args(argv)
    datasets = [d.strip() for d in args.datasets.split(",") if d.strip()]
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    if not args.cached_only:
        for dataset in datasets:
            wanted = DATASETS[dataset][1]
            seeds = parse_seeds(args.seeds) if args.seeds else range(3 * wanted)
            done = 0
            for seed in seeds:
                if not args.seeds and done == wanted:
                    break
                rows = [run_one(dataset, variant, seed, args.data_dir) for variant in variants]
                for row in rows:
                    print(f"{dataset} {row['variant']} seed {seed}: " + (f"refused: {row['refused']}" if "refused" in row
                          else f"{row['wall_s']:.0f} s, {row['peak_mib']:.0f} MiB, centre {row['centre']}, "
                               f"volume {row['volume']:.4g}"), flush=True)
                done += all("refused" not in r for r in rows)
    rows = [json.loads(f.read_text()) for f in sorted((CACHE / "runs").glob("*.json"))]
    rows.sort(key=lambda r: (list(DATASETS).index(r["dataset"]), r["seed"], r["variant"]))
    OUT.mkdir(parents=True, exist_ok=True)
    with open(OUT / "train_speed.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        w.writeheader()
        for r in (r for r in rows if "refused" not in r):
            w.writerow({**{k: r[k] for k in CSV_COLUMNS if k in r}, "candidates": json.dumps(r["candidates"]),
                        "stages_json": json.dumps(r["stages"])})
    (OUT / "train_speed.md").write_text(summarise(rows, argv))
    print(f"wrote {OUT / 'train_speed.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
