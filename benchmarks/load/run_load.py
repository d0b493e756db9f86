"""A verified bundle reload under load, with wrk on loopback: no request may fail.

    python -m benchmarks.load.run_load [--hold 60]

Starts ``lmve-serve`` (one worker, the synthetic bundle) on a free loopback port, measures its single-row
``POST /contains`` capacity for a few seconds, then holds about half of it for ``--hold`` seconds from four
connections while ``POST /admin/reload`` swaps the bundle in the middle (``hold_contains_1_reload``). Steady
throughput and latency, the scenarios this script ran before, are ``benchmarks.serving``'s, against a bare
FastAPI no-op and for every bundle kind.

Writes ``benchmarks/results/load.json``: the scenarios with ``name``, ``rps``, ``p50_ms``, ``p99_ms``,
``errors``, ``requests`` and the run's metadata. Needs ``wrk`` (Debian package). ``KEY``, :func:`free_port`,
and :func:`wrk` serve ``benchmarks.serving`` and ``benchmarks.load.compare`` too.
"""

from __future__ import annotations

import argparse
import json
import os
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

from benchmarks.common import RESULTS, ROOT, command, commit, machine, utc_now, write_json

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


def wrk(url: str, body: Path, duration: int, connections: int, delay_ms: int = 0, header_length: int | None = None) -> dict:
    """``wrk -t1`` POSTing ``body`` to ``url`` (``header_length``: a V2 binary body, its JSON header's length)."""
    env = {**os.environ, "WRK_BODY": str(body), "WRK_API_KEY": KEY, "WRK_DELAY_MS": str(delay_ms)}
    if header_length is not None:
        env["WRK_HEADER_LENGTH"] = str(header_length)
    out = subprocess.run(["wrk", "-t1", f"-c{connections}", f"-d{duration}s", "--latency", "-s", str(LUA), url],
                         capture_output=True, text=True, env=env, timeout=duration + 60)
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("WRKJSON ")), None)
    if line is None:
        raise RuntimeError(f"wrk printed no summary:\n{out.stdout}\n{out.stderr}")
    r = json.loads(line[len("WRKJSON "):])
    return {"rps": r["requests"] / (r["duration_us"] / 1e6), "p50_ms": r["p50_us"] / 1000,
            "p99_ms": r["p99_us"] / 1000,
            "max_ms": r.get("max_us", 0) / 1000, "errors": r["non2xx"] + r["socket_errors"], "requests": r["requests"]}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--capacity-seconds", type=int, default=5, help="seconds of the single-row capacity run")
    p.add_argument("--hold", type=int, default=60, help="seconds at the fixed rate, the reload in the middle")
    p.add_argument("--bundle-dir", type=Path, default=ROOT / "artifacts" / "synthetic")
    p.add_argument("--out", type=Path, default=RESULTS / "load.json")
    args = p.parse_args(argv)
    if shutil.which("wrk") is None:
        print("wrk is not installed: apt-get install wrk", file=sys.stderr)
        return 2
    bundle = ensure_bundle(args.bundle_dir)
    manifest = json.loads((bundle / "manifest.json").read_text())
    from training.data.synthetic import make_localization

    X, Y, *_ = make_localization(1, seed=7, n_beacons=manifest["d"])
    tmp = Path(tempfile.mkdtemp(prefix="lmve-load-"))
    body = tmp / "contains_1.json"
    body.write_text(json.dumps({"features": X[:1].tolist(), "points": Y[:1].tolist()}))
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {**os.environ, "LMVE_API_KEY": KEY, "LMVE_LOG_LEVEL": "warning"}
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
        wrk(base + "/contains", body, 2, 2)  # warm-up
        single = wrk(base + "/contains", body, args.capacity_seconds, 8)
        scenarios.append({"name": "contains_1", **single, "connections": 8})
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
        r = wrk(base + "/contains", body, args.hold, conns, delay_ms)
        t.join()
        scenarios.append({"name": "hold_contains_1_reload", **r, "connections": conns,
                          "offered_rps_target": round(target, 1), "reload_status": reload_result.get("status")})
        print(f"hold+reload    {r['rps']:8.0f} req/s  p99 {r['p99_ms']:7.2f} ms  errors {r['errors']}  "
              f"reload -> {reload_result.get('status')}")
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)
        shutil.rmtree(tmp, ignore_errors=True)

    hold = scenarios[-1]
    summary = {"hold_requests": hold["requests"], "hold_errors": hold["errors"], "hold_p99_ms": hold["p99_ms"],
               "reload_status": hold["reload_status"]}
    result = {"command": command("load.run_load", argv), "commit": commit(), "date": utc_now(), "machine": machine(),
              "server": "lmve-serve, 1 uvicorn worker, LMVE_COMPUTE_THREADS=1, synthetic bundle (d=%d)" % manifest["d"],
              "client": "wrk -t1 (same machine)", "summary": summary, "scenarios": scenarios}
    return write_result(args.out, result)


def write_result(path: Path, result: dict) -> int:
    """Write ``result`` as JSON to ``path`` and print its summary."""
    write_json(path, result, indent=2)
    print(json.dumps(result["summary"], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
