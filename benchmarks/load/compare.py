"""Paired load comparison of two checkouts of lmve: single-row routes over the no-op route.

    python -m benchmarks.load.compare --before OLD_CHECKOUT --before-bundle OLD_BUNDLE \
        [--after-bundle artifacts/synthetic/bundle] [--rounds 12] [--seconds 3]

Starts ``lmve-serve`` from this checkout and from ``--before`` (with ``PYTHONPATH`` set to it),
each on a bundle its own code wrote from the same data, side by side on loopback, then runs wrk rounds that alternate between the two servers and between
``/noop``, ``/predict-region`` and ``/contains`` (one row each), so that a change in the shared
machine's speed hits both alike. Each round gives ``predict_1 / noop`` and ``contains_1 / noop``
per server; the result is the median over rounds and the paired difference (after - before).
Writes ``benchmarks/results/load_compare.json``. Needs ``wrk``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from benchmarks.common import RESULTS, ROOT, command, commit, utc_now
from benchmarks.load.run_load import KEY, free_port, wrk, write_result

ROW = [-62, -71.5, -80.2, -66, -90.1, -75.3, -58.9, -84, -77.7, -69.2, -92.4, -81.3, -73.8, -88.6, -64.1, -70]


def start(checkout: Path, bundle: Path, env_extra: dict) -> tuple[subprocess.Popen, str]:
    py = Path(sys.executable).parent
    env = {**os.environ, **env_extra, "LMVE_ENABLE_NOOP": "1", "LMVE_API_KEY": KEY, "LMVE_LOG_LEVEL": "warning"}
    port = free_port()
    proc = subprocess.Popen([str(py / "lmve-serve"), "--bundle", str(bundle), "--port", str(port),
                             "--log-level", "warning"], env=env, cwd=checkout)
    base = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            if httpx.get(f"{base}/readyz", timeout=1).status_code == 200:
                return proc, base
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"server from {checkout} did not become ready")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--before", type=Path, required=True, help="the other checkout (run with PYTHONPATH set to it)")
    p.add_argument("--before-bundle", type=Path, required=True, help="a bundle the other checkout wrote")
    p.add_argument("--after-bundle", type=Path, default=ROOT / "artifacts" / "synthetic" / "bundle")
    p.add_argument("--rounds", type=int, default=12)
    p.add_argument("--seconds", type=int, default=3, help="seconds per wrk run")
    p.add_argument("--connections", type=int, default=8)
    p.add_argument("--out", type=Path, default=RESULTS / "load_compare.json")
    args = p.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="lmve-compare-"))
    bodies = {"noop": {"features": [ROW]}, "predict": {"features": [ROW]},
              "contains": {"features": [ROW], "points": [[20.0, 10.0]]}}
    for name, body in bodies.items():
        (tmp / f"{name}.json").write_text(json.dumps(body))
    routes = {"noop": "/noop", "predict": "/predict-region", "contains": "/contains"}
    servers = {"after": start(ROOT, args.after_bundle, {}),
               "before": start(args.before, args.before_bundle, {"PYTHONPATH": str(args.before)})}
    ratios = {s: {"predict": [], "contains": []} for s in servers}
    try:
        for _, base in servers.values():
            wrk(base + "/predict-region", tmp / "predict.json", 2, 2)  # warm-up
        for r in range(args.rounds):
            order = list(servers) if r % 2 == 0 else list(reversed(servers))
            for s in order:
                base = servers[s][1]
                rps = {n: wrk(base + routes[n], tmp / f"{n}.json", args.seconds, args.connections)["rps"]
                       for n in routes}
                for n in ("predict", "contains"):
                    ratios[s][n].append(rps[n] / rps["noop"])
            print(f"round {r + 1}: " + "  ".join(f"{s} predict/noop {ratios[s]['predict'][-1]:.3f} contains/noop "
                                                 f"{ratios[s]['contains'][-1]:.3f}" for s in servers), flush=True)
    finally:
        for proc, _ in servers.values():
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
    summary = {}
    for n in ("predict", "contains"):
        diffs = [a - b for a, b in zip(ratios["after"][n], ratios["before"][n])]
        summary[n] = {"after_median": statistics.median(ratios["after"][n]),
                      "before_median": statistics.median(ratios["before"][n]),
                      "paired_difference_median": statistics.median(diffs),
                      "rounds_after_higher": sum(d > 0 for d in diffs), "rounds": len(diffs)}
    result = {"command": command("load.compare", argv), "commit": commit(), "date": utc_now(), "summary": summary,
              "ratios": ratios, "client": f"wrk -t1 -c{args.connections}, {args.seconds} s per run"}
    return write_result(args.out, result)


if __name__ == "__main__":
    sys.exit(main())
