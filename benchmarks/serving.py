"""Serving speed of every bundle kind against a bare FastAPI no-op, through real servers on loopback.

    python -m benchmarks.serving [--bundles default,synthetic-knn,...] [--rounds 3] [--seconds 2]

Bundles (trained once, cached under ``benchmarks/cache/serving/``): ``default`` (what ``scripts/serve.sh``
trains: ``lmve-train --dataset synthetic``), ``synthetic-<centre>`` for each centre kind (2,000 synthetic
readings, GE, NLE and LMVE; ``synthetic-client`` is centred on the client's own estimates, which every request
sends as ``centers``; these serve LMVE, ``--primary lmve``, so that they compare centres alone), and ``uji-knn`` (UJIIndoorLoc's TrainingData, kNN centre, 520 WAP columns)
and ``uji-fingerprint`` (the same with the fingerprint centre, its configuration searched by position folds)
when the data set is present. Each is served by ``lmve-serve`` (one worker); beside them runs
``benchmarks.noop_app`` (one uvicorn worker), a bare FastAPI app that parses the same body with pydantic
and answers ``{}``. The scenarios, each measured with ``wrk`` (Debian package) in ``--rounds`` rounds that
alternate between the bundle's server and the no-op, so that the shared machine's noise hits both alike:

- ``single_over_noop``: single-row ``POST /predict-region`` (route ``/predict-region``) and ``/nle/predict-region``
  (route ``/nle/predict-region``), requests/s over the no-op's on the same body, ``wrk -t1 -c8``; the median of
  the per-round ratios;
- ``contains_over_noop``: the same for single-row ``POST /contains``;
- ``p99_256_ms``: the p99 latency of 256-row ``/predict-region`` requests from one connection;
- ``rows_per_s_1024``: rows per second in 1,024-row ``/predict-region`` requests from two connections;
  both also measured on the no-op with the same bodies, right after (``noop``: what a server that only
  parses the rows reaches, the floor under an absolute target);
- the per-model routes: the ``default`` bundle served as one of three models of a model repository
  (``--model-repository``, links to the bundle; bundle label ``default (repository of 3)``), single-row
  ``POST /models/{name}/predict-region`` and ``/models/{name}/contains`` over the no-op's on the same body,
  beside the plain ``/predict-region`` of that server (its default model), and the Open Inference Protocol's
  single-row ``POST /v2/models/{name}/infer`` (one FP64 ``features`` tensor, flat data) over the no-op's
  V2 route on the same body (issue 39);
- the Open Inference Protocol's other transports (``default`` and ``uji-knn``; needs ``h2load``, Debian's
  ``nghttp2-client``): ``rows_per_s_1024_binary`` (1,024-row ``/v2/models/{name}/infer`` with binary tensors in
  and out) and ``rows_per_s_1024_grpc`` (1,024-row gRPC ``ModelInfer``, raw contents), each followed by its no-op
  (``benchmarks.noop_app``'s binary route, ``benchmarks.noop_grpc``), and ``grpc_single_over_rest``: single-row
  gRPC calls/s over JSON ``/predict-region`` requests/s on the same server, in paired rounds;
- the radio watch (``default`` and ``uji-knn``, issue 129): ``radio_over_off``, single-row requests/s with the
  watch counting, deciding and reporting (``LMVE_RADIO=watch``) over the same bundle served with
  ``LMVE_RADIO=off``, paired rounds (with the server CPU time per request of each), and
  ``radio_adapt_over_off`` the same with ``adapt``, which also serves the model the decision builds
  (:func:`measure_radio`); ``radio_adapting_p99_ms``, the
  p99 of 256-row requests whose rows lost half their transmitters while the server decides and builds the
  adapted model (:func:`measure_radio_adapting`).

``--radio-only`` measures the radio watch's scenarios alone and writes ``serving_radio.{json,md}`` instead.
Writes ``benchmarks/results/serving.{json,md}``: the json is ``{"commit", "command", "date", "machine",
"rows": [{"bundle", "centre", "route", "scenario", "value"}]}`` (a ratio's rows also hold each round's ratio
and both sides' requests/s: ``rounds``, ``rps``, ``noop_rps``; a p99 or rows/s row the no-op's figure,
``noop``); the md the same as a table, with the targets of issues 32, 74, 98 and 113 (the latest where several set one).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.common import RESULTS, ROOT, cache_dir, command, commit, machine, utc_now, write_json, write_text
from benchmarks.load.grpc_load import frame, h2load
from benchmarks.load.run_load import KEY, free_port, wrk

CACHE = cache_dir("serving")
OUT = RESULTS
CENTRES = ("paper", "scaled", "knn", "fingerprint", "gp", "hgb", "stack", "mlp", "client")
#: scenario -> (target, "min" or "max")
TARGETS = {"single_over_noop": (0.5, "min"), "contains_over_noop": (0.5, "min"), "p99_256_ms": (50.0, "max"),
           "rows_per_s_1024": (100_000.0, "min")}
NLE_TARGET = 0.4
#: the absolute scenarios: (scenario, request body key, wrk connections, the figure of a wrk result)
LATENCY_SCENARIOS = (("p99_256_ms", "256", 1, lambda r: round(r["p99_ms"], 2)),
                     ("rows_per_s_1024", "1024", 2, lambda r: round(1024 * r["rps"])))
#: issue 74: (bundle, route, scenario) -> (target, sense); stricter than issue 32's where both set one
ISSUE_74 = {("default", "/predict-region", "single_over_noop"): (0.55, "min"),
            ("default", "/contains", "contains_over_noop"): (0.55, "min"),
            ("uji-knn", "/predict-region", "single_over_noop"): (0.4, "min"),
            ("uji-knn", "/predict-region", "rows_per_s_1024"): (40_000.0, "min"),
            ("uji-knn", "/predict-region", "p99_256_ms"): (15.0, "max")}
#: issue 98: the Open Inference Protocol's binary REST and gRPC rows
ISSUE_98 = {("uji-knn", "/v2/models/{name}/infer", "rows_per_s_1024_binary"): (40_000.0, "min"),
            ("uji-knn", "ModelInfer", "rows_per_s_1024_grpc"): (40_000.0, "min"),
            ("default", "ModelInfer", "grpc_single_over_rest"): (1.0, "min")}
#: issue 113: the model's cost per row (stricter where it repeats an earlier issue's target)
ISSUE_113 = {("default", "/predict-region", "single_over_noop"): (0.6, "min"),
             **{(name, route, scenario): (40_000.0, "min") for name in ("uji-knn", "uji-fingerprint")
                for route, scenario in (("/v2/models/{name}/infer", "rows_per_s_1024_binary"),
                                        ("ModelInfer", "rows_per_s_1024_grpc"))},
             ("default", "ModelInfer", "grpc_single_over_rest"): (1.0, "min")}
#: the bundles measured over binary REST and gRPC too
PROTOCOL_BUNDLES = ("default", "uji-knn", "uji-fingerprint")
#: the bundles whose radio watch is measured against the same server without it
RADIO_BUNDLES = ("default", "uji-knn")
GRPC_ROUTE = "ModelInfer"


def bundle(name: str) -> tuple[Path, str]:
    """``(bundle directory, centre kind)`` of bundle ``name``, trained once and cached with its request rows."""
    path = CACHE / name
    if not (path / "bundle" / "manifest.json").is_file():
        _train(name, path)
    manifest = json.loads((path / "bundle" / "manifest.json").read_text())
    return path / "bundle", manifest["centre"]["type"]


def _train(name: str, path: Path) -> None:
    from models.bundle import save_bundle
    from training.data.datasets import load_dataset
    from training.pipeline import TrainConfig, train

    print(f"training bundle {name} ...", flush=True)
    if name == "default":
        subprocess.run([str(Path(sys.executable).parent / "lmve-train"), "--dataset", "synthetic", "--out", str(path),
                        "--quiet"], check=True)
        ds = load_dataset("synthetic")
    else:
        if name.startswith("uji-"):
            ds = load_dataset("indoor_localization")
            config = TrainConfig(seed=0, methods=("ge", "nle", "lmve"), centre=name.split("-", 1)[1], rssi="auto",
                                 use_groups=False, method_params={"lmve": {"max_steps": 400}}, primary="lmve")
        else:
            ds = load_dataset("synthetic", n_samples=2000, seed=0)
            centre = name.split("-", 1)[1]
            if centre == "client":  # the client's own estimate: the truth plus an error that grows across the map
                rng = np.random.default_rng(1)
                error = rng.normal(size=ds.Y.shape) * (0.5 + 0.1 * np.abs(ds.Y - ds.Y.mean(axis=0)))
                ds = dataclasses.replace(ds, centers=ds.Y + error, centre_columns=["est_x", "est_y"])
            config = TrainConfig(seed=0, methods=("ge", "nle", "lmve"), centre=centre if centre != "client" else "auto",
                                 use_groups=False, method_params={"lmve": {"max_steps": 400}}, primary="lmve")
        result = train(ds, config)
        save_bundle(result.model, path / "bundle", dataset=ds.info)
    rng = np.random.default_rng(0)
    pick = rng.choice(len(ds.X), size=1024, replace=len(ds.X) < 1024)
    extra = {} if ds.centers is None else {"centers": ds.centers[pick]}
    np.savez(path / "rows.npz", X=ds.X[pick], Y=ds.Y[pick], **extra)


def _wait(base: str, proc: subprocess.Popen, path: str) -> None:
    import httpx

    for _ in range(600):
        if proc.poll() is not None:
            raise RuntimeError(f"the server at {base} exited with {proc.returncode}")
        try:
            if httpx.get(base + path, timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"the server at {base} did not become ready")


def serve_bundle(path: Path, repository: bool = False, default: str | None = None,
                 grpc_port: int = 0, settings: dict | None = None, cpu: int | None = None) -> tuple[subprocess.Popen, str]:
    """``lmve-serve`` on ``path``: a bundle, or (``repository``) a model repository whose default is ``default``;
    gRPC on ``grpc_port`` (0: off); ``settings``: more ``LMVE_*`` variables; ``cpu``: the one core it runs on
    (``taskset``, every thread of it; ``None``: any)."""
    port = free_port()
    env = {**os.environ, "LMVE_API_KEY": KEY, "LMVE_LOG_LEVEL": "warning", "LMVE_MAX_BODY_BYTES": "50000000",
           "LMVE_MAX_ROWS": "4096", "LMVE_GRPC_PORT": str(grpc_port), **({"LMVE_DEFAULT_MODEL": default} if default else {}),
           **(settings or {})}
    env.pop("LMVE_BUNDLE", None), env.pop("LMVE_MODEL_REPOSITORY", None)
    proc = subprocess.Popen([*(["taskset", "-c", str(cpu)] if cpu is not None else []),
                             str(Path(sys.executable).parent / "lmve-serve"),
                             "--model-repository" if repository else "--bundle", str(path), "--port",
                             str(port), "--log-level", "warning"], env=env, stdout=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    _wait(base, proc, "/readyz")
    return proc, base


def serve_noop_grpc() -> tuple[subprocess.Popen, int]:
    """``benchmarks.noop_grpc`` on a free port: the gRPC baseline and the load generator's ceiling."""
    import socket

    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "benchmarks.noop_grpc", str(port)], cwd=ROOT,
                            env={**os.environ, "OMP_NUM_THREADS": "1"}, stdout=subprocess.DEVNULL)
    for _ in range(300):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return proc, port
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("the gRPC no-op did not start")


def serve_noop() -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    proc = subprocess.Popen([str(Path(sys.executable).parent / "uvicorn"), "benchmarks.noop_app:app", "--port",
                             str(port), "--log-level", "warning"], env=env, cwd=ROOT, stdout=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    _wait(base, proc, "/readyz")
    return proc, base


#: the repository scenario: the default bundle as three models (links), the middle one also the default
REPOSITORY_MODELS = ("site-a", "site-b", "site-c")
REPOSITORY_ROUTES = {("/models/site-b/predict-region", "single_over_noop", "one"): [],
                     ("/models/site-b/contains", "contains_over_noop", "contains"): [],
                     ("/v2/models/site-b/infer", "single_over_noop", "v2"): [],
                     ("/predict-region", "single_over_noop", "one"): []}


def repository_of(path: Path, tmp: Path) -> Path:
    """A model repository of :data:`REPOSITORY_MODELS`, each a link to the bundle ``path``."""
    root = tmp / "repository"
    root.mkdir(exist_ok=True)
    for name in REPOSITORY_MODELS:
        if not (root / name).exists():
            (root / name).symlink_to(path.resolve(), target_is_directory=True)
    return root


def measure(name: str, path: Path, centre: str, noop: str, tmp: Path, args, repository: bool = False) -> list[dict]:
    """The scenarios of one bundle (see the module docstring), as result rows; ``repository``: the paired
    single-row scenarios of the per-model routes, the bundle served as one of three models."""
    rows = np.load(CACHE / name / "rows.npz")
    X, Y = rows["X"], rows["Y"]

    def body(n: int, **extra) -> dict:  # a client-centre bundle needs the client's estimates: ``centers``
        return {"features": X[:n].tolist(), **extra,
                **({"centers": rows["centers"][:n].tolist()} if "centers" in rows.files else {})}

    bodies = {"one": body(1), "contains": body(1, points=Y[:1].tolist()), "256": body(256), "1024": body(1024),
              "v2": {"inputs": [{"name": "features", "shape": [1, X.shape[1]], "datatype": "FP64",
                                 "data": X[0].tolist()}]}}
    for key, body in bodies.items():
        (tmp / f"{name}-{key}.json").write_text(json.dumps(body))
    label = f"{name} (repository of {len(REPOSITORY_MODELS)})" if repository else name
    proc, base = (serve_bundle(repository_of(path, tmp), repository=True, default=REPOSITORY_MODELS[1]) if repository
                  else serve_bundle(path))
    out = []
    try:
        wrk(base + "/predict-region", tmp / f"{name}-one.json", 1, 2)  # warm-up
        paired = ({k: [] for k in REPOSITORY_ROUTES} if repository else
                  {("/predict-region", "single_over_noop", "one"): [],
                   ("/nle/predict-region", "single_over_noop", "one"): [],
                   ("/contains", "contains_over_noop", "contains"): []})
        for _ in range(args.rounds):
            for (route, scenario, body), ratios in paired.items():
                a = wrk(noop + route, tmp / f"{name}-{body}.json", args.seconds, 8)
                b = wrk(base + route, tmp / f"{name}-{body}.json", args.seconds, 8)
                if a["errors"] or b["errors"]:
                    raise RuntimeError(f"{name} {route}: {b['errors']} errors (no-op {a['errors']})")
                ratios.append((b["rps"], a["rps"]))
        for (route, scenario, _), ratios in paired.items():
            route = route.replace("/site-b/", "/{name}/")
            out.append({"bundle": label, "centre": centre, "route": route, "scenario": scenario,
                        "value": round(statistics.median(b / a for b, a in ratios), 3),
                        "rounds": [round(b / a, 3) for b, a in ratios],
                        # the absolute rates: a ratio that moves between runs says which side moved
                        "rps": [round(b) for b, _ in ratios], "noop_rps": [round(a) for _, a in ratios]})
        if not repository:  # the repository rows are the per-model routes' ratios only
            for scenario, key, connections, figure in LATENCY_SCENARIOS:  # the bundle, then the no-op
                r, a = (wrk(server + "/predict-region", tmp / f"{name}-{key}.json", args.latency_seconds, connections)
                        for server in (base, noop))
                out.append({"bundle": name, "centre": centre, "route": "/predict-region", "scenario": scenario,
                            "value": figure(r), "p50_ms": round(r["p50_ms"], 2), "requests": r["requests"],
                            "noop": figure(a), "noop_p50_ms": round(a["p50_ms"], 2)})
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    for row in out:
        print(f"{row['bundle']:<18} {row['route']:<20} {row['scenario']:<20} {row['value']}", flush=True)
    return out


def measure_radio(name: str, path: Path, centre: str, tmp: Path, args) -> list[dict]:
    """``radio_over_off``: single-row ``/predict-region`` requests/s with the radio watch counting, deciding and
    reporting (``LMVE_RADIO=watch``: all the watching, the bundle served as trained) over the same server with it
    off, in paired rounds after a warm-up that lets the watch decide; ``radio_adapt_over_off``: the same with
    ``LMVE_RADIO=adapt`` (the default), which also serves the model its decision builds. The body repeats one
    row, so its transmitters are all the traffic hears: the watch decides that most others are gone, and the
    adapted model answers a row that then hears almost nothing (every reference row that hears nothing else
    ties), a different model at a different cost. Every server runs on core 0 and ``wrk`` on core 1 (unpinned,
    where the scheduler puts the two moves a round's rate more than the watch costs); the pairs alternate which
    server goes first (a server's flush after its run falls in the other's); ``cpu_ratio`` is the server CPU
    time per request with the watch off over with it on (its process tree, each run's flush included)."""
    import psutil

    rows = np.load(CACHE / name / "rows.npz")
    body = tmp / f"{name}-radio-one.json"
    body.write_text(json.dumps({"features": rows["X"][:1].tolist()}))
    flush_s = 1.0
    servers = {mode: serve_bundle(path, settings={"LMVE_RADIO": mode, "LMVE_SYNC_INTERVAL_S": str(flush_s)}, cpu=0)
               for mode in ("watch", "adapt", "off")}
    mine = os.sched_getaffinity(0)

    def cpu(mode: str) -> float:
        root = psutil.Process(servers[mode][0].pid)
        return sum(sum(p.cpu_times()[:2]) for p in (root, *root.children(recursive=True)))

    def run(mode: str) -> tuple[float, float]:
        c0 = cpu(mode)
        r = wrk(servers[mode][1] + "/predict-region", body, args.seconds, 8)
        if r["errors"]:
            raise RuntimeError(f"{name} radio {mode}: {r['errors']} errors")
        time.sleep(flush_s + 0.2)  # its last flush
        return r["rps"], (cpu(mode) - c0) / r["requests"] * 1e6

    try:
        os.sched_setaffinity(0, {1})  # wrk, started from here, on the other core
        for _, base in servers.values():
            wrk(base + "/predict-region", body, 5, 8)  # warm-up: the watch counts, decides and follows
        pairs = {"watch": [], "adapt": []}
        for i in range(args.rounds):
            for mode in pairs:
                order = ("off", mode) if i % 2 == 0 else (mode, "off")
                got = {m: run(m) for m in order}
                pairs[mode].append((got[mode], got["off"]))
    finally:
        os.sched_setaffinity(0, mine)
        for proc, _ in servers.values():
            proc.terminate()
            proc.wait(timeout=30)
    out = []
    for mode, scenario in (("watch", "radio_over_off"), ("adapt", "radio_adapt_over_off")):
        got = pairs[mode]
        row = {"bundle": name, "centre": centre, "route": "/predict-region", "scenario": scenario, "mode": mode,
               "value": round(statistics.median(on[0] / off[0] for on, off in got), 3),
               "rounds": [round(on[0] / off[0], 3) for on, off in got], "rps": [round(on[0]) for on, _ in got],
               "noop_rps": [round(off[0]) for _, off in got],
               "cpu_ratio": round(statistics.median(off[1] / on[1] for on, off in got), 3),
               "cpu_us_per_request": [round(on[1], 1) for on, _ in got],
               "noop_cpu_us_per_request": [round(off[1], 1) for _, off in got]}
        print(f"{name:<18} {'/predict-region':<20} {scenario:<20} {row['value']} (cpu {row['cpu_ratio']})", flush=True)
        out.append(row)
    return out


def drifted_rows(path: Path, X: np.ndarray) -> np.ndarray:
    """``X`` with every other transmitter its rows hear (by how often) set to its not-heard code: half the radio
    gone, as a site whose transmitters were replaced."""
    from models.bundle import load_bundle
    from models.radio import heard_mask

    base = load_bundle(path).radio_baseline
    if base is None:
        raise RuntimeError(f"{path}: the bundle keeps no radio map")
    X = np.array(X, dtype=np.float64)
    heard = heard_mask(X, base.rssi, base.unheard)
    cols = np.flatnonzero(heard.any(axis=0))
    gone = cols[np.argsort(-heard[:, cols].sum(axis=0), kind="stable")][::2]
    X[:, gone] = base.unheard[gone]
    return X


def measure_radio_adapting(name: str, path: Path, centre: str, tmp: Path, args) -> list[dict]:
    """``radio_adapting_p99_ms``: the p99 (and the slowest) of 256-row ``/predict-region`` requests from one
    connection whose rows have lost half their transmitters, to a server that decides and builds the adapted
    model during the run (``LMVE_RADIO=adapt``, its watch reset before each round, a 1 s flush; ``--adapting-seconds``
    long, so that the build falls inside it), beside the same bundle served with ``LMVE_RADIO=off`` on the same body
    just before (``noop``); after each round, how long until the last decision is served (``followed_after_s``)."""
    import httpx

    rows = np.load(CACHE / name / "rows.npz")
    body = tmp / f"{name}-drifted-256.json"
    body.write_text(json.dumps({"features": drifted_rows(path, rows["X"][:256]).tolist()}))
    servers = {mode: serve_bundle(path, settings={"LMVE_RADIO": mode, "LMVE_SYNC_INTERVAL_S": "1",
                                                  "LMVE_STATE_URL": f"sqlite:///{tmp / f'{name}-{mode}.sqlite'}"})
               for mode in ("adapt", "off")}
    headers = {"X-API-Key": KEY}
    runs, followed = {"adapt": [], "off": []}, []
    try:
        for _, base in servers.values():
            wrk(base + "/predict-region", body, 1, 1)  # warm-up
        for _ in range(args.rounds):
            httpx.post(servers["adapt"][1] + "/admin/radio/reset", headers=headers, timeout=30).raise_for_status()
            time.sleep(1.5)  # every worker back on the bundle as trained
            for mode in ("off", "adapt"):  # off first: the adapt server idle (reset, its last model built)
                r = wrk(servers[mode][1] + "/predict-region", body, args.adapting_seconds, 1)
                if r["errors"]:
                    raise RuntimeError(f"{name} radio ({mode}): {r['errors']} errors")
                runs[mode].append(r)
            t0 = time.perf_counter()
            while True:  # the traffic stopped: the last decision is built within seconds
                radio = httpx.get(servers["adapt"][1] + "/model", headers=headers, timeout=60).raise_for_status()
                radio = radio.json()["radio"]
                if radio.get("followed") and radio.get("gone"):
                    break
                if time.perf_counter() - t0 > 120:
                    raise RuntimeError(f"{name} radio: no decision followed 120 s after the round: {radio}")
                time.sleep(0.5)
            followed.append({"gone": radio["gone"], "followed_after_s": round(time.perf_counter() - t0, 1)})
    finally:
        for proc, _ in servers.values():
            proc.terminate()
            proc.wait(timeout=30)
    on, off = runs["adapt"], runs["off"]
    row = {"bundle": name, "centre": centre, "route": "/predict-region", "scenario": "radio_adapting_p99_ms",
           "value": round(statistics.median(r["p99_ms"] for r in on), 2),
           "noop": round(statistics.median(r["p99_ms"] for r in off), 2),
           "rounds": [round(r["p99_ms"], 2) for r in on], "max_ms": [round(r["max_ms"], 1) for r in on],
           "noop_max_ms": [round(r["max_ms"], 1) for r in off], "requests": [r["requests"] for r in on],
           "gone_followed": followed}
    row["over_off"] = round(row["value"] / row["noop"], 2)
    print(f"{name:<18} {'/predict-region':<20} radio_adapting_p99_ms {row['value']} (max {row['max_ms']})", flush=True)
    return [row]


def _binary_body(X: np.ndarray) -> tuple[bytes, int]:
    """A V2 binary request of the rows ``X`` (FP64 raw bytes after a JSON header) asking for binary outputs, and
    the header's length."""
    header = json.dumps({"inputs": [{"name": "features", "shape": list(X.shape), "datatype": "FP64",
                                     "parameters": {"binary_data_size": X.size * 8}}],
                         "parameters": {"binary_data_output": True}}).encode()
    return header + np.ascontiguousarray(X, "<f8").tobytes(), len(header)


def _grpc_body(model: str, X: np.ndarray) -> bytes:
    from service.open_inference.pb import inference_pb2 as pb

    request = pb.ModelInferRequest(model_name=model)
    request.inputs.add(name="features", datatype="FP64", shape=list(X.shape))
    request.raw_input_contents.append(np.ascontiguousarray(X, "<f8").tobytes())
    return frame(request.SerializeToString())


def _grpc_failures(base: str) -> float:
    """The server's count of ModelInfer calls that did not end OK (h2load sees HTTP statuses only)."""
    import httpx

    text = httpx.get(base + "/metrics").text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("lmve_grpc_requests_total{") and 'rpc="ModelInfer"' in line and 'code="OK"' not in line)


def measure_protocols(name: str, path: Path, centre: str, noop: str, noop_grpc: int, tmp: Path, args) -> list[dict]:
    """The bundle over the Open Inference Protocol's binary REST and gRPC (one worker, as the JSON rows): 1,024-row
    rows/s through each, each followed by its no-op on the same body (``benchmarks.noop_app``'s binary route,
    ``benchmarks.noop_grpc``: the load generators' ceilings), and the single-row gRPC rate over the JSON
    ``/predict-region`` rate, paired rounds."""
    X = np.load(CACHE / name / "rows.npz")["X"]
    model = path.name  # a --bundle's model is named after its directory
    files = {"one": tmp / f"{name}-one.json", "grpc-1": tmp / f"{name}-grpc-1.bin",
             "grpc-1024": tmp / f"{name}-grpc-1024.bin", "bin-1024": tmp / f"{name}-bin-1024.bin"}
    files["one"].write_text(json.dumps({"features": X[:1].tolist()}))
    files["grpc-1"].write_bytes(_grpc_body(model, X[:1]))
    files["grpc-1024"].write_bytes(_grpc_body(model, X[:1024]))
    binary, header = _binary_body(X[:1024])
    files["bin-1024"].write_bytes(binary)
    grpc_port = free_port()
    proc, base = serve_bundle(path, grpc_port=grpc_port)
    out = []
    try:
        h2load(grpc_port, files["grpc-1"], 1, 2)  # warm-up
        ratios = []
        for _ in range(args.rounds):
            g = h2load(grpc_port, files["grpc-1"], args.seconds, 8)
            r = wrk(base + "/predict-region", files["one"], args.seconds, 8)
            n = h2load(noop_grpc, files["grpc-1"], args.seconds, 8)
            if g["errors"] or r["errors"] or n["errors"]:
                raise RuntimeError(f"{name} single-row: gRPC {g['errors']}, REST {r['errors']}, no-op {n['errors']} errors")
            ratios.append((g["rps"], r["rps"], n["rps"]))
        out.append({"bundle": name, "centre": centre, "route": GRPC_ROUTE, "scenario": "grpc_single_over_rest",
                    "value": round(statistics.median(g / r for g, r, _ in ratios), 3),
                    "rounds": [round(g / r, 3) for g, r, _ in ratios], "rps": [round(g) for g, _, _ in ratios],
                    "rest_rps": [round(r) for _, r, _ in ratios], "noop": round(statistics.median(n for *_, n in ratios)),
                    "noop_what": "benchmarks.noop_grpc single-row calls/s (h2load's ceiling here)"})
        b, a = (wrk(server + f"/v2/models/{model}/infer", files["bin-1024"], args.latency_seconds, 2, header_length=header)
                for server in (base, noop))
        g, n = (h2load(port, files["grpc-1024"], args.latency_seconds, 2) for port in (grpc_port, noop_grpc))
        for row in (b, a, g, n):
            if row["errors"]:
                raise RuntimeError(f"{name} 1,024 rows: {row['errors']} errors")
        out.append({"bundle": name, "centre": centre, "route": "/v2/models/{name}/infer",
                    "scenario": "rows_per_s_1024_binary", "value": round(1024 * b["rps"]), "requests": b["requests"],
                    "noop": round(1024 * a["rps"])})
        out.append({"bundle": name, "centre": centre, "route": GRPC_ROUTE, "scenario": "rows_per_s_1024_grpc",
                    "value": round(1024 * g["rps"]), "requests": g["requests"], "noop": round(1024 * n["rps"])})
        failures = _grpc_failures(base)
        if failures:
            raise RuntimeError(f"{name}: {failures:g} gRPC calls did not end OK")
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    for row in out:
        print(f"{row['bundle']:<18} {row['route']:<24} {row['scenario']:<24} {row['value']}", flush=True)
    return out


def target_of(row: dict) -> tuple[float, str, int] | None:
    """``(target, sense, issue)`` of a result row, or ``None`` where no issue sets one. Issue 32: the ratios of
    the default bundle and each centre kind (the synthetic bundles), rows/s in 1,024-row requests of the
    default bundle. Issue 74, stricter where both apply: the default bundle's single-row ``/predict-region`` and
    ``/contains`` at 0.55, and the UJIIndoorLoc bundle's single-row ratio, 1,024-row rows/s and 256-row p99.
    Issue 113, stricter still: the default single row at 0.6, both UJIIndoorLoc bundles' binary and gRPC
    1,024-row rows/s at 40,000."""
    key = (row["bundle"], row["route"], row["scenario"])
    if row["scenario"] == "radio_over_off":  # the watch costs at most 5 % of single-row throughput
        return 0.95, "min", 129
    if row["scenario"] == "radio_adapting_p99_ms":  # an adaptation never blocks a request: the 256-row p99 budget
        return ISSUE_74.get((row["bundle"], "/predict-region", "p99_256_ms"), TARGETS["p99_256_ms"])[0], "max", 129
    if key in ISSUE_113:
        return (*ISSUE_113[key], 113)
    if key in ISSUE_98:
        return (*ISSUE_98[key], 98)
    if key in ISSUE_74:
        return (*ISSUE_74[key], 74)
    if row["scenario"] not in TARGETS:
        return None
    if row["bundle"].startswith("uji"):
        return None
    if row["scenario"] == "rows_per_s_1024" and row["bundle"] != "default":
        return None
    if row["route"].startswith("/nle/"):
        return NLE_TARGET, "min", 32
    return (*TARGETS[row["scenario"]], 32)


def write(rows: list[dict], line: str, args, stem: str = "serving") -> None:
    result = {"commit": commit(), "command": line, "date": utc_now(), "machine": machine(),
              "server": "lmve-serve, 1 uvicorn worker (gRPC on the same worker); baselines benchmarks.noop_app, 1 "
                        "uvicorn worker, and benchmarks.noop_grpc, 1 grpc.aio process",
              "client": "wrk -t1 (REST, JSON and binary), h2load -t1 (gRPC), same machine", "rows": rows}
    write_json(OUT / f"{stem}.json", result, indent=2)
    lines = ["## Serving speed against a bare FastAPI no-op", "",
             f"Command: `{line}` at commit `{result['commit']}`, {result['date']}, on this {os.cpu_count()}-core "
             f"machine (client and servers share the cores). {args.rounds} rounds of {args.seconds} s per ratio, "
             "alternating with the no-op (`wrk -t1 -c8`); p99 from one connection, rows/s from two "
             f"({args.latency_seconds} s each), each followed by the no-op on the same body (column no-op: what a "
             "server that only parses the rows reaches). Targets from issues 32, 74, 98 and 113 (the issue in brackets; the latest where several set one); "
             "the V2 `infer` row's from issue 39. The Open Inference Protocol's binary REST (`wrk`, the body's raw "
             "FP64 rows after a JSON header, outputs asked as binary) and gRPC (`ModelInfer`, `h2load -t1`, raw "
             "contents) rows are issue 98's: their no-op is `benchmarks.noop_app`'s binary route and "
             "`benchmarks.noop_grpc` on the same bodies, the load generators' ceilings; `grpc_single_over_rest` is "
             "single-row gRPC calls/s over JSON `/predict-region` requests/s on the same server, paired rounds "
             "(8 connections each), its no-op the gRPC no-op's single-row calls/s. `radio_over_off`: single-row requests/s "
             "with the radio watch counting, deciding and reporting (`LMVE_RADIO=watch`) over the same bundle served "
             "with `LMVE_RADIO=off`, paired rounds that alternate which server goes first, each server on core 0 and `wrk` on core 1 (issue 129; the json's "
             "`cpu_ratio`: server CPU time per request off over on, each run's flush included); `radio_adapt_over_off` the same with `adapt`, which "
             "also serves the adapted model (the body repeats one row: the watch decides most transmitters gone and "
             "the row then hears almost nothing, a different model at a different cost). "
             "`radio_adapting_p99_ms`: the p99 of 256-row requests from one connection whose rows lost half their "
             "transmitters, while the server decides and builds the adapted model (its watch reset before each "
             "round), the no-op column the same bundle served with `LMVE_RADIO=off`, measured just before (the adapt server idle); the slowest requests are in the json "
             "(`max_ms`), with the gone transmitters of the last decision and how long after the round it was "
             "served (`gone_followed`), and `over_off`, the p99 over the no-op column's; target the bundle's 256-row "
             "p99 budget.", "",
             "| bundle | centre | route | scenario | value | no-op | target | met |", "|---|---|---|---|---|---|---|---|"]
    for row in rows:
        goal = target_of(row)
        if goal is None:
            target = met = "-"
        else:
            target, sense, issue = goal
            ok = row["value"] >= target if sense == "min" else row["value"] < target
            target, met = f"{'>=' if sense == 'min' else '<'} {target:g} ({issue})", "yes" if ok else "**no**"
        noop = f"{row['noop']:g}" if "noop" in row else "-"
        lines.append(f"| {row['bundle']} | {row['centre']} | `{row['route']}` | {row['scenario']} | {row['value']:g} | "
                     f"{noop} | {target} | {met} |")
    write_text(OUT / f"{stem}.md", "\n".join(lines) + "\n")
    print("\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bundles", default=None,
                   help="comma-separated: default, synthetic-<centre> (" + ", ".join(CENTRES) + "), uji-knn, uji-fingerprint; "
                        "default: all (the uji ones when the data set is present)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=int, default=2, help="seconds of each wrk run in a paired round")
    p.add_argument("--latency-seconds", type=int, default=5, help="seconds of the 256- and 1,024-row runs")
    p.add_argument("--adapting-seconds", type=int, default=12, help="seconds of each radio_adapting_p99_ms run: "
                   "long enough that the adapted model is decided and built (seconds, in a child process) inside it")
    p.add_argument("--radio-only", action="store_true", help="only the radio watch's scenarios (of the bundles "
                   f"{', '.join(RADIO_BUNDLES)}), written to serving_radio.{{json,md}} beside the full run's")
    args = p.parse_args(argv)
    for tool, package in (("wrk", "wrk"), ("h2load", "nghttp2-client")):
        if shutil.which(tool) is None:
            print(f"{tool} is not installed: apt-get install {package}", file=sys.stderr)
            return 2
    if args.bundles:
        names = args.bundles.split(",")
    else:
        from training.data.location import TrainingSettings

        names = ["default", *(f"synthetic-{c}" for c in CENTRES)]
        if TrainingSettings().data_dir is not None:
            names += ["uji-knn", "uji-fingerprint"]
    if args.radio_only:
        names = [n for n in (names if args.bundles else RADIO_BUNDLES) if n in RADIO_BUNDLES]
    CACHE.mkdir(parents=True, exist_ok=True)
    paths = {n: bundle(n) for n in names}
    if args.radio_only:
        tmp = Path(tempfile.mkdtemp(prefix="lmve-serving-"))
        try:
            rows = [row for n, (path, centre) in paths.items() for row in
                    measure_radio(n, path, centre, tmp, args) + measure_radio_adapting(n, path, centre, tmp, args)]
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        write(rows, command("serving", argv), args, stem="serving_radio")
        return 0
    tmp = Path(tempfile.mkdtemp(prefix="lmve-serving-"))
    noop_proc, noop = serve_noop()
    grpc_proc, noop_grpc = serve_noop_grpc()
    rows: list[dict] = []
    try:
        for n, (path, centre) in paths.items():
            rows += measure(n, path, centre, noop, tmp, args)
            if n == "default":  # the per-model routes, on a repository of three
                rows += measure(n, path, centre, noop, tmp, args, repository=True)
            if n in PROTOCOL_BUNDLES:
                rows += measure_protocols(n, path, centre, noop, noop_grpc, tmp, args)
            if n in RADIO_BUNDLES:
                rows += measure_radio(n, path, centre, tmp, args)
                rows += measure_radio_adapting(n, path, centre, tmp, args)
    finally:
        for proc in (noop_proc, grpc_proc):
            proc.terminate()
            proc.wait(timeout=30)
        shutil.rmtree(tmp, ignore_errors=True)
    write(rows, command("serving", argv), args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
