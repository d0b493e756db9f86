"""Load test of the real service with wrk, on loopback.

    .venv/bin/python benchmarks/load/run_load.py [--duration 20] [--rounds 5] [--hold 60]

Starts ``lmve-serve`` (one worker, the synthetic bundle, ``LMVE_ENABLE_NOOP=1``) on a free
loopback port and runs, in one process and one run:

* ``noop``: ``POST /noop`` (reads the body, answers fixed JSON): the framework's ceiling;
* ``predict_1``, ``predict_256``, ``contains_1``, ``contains_256``: 1- and 256-row requests,
  taking turns with ``noop`` in ``--rounds`` rounds (ratios to ``noop`` are paired per round);
* ``predict_256_latency``, ``contains_256_latency``: 256-row requests from one connection;
* ``hold_contains_1_reload``: ``--hold`` seconds at a fixed offered rate (about half the
  measured single-row capacity) with a verified bundle reload (``POST /admin/reload``) in the
  middle: every request must succeed.

Writes ``benchmarks/results/load.json``: a list of scenarios with ``name``, ``rps``, ``p50_ms``,
``p99_ms``, ``errors``, ``requests`` and the run's metadata. Needs ``wrk`` (Debian package).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
LUA = Path(__file__).with_name("wrk_post.lua")
KEY = "load-test-key"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ensure_bundle(path: Path) -> Path:
    if not (path / "bundle" / "manifest.json").is_file():
        subprocess.run([str(Path(sys.executable).parent / "lmve-train"), "--dataset", "synthetic", "--out", str(path),
                        "--quiet"], check=True)
    return path / "bundle"


def wrk(url: str, body: Path, duration: int, connections: int, delay_ms: int = 0) -> dict:
    env = {**os.environ, "WRK_BODY": str(body), "WRK_API_KEY": KEY, "WRK_DELAY_MS": str(delay_ms)}
    out = subprocess.run(["wrk", "-t1", f"-c{connections}", f"-d{duration}s", "--latency", "-s", str(LUA), url],
                         capture_output=True, text=True, env=env, timeout=duration + 60)
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("WRKJSON ")), None)
    if line is None:
        raise RuntimeError(f"wrk printed no summary:\n{out.stdout}\n{out.stderr}")
    r = json.loads(line[len("WRKJSON "):])
    return {"rps": r["requests"] / (r["duration_us"] / 1e6), "p50_ms": r["p50_us"] / 1000,
            "p99_ms": r["p99_us"] / 1000, "errors": r["non2xx"] + r["socket_errors"], "requests": r["requests"]}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--duration", type=int, default=20, help="seconds per throughput scenario (over all rounds)")
    p.add_argument("--rounds", type=int, default=5, help="the throughput scenarios take turns in this many rounds")
    p.add_argument("--connections", type=int, default=8)
    p.add_argument("--hold", type=int, default=60, help="seconds of the fixed-rate scenario with a reload")
    p.add_argument("--bundle-dir", type=Path, default=ROOT / "artifacts" / "synthetic")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "load.json")
    args = p.parse_args(argv)
    if shutil.which("wrk") is None:
        print("wrk is not installed: apt-get install wrk", file=sys.stderr)
        return 2
    bundle = ensure_bundle(args.bundle_dir)
    manifest = json.loads((bundle / "manifest.json").read_text())
    from training.synthetic import make_localization

    X, Y, *_ = make_localization(256, seed=7, n_beacons=manifest["d"])
    tmp = Path(tempfile.mkdtemp(prefix="lmve-load-"))
    bodies = {
        "noop": {"features": X[:1].tolist()},
        "predict_1": {"features": X[:1].tolist()},
        "predict_256": {"features": X.tolist()},
        "contains_1": {"features": X[:1].tolist(), "points": Y[:1].tolist()},
        "contains_256": {"features": X.tolist(), "points": Y.tolist()},
    }
    for name, body in bodies.items():
        (tmp / f"{name}.json").write_text(json.dumps(body))
    routes = {"noop": "/noop", "predict_1": "/predict-region", "predict_256": "/predict-region",
              "contains_1": "/contains", "contains_256": "/contains"}

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {**os.environ, "LMVE_ENABLE_NOOP": "1", "LMVE_API_KEY": KEY, "LMVE_LOG_LEVEL": "warning"}
    server = subprocess.Popen([str(Path(sys.executable).parent / "lmve-serve"), "--bundle", str(bundle), "--port",
                               str(port), "--log-level", "warning"], env=env)
    scenarios = []
    try:
        for _ in range(300):
            try:
                if httpx.get(f"{base}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        else:
            raise RuntimeError("server did not become ready")
        # warm-up
        wrk(base + "/predict-region", tmp / "predict_1.json", 2, 2)
        # the scenarios take turns in --rounds short rounds, so that a burst of load from another
        # tenant of this shared machine hits all of them alike; each ratio to noop is taken within
        # a round (paired), and the summary reports the median of those paired ratios
        rounds = {name: [] for name in routes}
        per_round = max(2, args.duration // args.rounds)
        for _ in range(args.rounds):
            for name, route in routes.items():
                rounds[name].append(wrk(base + route, tmp / f"{name}.json", per_round, args.connections))
        for name, rs in rounds.items():
            r = {"rps": sum(x["requests"] for x in rs) / (per_round * len(rs)),
                 "p50_ms": sorted(x["p50_ms"] for x in rs)[len(rs) // 2], "p99_ms": max(x["p99_ms"] for x in rs),
                 "errors": sum(x["errors"] for x in rs), "requests": sum(x["requests"] for x in rs)}
            scenarios.append({"name": name, **r, "connections": args.connections, "rounds": len(rs),
                              "round_rps": [round(x["rps"], 1) for x in rs]})
            print(f"{name:<14} {r['rps']:8.0f} req/s  p50 {r['p50_ms']:6.2f} ms  p99 {r['p99_ms']:7.2f} ms  "
                  f"errors {r['errors']}")

        # latency of 256-row requests from one client stream (no queueing behind other requests)
        for name in ("predict_256", "contains_256"):
            r = wrk(base + routes[name], tmp / f"{name}.json", args.duration, 1)
            scenarios.append({"name": f"{name}_latency", **r, "connections": 1})
            print(f"{name + '_latency':<14} {r['rps']:8.0f} req/s  p50 {r['p50_ms']:6.2f} ms  "
                  f"p99 {r['p99_ms']:7.2f} ms  errors {r['errors']}")

        single = next(s for s in scenarios if s["name"] == "contains_1")
        target = 0.5 * single["rps"]
        conns = 4
        delay_ms = max(1, int(1000 * conns / target - single["p50_ms"]))
        reload_result = {}

        def do_reload():
            time.sleep(args.hold / 2)
            r = httpx.post(f"{base}/admin/reload", headers={"X-API-Key": KEY}, timeout=60)
            reload_result.update(status=r.status_code, body=r.json())

        t = threading.Thread(target=do_reload)
        t.start()
        r = wrk(base + "/contains", tmp / "contains_1.json", args.hold, conns, delay_ms)
        t.join()
        scenarios.append({"name": "hold_contains_1_reload", **r, "connections": conns, "offered_rps_target": round(target, 1),
                          "reload_status": reload_result.get("status")})
        print(f"hold+reload    {r['rps']:8.0f} req/s  p99 {r['p99_ms']:7.2f} ms  errors {r['errors']}  "
              f"reload -> {reload_result.get('status')}")
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)
        shutil.rmtree(tmp, ignore_errors=True)

    by = {s["name"]: s for s in scenarios}

    def paired(name):
        ratios = sorted(a["rps"] / b["rps"] for a, b in zip(rounds[name], rounds["noop"]))
        return ratios[len(ratios) // 2]

    summary = {
        "predict_1_over_noop": paired("predict_1"),
        "contains_1_over_noop": paired("contains_1"),
        "predict_1_over_noop_per_round": [round(a["rps"] / b["rps"], 3) for a, b in zip(rounds["predict_1"],
                                                                                          rounds["noop"])],
        "predict_256_p99_ms_1_connection": by["predict_256_latency"]["p99_ms"],
        "predict_256_p99_ms_8_connections": by["predict_256"]["p99_ms"],
        "hold_errors": by["hold_contains_1_reload"]["errors"],
    }
    cpu = ""
    if Path("/proc/cpuinfo").is_file():
        m = re.search(r"model name\s*:\s*(.+)", Path("/proc/cpuinfo").read_text())
        cpu = m.group(1) if m else ""
    result = {"command": "python benchmarks/load/run_load.py " + " ".join(argv if argv is not None else sys.argv[1:]),
              "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "machine": {"cores": os.cpu_count(), "cpu": cpu, "python": platform.python_version()},
              "server": "lmve-serve, 1 uvicorn worker, LMVE_COMPUTE_THREADS=1, synthetic bundle (d=%d)" % manifest["d"],
              "client": f"wrk -t1 -c{args.connections} (same machine)", "summary": summary, "scenarios": scenarios}
    return write_result(args.out, result)


def write_result(path: Path, result: dict) -> int:
    """Write ``result`` as JSON to ``path`` and print its summary."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2))
    print(json.dumps(result["summary"], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
