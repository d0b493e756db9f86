"""How `lmve-train`'s cost grows with the survey: wall time, peak memory and each stage's seconds at 5k, 20k,
80k and 320k rows, with each stage's growth exponent; and the sites of UJIIndoorLoc on the local engine
against Dask.

    python -m benchmarks.train_scale                                  # every dataset and size (hours; resumes)
    python -m benchmarks.train_scale --datasets survey --rows 5000,20000
    python -m benchmarks.train_scale --sites                          # UJI by building: local against Dask
    python -m benchmarks.train_scale --cached-only                    # summarise what ran

Datasets (:data:`DATASETS`), written once as Parquet under ``benchmarks/cache/train_scale/inputs/``:

- ``survey``: a synthetic survey at site scale, ``training.data.synthetic.make_survey(rows // 10, readings=10,
  n_beacons=200)``: 200 features, ten readings per surveyed position;
- ``uji``: UJIIndoorLoc's TrainingData (520 WAPs, LONGITUDE and LATITUDE) replicated with fresh noise: each
  copy after the first adds N(0, 2 dB) to every detected RSSI (rounded, within [-104, 0]); below its
  19,937 rows, a random subset.

Each run is the real command, ``python -m training.commands.train --csv FILE --targets ... --quiet`` with the
defaults, in a child process alone on the machine, capped at :data:`CAP` seconds (a capped run is recorded as
stopped). The child's ``metrics.json`` gives each stage's seconds and peak memory, its rusage the whole peak.
The growth exponent of a stage between two sizes is ``log(t2 / t1) / log(n2 / n1)``. Runs are cached as JSON
under ``benchmarks/cache/train_scale/runs/``.

``--sites``: ``lmve-train --dataset indoor_localization --split-by BUILDINGID`` with ``--engine local`` and with
``--engine dask --workers 2``, as a user runs them and with the thread counts fixed (``LMVE_TORCH_THREADS=1``):
wall time, and whether each pair's repositories hold the same models and arrays (the bundle files that
differ, per model).

Writes ``benchmarks/results/train_scale.csv`` (one row per run: dataset, rows, features, wall_s, peak_mib and
each stage's seconds) and ``train_scale.md``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

from benchmarks.common import DATA_DIR, RESULTS, cache_dir, command, commit, write_json, write_rows, write_text
from benchmarks.harness.child import run_child

CACHE = cache_dir("train_scale")
ROWS = (5_000, 20_000, 80_000, 320_000)
DATASETS = {"survey": {"targets": "x_m,y_m"}, "uji": {"targets": "LONGITUDE,LATITUDE"}}
#: the most one run may take (seconds)
CAP = 3600
#: the span the issue's exponent target is about
SPAN = (20_000, 320_000)
#: a stage under this many seconds at the largest size is reported, not judged (timer noise)
NEGLIGIBLE_S = 2.0
BASE_COLUMNS = ["dataset", "rows", "features", "wall_s", "peak_mib", "stopped", "centre", "served", "coverage",
                "volume", "commit"]


# ----------------------------------------------------------------------------------------- the inputs
def survey_frame(rows: int):
    import pandas as pd

    from training.data.synthetic import make_survey

    X, Y, _, _, features, targets = make_survey(rows // 10, readings=10, n_beacons=200, seed=0)
    frame = pd.DataFrame(X.astype(np.float32), columns=features)
    frame[targets[0]], frame[targets[1]] = Y[:, 0], Y[:, 1]
    return frame


def uji_frame(rows: int, data_dir: Path):
    import pandas as pd

    base = pd.read_csv(data_dir / "indoor_localization" / "TrainingData.csv.gz")
    waps = [c for c in base.columns if c.startswith("WAP")]
    keep = waps + ["LONGITUDE", "LATITUDE"]
    rng = np.random.default_rng(0)
    copies = [base[keep]]
    while sum(len(c) for c in copies) < rows:
        copy = base[keep].copy()
        rssi = copy[waps].to_numpy(dtype=np.float64)
        seen = rssi != 100
        noisy = np.clip(np.round(rssi + rng.normal(0.0, 2.0, rssi.shape)), -104, 0)
        copy[waps] = np.where(seen, noisy, rssi).astype(np.int16)
        copies.append(copy)
    frame = pd.concat(copies, ignore_index=True)
    pick = np.sort(rng.choice(len(frame), rows, replace=False)) if rows < len(base) else np.arange(rows)
    return frame.iloc[pick].reset_index(drop=True)


def input_file(dataset: str, rows: int, data_dir: Path) -> Path:
    path = CACHE / "inputs" / f"{dataset}_{rows}.parquet"
    if not path.is_file():
        frame = survey_frame(rows) if dataset == "survey" else uji_frame(rows, data_dir)
        path.parent.mkdir(parents=True, exist_ok=True)
        frame.to_parquet(path.with_suffix(".tmp"))
        path.with_suffix(".tmp").replace(path)
    return path


# ----------------------------------------------------------------------------------------- the runs
def run_one(dataset: str, rows: int, data_dir: Path, rerun: bool = False) -> dict:
    """One ``lmve-train`` run on ``rows`` rows of ``dataset`` (cached)."""
    cached = CACHE / "runs" / f"{dataset}_{rows}.json"
    if cached.is_file() and not rerun:
        return json.loads(cached.read_text())
    path = input_file(dataset, rows, data_dir)
    out = CACHE / "out" / f"{dataset}_{rows}"
    cmd = [sys.executable, "-m", "training.commands.train", "--csv", str(path), "--targets",
           DATASETS[dataset]["targets"], "--seed", "0", "--quiet", "--out", str(out)]
    child = run_child(cmd, CACHE / "out" / f"{dataset}_{rows}.log", cap=CAP)
    row = {"dataset": dataset, "rows": rows, "commit": commit(), "command": " ".join(cmd[1:]),
           "wall_s": round(child.wall_s, 1), "stopped": child.stopped, "peak_mib": round(child.peak_mib, 1)}
    if child.code not in (0, None):
        log = (out.parent / f"{dataset}_{rows}.log").read_text()
        raise RuntimeError(f"{' '.join(cmd)} failed ({child.code}):\n{log[-3000:]}")
    if not child.stopped:
        metrics = json.loads((out / "metrics.json").read_text())
        manifest = json.loads((out / "bundle" / "manifest.json").read_text())
        served = (manifest.get("selection") or {}).get("primary") or manifest.get("primary_method")
        row.update(features=len(manifest["feature_names"]), centre=manifest["training"]["centre"]["name"],
                   served=served, coverage=metrics["metrics"][served]["coverage"],
                   volume=metrics["metrics"][served]["volume"],
                   stages={k: round(v["seconds"], 2) for k, v in metrics["stages"].items()},
                   stage_peaks={k: v["peak_rss_mib"] for k, v in metrics["stages"].items()})
        row["peak_mib"] = round(max([row["peak_mib"], *row["stage_peaks"].values()]), 1)
    write_json(cached, row, indent=1)
    return row


def exponent(t1: float | None, t2: float | None, n1: int, n2: int) -> float | None:
    if not t1 or not t2 or t1 <= 0 or t2 <= 0:
        return None
    return math.log(t2 / t1) / math.log(n2 / n1)


# ----------------------------------------------------------------------------------------- the sites
#: the --sites runs: (name, extra flags, environment additions)
SITE_RUNS = (("local", [], {}), ("dask", ["--engine", "dask", "--workers", "2"], {}),
             ("local, threads fixed", [], {"LMVE_TORCH_THREADS": "1"}),
             ("dask, threads fixed", ["--engine", "dask", "--workers", "2"], {"LMVE_TORCH_THREADS": "1"}))


def run_sites(data_dir: Path, rerun: bool = False) -> dict:
    """UJIIndoorLoc by building with the local engine and with Dask on 2 local workers, as a user runs them
    (each fit on the cores it finds idle) and with the thread counts fixed (``LMVE_TORCH_THREADS=1``), each
    pair compared (cached)."""
    import os

    cached = CACHE / "runs" / "sites.json"
    if cached.is_file() and not rerun:
        return json.loads(cached.read_text())
    outs, row = {}, {"commit": commit(), "engines": {}}
    for name, extra, env in SITE_RUNS:
        slug = name.replace(", ", "_").replace(" ", "_")
        out = CACHE / "out" / f"sites_{slug}"
        cmd = [sys.executable, "-m", "training.commands.train", "--dataset", "indoor_localization", "--split-by",
               "BUILDINGID", "--seed", "0", "--quiet", "--out", str(out), *extra]
        child = run_child(cmd, CACHE / "out" / f"sites_{slug}.log", cap=CAP, env={**os.environ, **env})
        if child.code != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed ({child.code})")
        outs[name] = out
        repo = json.loads((out / "repository.json").read_text())
        row["engines"][name] = {"command": " ".join([*(f"{k}={v}" for k, v in env.items()), *cmd[1:]]),
                                "wall_s": round(child.wall_s, 1), "peak_mib": round(child.peak_mib, 1),
                                "models": {n: m["primary_method"] for n, m in repo["models"].items()}}
    row["same"] = {"default": compare_repositories(outs["local"], outs["dask"]),
                   "fixed": compare_repositories(outs["local, threads fixed"], outs["dask, threads fixed"])}
    write_json(cached, row, indent=1)
    return row


def compare_repositories(a: Path, b: Path) -> dict:
    """Whether both hold the same models, and per model the bundle files whose arrays differ."""
    ra, rb = (json.loads((p / "repository.json").read_text()) for p in (a, b))
    out = {"models": list(ra["models"]) == list(rb["models"]), "differ": {}}
    for name in ra["models"]:
        differ = []
        for file in sorted(p.name for p in (a / name).glob("*.npz")):
            with np.load(a / name / file) as fa, np.load(b / name / file) as fb:
                if any(fa[k].shape != fb[k].shape or not np.array_equal(fa[k], fb[k], equal_nan=fa[k].dtype.kind == "f")
                       for k in fa.files):
                    differ.append(file)
        out["differ"][name] = differ
    return out


# ----------------------------------------------------------------------------------------- the summary
def stage_names(rows: list[dict]) -> list[str]:
    names: list[str] = []
    for row in rows:
        names += [s for s in row.get("stages", {}) if s not in names]
    return names


def seconds(row: dict, stage: str) -> float | None:
    """A run's seconds in ``stage`` (``"wall"``: the whole command)."""
    return row["wall_s"] if stage == "wall" else row.get("stages", {}).get(stage)


def summarise(rows: list[dict], sites: dict | None, argv: list[str]) -> str:
    lines = [f"## `lmve-train` as the survey grows\n",
             f"Command: `{command('train_scale', argv)}` (the summary) at commit {commit()}, each run at the "
             "commit its row names; 2 cores, each run alone, "
             f"capped at {CAP} s; the defaults (`--csv FILE --targets ...`). Seconds per stage from each run's "
             "`metrics.json`; `peak` the child's peak resident set. Exponent: `log(t2/t1) / log(n2/n1)`.\n"]
    for dataset in DATASETS:
        mine = sorted((r for r in rows if r["dataset"] == dataset), key=lambda r: r["rows"])
        if not mine:
            continue
        stages = stage_names(mine)
        lines += [f"### {dataset}\n", "| stage | " + " | ".join(f"{r['rows'] // 1000}k s" for r in mine)
                  + " | exponent 20k-320k |", "|---|" + "---|" * (len(mine) + 1)]
        by = {r["rows"]: r for r in mine}
        for stage in [*stages, "wall"]:
            cells = []
            for r in mine:
                t = seconds(r, stage)
                cells.append("stopped" if r.get("stopped") else ("-" if t is None else f"{t:.1f}"))
            lo, hi = by.get(SPAN[0]), by.get(SPAN[1])
            if lo and hi and not hi.get("stopped"):
                t2 = seconds(hi, stage)
                e = exponent(seconds(lo, stage), t2, *SPAN)
                if e is not None and (t2 or 0) < NEGLIGIBLE_S:
                    e_text = f"{e:.2f} (under {NEGLIGIBLE_S:.0f} s)"
                else:
                    e_text = "-" if e is None else f"**{e:.2f}**" if e > 1.2 else f"{e:.2f}"
            else:
                e_text = "-"
            lines.append(f"| {stage} | " + " | ".join(cells) + f" | {e_text} |")
        lines += ["", "| rows | features | wall s | peak MiB | centre | served | test coverage | mean volume "
                  "| commit |", "|---|---|---|---|---|---|---|---|---|"]
        for r in mine:
            cov, vol = r.get("coverage"), r.get("volume")
            stopped = "+ (stopped)" if r.get("stopped") else ""
            lines.append(f"| {r['rows']} | {r.get('features', '-')} | {r['wall_s']}{stopped}"
                         f" | {r['peak_mib']:.0f} | {r.get('centre', '-')} | {r.get('served', '-')} | "
                         f"{'-' if cov is None else f'{100 * cov:.1f} %'} | {'-' if vol is None else f'{vol:.4g}'} | "
                         f"{str(r.get('commit'))[:7]} |")
        lines.append("")
    if sites:
        engines = sites["engines"]
        lines += ["### UJIIndoorLoc by building: the local engine against Dask\n",
                  "| engine | command | wall s | peak MiB (client) | served per model |", "|---|---|---|---|---|"]
        for name, e in engines.items():
            lines.append(f"| {name} | `{e['command']}` | {e['wall_s']} | {e['peak_mib']:.0f} | "
                         + ", ".join(f"{k}: {v}" for k, v in e["models"].items()) + " |")
        lines.append("")
        for key, (a, b) in (("default", ("local", "dask")), ("fixed", ("local, threads fixed", "dask, threads fixed"))):
            same = sites["same"][key]
            lines.append(f"- {b} / {a} wall: **{engines[b]['wall_s'] / engines[a]['wall_s']:.2f}**; the same models: "
                         f"{'yes' if same['models'] else 'no'}; bundle files whose arrays differ: "
                         + "; ".join(f"{n}: {', '.join(d) or 'none'}" for n, d in same["differ"].items()) + ".")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--datasets", default=",".join(DATASETS))
    p.add_argument("--rows", default=",".join(map(str, ROWS)))
    p.add_argument("--sites", action="store_true", help="only UJIIndoorLoc by building, local against Dask")
    p.add_argument("--rerun", action="store_true", help="run again what is cached")
    p.add_argument("--cached-only", action="store_true")
    args = p.parse_args(argv)
    data_dir = DATA_DIR
    rows: list[dict] = []
    if not args.cached_only:
        if args.sites:
            run_sites(data_dir, args.rerun)
        else:
            for dataset in args.datasets.split(","):
                for n in map(int, args.rows.split(",")):
                    row = run_one(dataset, n, data_dir, args.rerun)
                    print(f"{dataset} {n}: {row['wall_s']} s, {row['peak_mib']} MiB", flush=True)
    for path in sorted((CACHE / "runs").glob("*.json")):
        if path.stem != "sites":
            rows.append(json.loads(path.read_text()))
    sites_path = CACHE / "runs" / "sites.json"
    sites = json.loads(sites_path.read_text()) if sites_path.is_file() else None
    stages = stage_names(rows)
    flat = [{**{k: r.get(k) for k in BASE_COLUMNS}, **{f"{s}_s": r.get("stages", {}).get(s) for s in stages}}
            for r in sorted(rows, key=lambda r: (r["dataset"], r["rows"]))]
    write_rows(RESULTS / "train_scale.csv", flat, [*BASE_COLUMNS, *(f"{s}_s" for s in stages)])
    write_text(RESULTS / "train_scale.md", summarise(rows, sites, sys.argv[1:] if argv is None else argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
