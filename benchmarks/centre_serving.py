"""Serving cost of each centre kind: single-row and 256-row /predict-region through a real lmve-serve.

    .venv/bin/python benchmarks/centre_serving.py [--rounds 8] [--requests 50]

One bundle per centre kind (paper and scaled SVR, kNN, boosted trees, MLP, stack) trained on the
synthetic data set (2,000 readings, 16 features; GE, NLE, LMVE), plus a kNN bundle of
UJIIndoorLoc (its survey's train part as reference rows, 519 features; GE and NLE, the centre and
NLE's neighbour searches are what is measured) when the data is present, beside the same bundle
searching as before (``uji-knn-sparse-v1``: scikit-learn on CSR; ``uji-knn-dense``). Each is served by ``lmve-serve`` (one worker) on loopback;
from one keep-alive connection, rounds alternate between the servers and between ``/noop``,
a 1-row and a 256-row ``/predict-region``, so that the shared machine's noise hits all alike.
Reported per bundle: median and p99 latency of each request kind and the 1-row cost over the
no-op's (the ratio the load benchmark tracks), the SVR of the paper being today's reference.
Bundles are cached under ``benchmarks/cache/centre_serving/``; writes
``benchmarks/results/centre_serving.{csv,md}``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CACHE = ROOT / "benchmarks" / "cache" / "centre_serving"
OUT = ROOT / "benchmarks" / "results"
KEY = "bench"
CENTRES = ("paper", "scaled", "knn", "hgb", "mlp", "stack")


#: the references for the UJIIndoorLoc bundle: the same bundle searching dense rows (before the sparse
#: fingerprint search), and with scikit-learn's brute force on CSR (sparse search version 1)
UJI_SEARCHES = {"-dense": (False, 1), "-sparse-v1": (True, 1)}


def bundle(name: str, centre: str) -> Path:
    """The bundle ``name`` (trained once, then cached). ``uji-knn-dense`` and ``uji-knn-sparse-v1``: the
    UJIIndoorLoc bundle with its kNN centre and NLE searching as :data:`UJI_SEARCHES` says."""
    path = CACHE / name
    if (path / "manifest.json").is_file():
        return path
    suffix = next((s for s in UJI_SEARCHES if name.endswith(s)), None)
    if suffix is not None:
        from models.bundle import load_bundle, save_bundle

        base = name[: -len(suffix)]
        model = load_bundle(bundle(base, centre))
        sparse, version = UJI_SEARCHES[suffix]
        c, nle = model.centre, model.methods["nle"].shape_
        c._index(c.X_fit_, c.Y_fit_, c.sparse_offset_ if sparse else None, version)
        nle._build_index(nle.sparse_offset_ if sparse else None, version)
        save_bundle(model, path, dataset=model.manifest.get("dataset"))
        np.save(CACHE / f"{name}_rows.npy", np.load(CACHE / f"{base}_rows.npy"))
        return path
    from models.bundle import save_bundle
    from training.datasets import load_dataset
    from training.pipeline import TrainConfig, train

    if name.startswith("uji"):
        ds = load_dataset("indoor_localization")
        config = TrainConfig(seed=0, methods=("ge", "nle"), centre=centre, rssi="auto", use_groups=False)
    else:
        ds = load_dataset("synthetic", n_samples=2000, seed=0)
        config = TrainConfig(seed=0, methods=("ge", "nle", "lmve"), centre=centre, use_groups=False,
                             method_params={"lmve": {"max_steps": 400}})
    result = train(ds, config)
    save_bundle(result.model, path, dataset=ds.info)
    np.save(CACHE / f"{name}_rows.npy", ds.X[result.split.test][:256])
    return path


def serve(path: Path):
    from tests.service.test_e2e import free_port, wait_alive

    port = free_port()
    env = {**os.environ, "LMVE_API_KEY": KEY, "LMVE_ENABLE_NOOP": "1", "LMVE_LOG_LEVEL": "warning",
           "LMVE_MAX_BODY_BYTES": "20000000"}
    proc = subprocess.Popen([str(Path(sys.executable).parent / "lmve-serve"), "--bundle", str(path), "--port",
                             str(port), "--log-level", "warning"], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    wait_alive(base, proc, 120.0, path="/readyz")
    return proc, base


def main(argv: list[str] | None = None) -> int:
    import httpx
    import orjson

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--requests", type=int, default=50, help="requests of each kind per round and server")
    args = p.parse_args(argv)
    names = {f"synthetic-{c}": c for c in CENTRES}
    from training.settings import TrainingSettings

    if TrainingSettings().data_dir is not None:
        names["uji-knn"] = "knn"
        names.update({f"uji-knn{suffix}": "knn" for suffix in UJI_SEARCHES})
    CACHE.mkdir(parents=True, exist_ok=True)
    paths = {n: bundle(n, c) for n, c in names.items()}
    servers = {n: serve(p) for n, p in paths.items()}
    times = {n: {"noop": [], "predict_1": [], "predict_256": []} for n in names}
    try:
        clients = {n: httpx.Client(base_url=base, headers={"x-api-key": KEY, "content-type": "application/json"},
                                   timeout=30.0) for n, (_, base) in servers.items()}
        bodies = {}
        for n in names:
            rows = np.load(CACHE / f"{n}_rows.npy")
            bodies[n] = {"noop": orjson.dumps({"features": rows[:1].tolist()}),
                         "predict_1": orjson.dumps({"features": rows[:1].tolist()}),
                         "predict_256": orjson.dumps({"features": rows[:256].tolist()})}
        route = {"noop": "/noop", "predict_1": "/predict-region", "predict_256": "/predict-region"}
        for n, c in clients.items():  # warm up
            for kind in route:
                for _ in range(5):
                    c.post(route[kind], content=bodies[n][kind]).raise_for_status()
        for _ in range(args.rounds):
            for n, c in clients.items():
                for kind in route:
                    for _ in range(args.requests):
                        t0 = time.perf_counter()
                        c.post(route[kind], content=bodies[n][kind]).raise_for_status()
                        times[n][kind].append(time.perf_counter() - t0)
    finally:
        for proc, _ in servers.values():
            proc.terminate()
            proc.wait(timeout=30)
    import pandas as pd

    rows = []
    for n, t in times.items():
        rec = {"bundle": n, "centre": names[n]}
        for kind, v in t.items():
            rec[f"{kind}_median_ms"] = 1e3 * float(np.median(v))
            rec[f"{kind}_p99_ms"] = 1e3 * float(np.quantile(v, 0.99))
        rec["predict_1_over_noop"] = rec["predict_1_median_ms"] / rec["noop_median_ms"]
        rows.append(rec)
    table = pd.DataFrame(rows)
    ref = table.loc[table.bundle == "synthetic-paper", "predict_1_over_noop"].iloc[0]
    table["ratio_vs_paper_svr"] = table.predict_1_over_noop / ref
    OUT.mkdir(parents=True, exist_ok=True)
    table.to_csv(OUT / "centre_serving.csv", index=False)
    lines = ["## Serving cost of each centre kind", "",
             f"Command: `benchmarks/centre_serving.py {' '.join(argv if argv is not None else sys.argv[1:])}`: "
             f"{args.rounds} rounds x {args.requests} requests of each kind per server, one keep-alive connection, "
             "one worker per server, all servers up at once on this 2-core machine. Latencies in ms (client side, "
             "loopback). `1-row / noop`: the single-row /predict-region over the no-op route; `vs paper SVR`: that "
             "ratio over the paper SVR bundle's (today's reference).", "",
             "| bundle | 1-row median | 1-row p99 | 256-row median | 256-row p99 | noop median | 1-row / noop | "
             "vs paper SVR |", "|---|---|---|---|---|---|---|---|"]
    for _, r in table.iterrows():
        lines.append(f"| {r.bundle} | {r.predict_1_median_ms:.2f} | {r.predict_1_p99_ms:.2f} | "
                     f"{r.predict_256_median_ms:.1f} | {r.predict_256_p99_ms:.1f} | {r.noop_median_ms:.2f} | "
                     f"{r.predict_1_over_noop:.2f} | {r.ratio_vs_paper_svr:.2f} |")
    (OUT / "centre_serving.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
