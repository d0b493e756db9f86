"""UJIIndoorLoc's three buildings as a model repository: ``lmve-train --split-by BUILDINGID`` over seeds,
then the repository served by one ``lmve-serve`` (the docs' worked example, many sites).

    python -m benchmarks.repository --seeds 0-9

Per seed, ``lmve-train --dataset indoor_localization --split-by BUILDINGID --methods ge,nle --centre knn
--seed S --out benchmarks/cache/repository/seed-S`` (kNN fingerprinting: the centre ``auto`` picks or
ties with on UJIIndoorLoc, 20x faster to select; a seed whose ``repository.json`` exists is not trained
again). Each building's test part holds whole positions the model never saw (the automatic position
groups), so its test coverage is one draw of the guarantee "P >= 0.9 at a new position"; over seeds
the mean must be near 0.9 or above. Then seed 0's repository is served (``--model-repository``, one
worker) and every model answers one test row per building on ``/models/{name}/predict-region``: the
seconds to ready and the answers' model names are recorded.

Writes ``benchmarks/results/repository.{json,md}``: per building the rows, the served method by seed,
the test coverage (mean, sd, min, max over seeds) and the mean area in m^2 (targets are kilometres).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.common import M2_PER_KM2, RESULTS, cache_dir, commit, parse_seeds
from benchmarks.load.run_load import free_port

CACHE = cache_dir("repository")
COMMAND = "python -m benchmarks.repository"




def train(seed: int) -> tuple[dict, float | None]:
    """Seed ``seed``'s repository manifest (trained unless cached) and the training seconds (``None``: not
    recorded)."""
    out = CACHE / f"seed-{seed}"
    manifest, timing = out / "repository.json", CACHE / f"seed-{seed}.seconds"
    if manifest.is_file():
        return json.loads(manifest.read_text()), float(timing.read_text()) if timing.is_file() else None
    t0 = time.perf_counter()
    subprocess.run([str(Path(sys.executable).parent / "lmve-train"), "--dataset", "indoor_localization",
                    "--split-by", "BUILDINGID", "--methods", "ge,nle", "--centre", "knn", "--seed", str(seed),
                    "--out", str(out), "--quiet"], check=True)
    seconds = time.perf_counter() - t0
    timing.write_text(f"{seconds:.2f}\n")
    return json.loads(manifest.read_text()), seconds


def serve(repository: Path) -> dict:
    """``lmve-serve --model-repository`` on ``repository``: seconds to ready, ``GET /models``, one answer per model."""
    import httpx

    from training.data.datasets import load_dataset

    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("LMVE_BUNDLE", "LMVE_MODEL_REPOSITORY")}
    t0 = time.perf_counter()
    proc = subprocess.Popen([str(Path(sys.executable).parent / "lmve-serve"), "--model-repository", str(repository),
                             "--port", str(port), "--log-level", "warning"], env=env, stdout=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(1200):
            try:
                if httpx.get(base + "/readyz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None:
                raise RuntimeError(f"lmve-serve exited with {proc.returncode}")
            time.sleep(0.05)
        ready_s = time.perf_counter() - t0
        listing = httpx.get(base + "/models").json()
        ds = load_dataset("indoor_localization")
        building = np.asarray(ds.meta["BUILDINGID"])
        answers = {}
        for name, entry in sorted(json.loads((repository / "repository.json").read_text())["models"].items()):
            row = np.flatnonzero(building.astype(str) == entry["value"])[0]
            r = httpx.post(f"{base}/models/{name}/predict-region", json={"features": [ds.X[row].tolist()]}).json()
            answers[name] = {"model": r["model"], "method": r["method"],
                             "area_m2": round(r["regions"][0]["volume"] * M2_PER_KM2, 1)}
        return {"ready_s": round(ready_s, 2), "models": [(m["name"], m["state"]) for m in listing["models"]],
                "answers": answers}
    finally:
        proc.terminate()
        proc.wait()


def summarise(manifests: dict[int, dict], seconds: dict[int, float | None]) -> list[dict]:
    names = sorted(manifests[min(manifests)]["models"])
    rows = []
    for name in names:
        entries = [m["models"][name] for m in manifests.values() if name in m["models"]]
        cov = [e["test_coverage"] for e in entries]
        area = [e["test_volume"] * M2_PER_KM2 for e in entries]
        served = {}
        for e in entries:
            served[e["primary_method"]] = served.get(e["primary_method"], 0) + 1
        rows.append({"model": name, "rows": entries[0]["rows"], "seeds": len(entries),
                     "coverage_mean": round(statistics.fmean(cov), 4),
                     "coverage_sd": round(statistics.stdev(cov), 4) if len(cov) > 1 else 0.0,
                     "coverage_min": round(min(cov), 4), "coverage_max": round(max(cov), 4),
                     "area_m2_mean": round(statistics.fmean(area), 1), "area_m2_median": round(statistics.median(area), 1),
                     "area_m2_min": round(min(area), 1), "area_m2_max": round(max(area), 1), "served": served,
                     "failed_seeds": sum(name in m.get("failed", {}) for m in manifests.values())})
    return rows


def write(rows: list[dict], manifests: dict, seconds: dict, served: dict, args) -> None:
    timed = [s for s in seconds.values() if s is not None]
    result = {"command": f"{COMMAND} --seeds {args.seeds}", "commit": commit(), "seeds": sorted(manifests),
              "train_seconds_per_seed": round(statistics.fmean(timed), 1) if timed else None,
              "rows": rows, "serving": served}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "repository.json").write_text(json.dumps(result, indent=2) + "\n")
    lines = ["# UJIIndoorLoc's three buildings as a model repository", "",
             f"`{result['command']}` at commit `{result['commit']}`: `lmve-train --dataset indoor_localization "
             "--split-by BUILDINGID --methods ge,nle --centre knn --seed S`, one bundle per building, each tested "
             "on whole positions it never saw (coverage target 0.9).", "",
             "| model | rows | seeds | test coverage mean | sd | min | max | area (m^2) median | min | max | served |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        served_text = ", ".join(f"{k.upper()} x{v}" for k, v in sorted(r["served"].items()))
        lines.append(f"| {r['model']} | {r['rows']} | {r['seeds']} | {100 * r['coverage_mean']:.1f} % | "
                     f"{100 * r['coverage_sd']:.1f} | {100 * r['coverage_min']:.1f} % | {100 * r['coverage_max']:.1f} % "
                     f"| {r['area_m2_median']:.0f} | {r['area_m2_min']:.0f} | {r['area_m2_max']:.0f} | {served_text} |")
    lines += ["", "Area: each seed's mean test area of the served method, then the median, min and max over seeds. "
              "Each building calibrates on 15-31 held-out positions: the guarantee holds on average over seeds, "
              "one split's coverage and area vary with the positions drawn.", "",
              f"Training the three models: {result['train_seconds_per_seed']} s per seed (2 cores)." if timed else
              "Training times: not recorded (cached runs).", ""]
    if served:
        lines += [f"Seed {min(manifests)}'s repository served by one `lmve-serve --model-repository` (1 worker): "
                  f"ready in {served['ready_s']} s; models "
                  + ", ".join(f"{n} {s}" for n, s in served["models"]) + ".", "",
                  "| path | answered by | method | area (m^2) |", "|---|---|---|---|"]
        for name, a in served["answers"].items():
            lines.append(f"| `/models/{name}/predict-region` | {a['model']} | {a['method']} | {a['area_m2']} |")
    (RESULTS / "repository.md").write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", default="0-9", help="seeds, e.g. 0-9 or 0,3,5 (default 0-9)")
    args = parser.parse_args(argv)
    manifests, seconds = {}, {}
    for seed in parse_seeds(args.seeds):
        manifests[seed], seconds[seed] = train(seed)
        print(f"seed {seed}: " + ", ".join(f"{n} {e['test_coverage']:.3f}" for n, e in
                                           sorted(manifests[seed]["models"].items())), flush=True)
    served = serve(CACHE / f"seed-{min(manifests)}")
    write(summarise(manifests, seconds), manifests, seconds, served, args)
    print((RESULTS / "repository.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
