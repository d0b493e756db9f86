"""``lmve-predict`` on logs of 1,000,000 synthetic-survey rows and 200,000 UJIIndoorLoc-sized rows: rows/s and
peak memory, local and on a 2-worker local Dask cluster, and memory against input size.

    python -m benchmarks.predict                     # everything (about 15 minutes on 2 cores)
    python -m benchmarks.predict --datasets synthetic --engines local

Bundles (cached under ``benchmarks/cache/predict/``): ``synthetic``, what ``lmve-train --dataset synthetic``
writes (the embedded default), and ``uji``, what ``lmve-train --dataset indoor_localization`` writes (520 WAP
columns; kNN centre, floors). Inputs: fresh synthetic readings (:func:`training.data.synthetic.make_queries`) and
UJIIndoorLoc TrainingData rows drawn with replacement, written as CSV once. Each run is the installed
``lmve-predict`` in its own process writing Parquet; its process tree (the command and, for Dask, the
scheduler and workers) is sampled every 50 ms for resident memory (psutil): ``peak_mib`` is the largest sum
over the tree, ``peak_client_mib`` the command's own. Each dataset runs at two sizes (a quarter and all of
it): flat memory means the same peak at both. Writes ``benchmarks/results/predict.{csv,md}`` with the
command and commit.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.common import RESULTS, cache_dir, command as command_line, commit, write_rows, write_text

CACHE = cache_dir("predict")
OUT = RESULTS
SIZES = {"synthetic": 1_000_000, "uji": 200_000}
TRAIN = {"synthetic": ["--dataset", "synthetic"], "uji": ["--dataset", "indoor_localization"]}
COLUMNS = ["dataset", "engine", "rows", "input_mib", "seconds", "rows_per_s", "peak_mib", "peak_client_mib"]


def bundle(name: str) -> Path:
    """The bundle ``name``, trained once with the product's defaults."""
    path = CACHE / "bundles" / name
    if not (path / "bundle" / "manifest.json").is_file():
        print(f"training {name} ...", flush=True)
        subprocess.run([str(Path(sys.executable).parent / "lmve-train"), *TRAIN[name], "--out", str(path), "--quiet"],
                       check=True)
    return path / "bundle"


def rows_file(name: str, n: int, model) -> Path:
    """A CSV of ``n`` readings with the bundle's feature columns, written once (1 MiB blocks of rows)."""
    path = CACHE / "inputs" / f"{name}-{n}.csv"
    if path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    print(f"writing {path.name} ...", flush=True)
    if name == "uji":
        from training.data.datasets import load_dataset

        X = load_dataset("indoor_localization").X
        rng = np.random.default_rng(0)
    with open(tmp, "w") as f:
        f.write(",".join(model.feature_names) + "\n")
        for a in range(0, n, 20_000):
            b = min(n, a + 20_000)
            if name == "uji":
                block = X[rng.integers(0, len(X), size=b - a)]
                np.savetxt(f, block, fmt="%d", delimiter=",")
            else:
                from training.data.synthetic import make_queries

                np.savetxt(f, make_queries(b - a, seed=1000 + a)[0], fmt="%.6f", delimiter=",")
    os.replace(tmp, path)
    return path


def run(bundle_dir: Path, path: Path, engine: str) -> dict:
    """One ``lmve-predict`` run: seconds and peak resident memory of its process tree."""
    import psutil

    out = CACHE / "out" / f"{path.stem}-{engine}.parquet"
    out.parent.mkdir(parents=True, exist_ok=True)
    cmd = [str(Path(sys.executable).parent / "lmve-predict"), "--bundle", str(bundle_dir), "--input", str(path),
           "--out", str(out), "--no-progress", "--engine", engine]
    if engine == "dask":
        cmd += ["--workers", "2"]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    root = psutil.Process(proc.pid)
    peak = peak_client = 0
    while proc.poll() is None:
        try:
            tree = [root, *root.children(recursive=True)]
            rss = 0
            for p in tree:
                try:
                    rss += p.memory_info().rss
                except psutil.Error:
                    pass
            peak = max(peak, rss)
            peak_client = max(peak_client, root.memory_info().rss)
        except psutil.Error:
            pass
        time.sleep(0.05)
    seconds = time.perf_counter() - t0
    stdout, stderr = proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{stderr[-2000:]}")
    rows = int(stdout.split(" rows ->")[0].rsplit(" ", 1)[-1])
    out.unlink(missing_ok=True)
    return {"rows": rows, "seconds": round(seconds, 2), "rows_per_s": round(rows / seconds),
            "peak_mib": round(peak / 2**20), "peak_client_mib": round(peak_client / 2**20)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--datasets", default="synthetic,uji")
    p.add_argument("--engines", default="local,dask")
    args = p.parse_args(argv)
    from models.bundle import load_bundle

    command = command_line("predict", argv)
    results = []
    for name in [d.strip() for d in args.datasets.split(",") if d.strip()]:
        bdir = bundle(name)
        model = load_bundle(bdir)
        for n in (SIZES[name] // 4, SIZES[name]):
            path = rows_file(name, n, model)
            for engine in [e.strip() for e in args.engines.split(",") if e.strip()]:
                r = {"dataset": name, "engine": engine, "input_mib": round(path.stat().st_size / 2**20),
                     **run(bdir, path, engine)}
                print(json.dumps(r), flush=True)
                results.append(r)
    write_rows(OUT / "predict.csv", results, COLUMNS)
    write_text(OUT / "predict.md", report(results, command))
    print((OUT / "predict.md").read_text())
    shutil.rmtree(CACHE / "out", ignore_errors=True)
    return 0


def report(results: list[dict], command: str) -> str:
    lines = ["# lmve-predict: rows/s and peak memory", "",
             f"Command: `{command}` at commit `{commit()}`, {time.strftime('%Y-%m-%d')}, on this {os.cpu_count()}-core "
             "machine. Each run is the installed `lmve-predict` writing Parquet from a CSV, in 4,096-row partitions; "
             "memory is the resident set of its whole process tree (for Dask: the command, the scheduler and 2 "
             "worker processes), sampled every 50 ms. Seconds include loading the bundle (and starting the "
             "cluster).", "",
             "| dataset | engine | rows | input (MiB) | seconds | rows/s | peak memory (MiB) | of which the command |",
             "|---|---|---|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['dataset']} | {r['engine']} | {r['rows']:,} | {r['input_mib']:,} | {r['seconds']} | "
                     f"{r['rows_per_s']:,} | {r['peak_mib']:,} | {r['peak_client_mib']:,} |")
    lines += ["", "Memory against input size (peak at all rows / peak at a quarter of them; 1.0 is flat):", ""]
    for name in dict.fromkeys(r["dataset"] for r in results):
        for engine in dict.fromkeys(r["engine"] for r in results if r["dataset"] == name):
            runs = [r for r in results if r["dataset"] == name and r["engine"] == engine]
            if len(runs) == 2:
                lines.append(f"- {name}, {engine}: {runs[0]['peak_mib']:,} MiB at {runs[0]['rows']:,} rows, "
                             f"{runs[1]['peak_mib']:,} MiB at {runs[1]['rows']:,} ({runs[1]['peak_mib'] / runs[0]['peak_mib']:.2f})")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
