"""What one single-row call costs the server, over gRPC and over JSON REST: where gRPC's time goes.

    python -m benchmarks.grpc_cost [--bundle default] [--seconds 4] [--rounds 2]

Each server runs alone under a fixed load (``h2load -t1`` for gRPC, ``wrk -t1`` for REST, single-row bodies),
and the server process's own CPU time (user + system, every thread, from ``/proc``) over the run is divided by
the calls it answered: a cost that the load generator's own CPU, on the same two cores, does not enter. Servers:

- ``lmve-serve`` on the bundle (``benchmarks.serving``'s, cached there), gRPC ``ModelInfer`` and JSON
  ``/predict-region``, 8 connections;
- the bare no-ops of ``benchmarks.serving`` (``benchmarks.noop_grpc``, ``benchmarks.noop_app``), 8 connections
  and 1 (with one connection a call never shares its wake-ups with another);

and in-process, on the same bundle: ``RegionModel.predict_region`` alone and the gRPC servicer's whole
``ModelInfer`` (decode, the data plane, encode; the guards and metrics) awaited in a loop, no socket.

The difference between a server's cost a call and its in-process work is what its transport costs per call.
Writes ``benchmarks/results/grpc_cost.{md,json}``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.common import RESULTS, command, commit, machine, utc_now, write_json, write_text
from benchmarks.load.grpc_load import h2load
from benchmarks.load.run_load import wrk
from benchmarks.serving import CACHE, _grpc_body, bundle, serve_bundle, serve_noop, serve_noop_grpc


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (all its threads) so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _loaded(pid: int, load) -> dict:
    """Run ``load()`` (an h2load or wrk summary) and charge the server ``pid`` its CPU a call."""
    before, start = _cpu_seconds(pid), time.perf_counter()
    out = load()
    cpu, wall = _cpu_seconds(pid) - before, time.perf_counter() - start
    return {"calls_per_s": out["rps"], "server_cpu_us_per_call": 1e6 * cpu / max(1, out["requests"]),
            "server_cores": cpu / wall, "errors": out["errors"]}


def _in_process(path: Path, X: np.ndarray, loops: int = 3000) -> dict:
    """Microseconds a call of ``predict_region`` and of the gRPC servicer's ``ModelInfer``, in a loop."""
    from service.app import create_app
    from service.grpc_endpoint import InferenceServicer
    from service.open_inference.pb import inference_pb2 as pb
    from service.settings import ServiceSettings

    app = create_app(ServiceSettings(bundle=path))

    class Context:  # what the servicer reads of a call: no metadata (no API key set), abort raises
        def invocation_metadata(self):
            return ()

        async def abort(self, code, message):
            raise RuntimeError(f"{code}: {message}")

    async def run() -> dict:
        async with app.router.lifespan_context(app):
            plane = app.state.plane
            servicer = InferenceServicer(plane, api_key=None, seconds=60)
            request = pb.ModelInferRequest(model_name=path.name)
            request.inputs.add(name="features", datatype="FP64", shape=list(X.shape))
            request.raw_input_contents.append(np.ascontiguousarray(X, "<f8").tobytes())
            model, context, out = plane.store(None).current.model, Context(), {}
            for label, once in (("predict_region", lambda: model.predict_region(X, kind="ellipsoid")),
                                ("ModelInfer handler", None)):
                best = float("inf")
                for _ in range(3):
                    start = time.perf_counter()
                    for _ in range(loops):
                        if once is None:
                            await servicer.ModelInfer(request, context)
                        else:
                            once()
                    best = min(best, (time.perf_counter() - start) / loops)
                out[label] = 1e6 * best
            return out

    return asyncio.run(run())


def measure(name: str, seconds: int, rounds: int) -> list[dict]:
    path, _ = bundle(name)
    X = np.load(CACHE / name / "rows.npz")["X"][:1]
    tmp = Path(tempfile.mkdtemp(prefix="lmve-grpc-cost-"))
    grpc_body, rest_body = tmp / "one.bin", tmp / "one.json"
    grpc_body.write_bytes(_grpc_body(path.name, X))
    rest_body.write_text(json.dumps({"features": X.tolist()}))
    from benchmarks.load.run_load import free_port

    rows = []
    port = free_port()
    proc, base = serve_bundle(path, grpc_port=port)
    noop_proc, noop = serve_noop()
    grpc_proc, noop_port = serve_noop_grpc()
    try:
        runs = {("lmve-serve", "gRPC ModelInfer", 8): (proc.pid, lambda: h2load(port, grpc_body, seconds, 8)),
                ("lmve-serve", "JSON /predict-region", 8):
                    (proc.pid, lambda: wrk(base + "/predict-region", rest_body, seconds, 8)),
                ("gRPC no-op", "ModelInfer", 8): (grpc_proc.pid, lambda: h2load(noop_port, grpc_body, seconds, 8)),
                ("gRPC no-op", "ModelInfer", 1): (grpc_proc.pid, lambda: h2load(noop_port, grpc_body, seconds, 1)),
                ("REST no-op", "/predict-region", 8):
                    (noop_proc.pid, lambda: wrk(noop + "/predict-region", rest_body, seconds, 8)),
                ("REST no-op", "/predict-region", 1):
                    (noop_proc.pid, lambda: wrk(noop + "/predict-region", rest_body, seconds, 1))}
        h2load(port, grpc_body, 1, 2), wrk(base + "/predict-region", rest_body, 1, 2)  # warm-up
        for r in range(rounds):
            for (server, route, connections), (pid, load) in runs.items():
                rows.append({"bundle": name, "server": server, "route": route, "connections": connections,
                             "round": r, **_loaded(pid, load)})
                print(rows[-1], flush=True)
    finally:
        for p in (proc, noop_proc, grpc_proc):
            p.terminate()
            p.wait(timeout=30)
    for label, us in _in_process(path, X).items():
        rows.append({"bundle": name, "server": "in process", "route": label, "connections": 0, "round": 0,
                     "us_per_call": us})
    return rows


def _markdown(result: dict) -> str:
    lines = ["# One single-row call's cost to the server, gRPC against JSON REST", "",
             f"`{result['command']}` at {result['commit']} ({result['date']}; {result['machine']['cores']} cores). "
             "The server process's CPU time (every thread) over a loaded run, divided by the calls it answered; "
             "the best of the rounds. In process: a loop of the call, no socket.", "",
             "| server | route | connections | calls/s | server CPU a call (us) | server cores |",
             "|---|---|---:|---:|---:|---:|"]
    best: dict[tuple, dict] = {}
    for row in result["rows"]:
        key = (row["server"], row["route"], row["connections"])
        if row["server"] == "in process":
            best[key] = row
        elif key not in best or row["server_cpu_us_per_call"] < best[key]["server_cpu_us_per_call"]:
            best[key] = row
    for (server, route, connections), row in best.items():
        if server == "in process":
            lines.append(f"| in process | {route} | - | - | {row['us_per_call']:.0f} | - |")
        else:
            lines.append(f"| {server} | {route} | {connections} | {row['calls_per_s']:,.0f} | "
                         f"{row['server_cpu_us_per_call']:.0f} | {row['server_cores']:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bundle", default="default", help="a bundle of benchmarks.serving")
    p.add_argument("--seconds", type=int, default=4, help="seconds of each loaded run")
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args(argv)
    result = {"commit": commit(), "command": command("grpc_cost", argv), "date": utc_now(), "machine": machine(),
              "rows": measure(args.bundle, args.seconds, args.rounds)}
    write_json(RESULTS / "grpc_cost.json", result, indent=1)
    write_text(RESULTS / "grpc_cost.md", _markdown(result))
    print(_markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
