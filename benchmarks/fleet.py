"""A fleet under faults: three ``lmve-serve`` processes on one PostgreSQL state behind nginx, on loopback.

    python -m benchmarks.fleet [--seconds 60] [--rate 200] [--feedback-rate 10]
                               [--recalibrate-at 20] [--db-down-at 35] [--db-down-for 3]

The compose ``scaled`` profile run as real processes: a throwaway PostgreSQL cluster (Debian's server,
``tests/postgres.py``), three replicas of the ``default`` bundle of ``benchmarks.serving`` (trained once,
cached) with ``LMVE_STATE_URL`` on it and one shared recalibration store, and nginx with
``deploy/nginx/lmve.conf`` in front. An open-loop client (asyncio, httpx) offers a fixed rate through nginx for
``--seconds``: single-row ``POST /predict-region`` and ``POST /contains`` alternating (``--rate`` requests/s in
all), and 4-row ``POST /feedback`` (``--feedback-rate`` requests/s). Each request is sent at its scheduled time
and its latency counted from that time, so a stall shows as latency, not as fewer requests. In the middle:
``POST /admin/recalibrate`` (200 labelled rows) through nginx at ``--recalibrate-at`` s, then PostgreSQL stopped
(``pg_ctl stop -m fast``) at ``--db-down-at`` s and started again ``--db-down-for`` s later.

Measured: requests and answers by route and kind (HTTP status, or the transport error's class), p50 and p99 per
route over the run and in the outage, how long until every replica served the recalibration (polling each
directly), and feedback rows sent, answered 200, refused (503) and counted (the fleet's
``lmve_feedback_rows_total`` before and after, from one replica: every replica exports the shared totals).

Writes ``benchmarks/results/fleet.{json,md}`` and ``fleet.png`` (per-second region p99 and feedback answers
with the two events marked), with the command, the commit and the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

import httpx
import numpy as np

from benchmarks.common import RESULTS as OUT
from benchmarks.common import ROOT, command, commit, write_json, write_text
from benchmarks.load.run_load import KEY, free_port
from benchmarks.serving import bundle as cached_bundle

H = {"X-API-Key": KEY}
REGION = ("/predict-region", "/contains")


# ---------------------------------------------------------------------------------------------- the topology
def start_replica(served: Path, port: int, env: dict, log: Path) -> subprocess.Popen:
    full = {**os.environ, "LMVE_API_KEY": KEY, **env}
    full.pop("LMVE_BUNDLE", None), full.pop("LMVE_MODEL_REPOSITORY", None)
    return subprocess.Popen([str(Path(sys.executable).parent / "lmve-serve"), "--bundle", str(served), "--host",
                             "127.0.0.1", "--port", str(port), "--log-level", "warning"], env=full,
                            stdout=open(log, "wb"), stderr=subprocess.STDOUT)


def start_nginx(ports: list[int], root: Path) -> tuple[subprocess.Popen, int]:
    """nginx with the compose proxy config, its upstream pointed at ``ports``; its process and port."""
    conf = (ROOT / "deploy/nginx/lmve.conf").read_text()
    servers = "\n".join(f"    server 127.0.0.1:{p} max_fails=2 fail_timeout=5s;" for p in ports)
    conf = re.sub(r"^\s*server api-pool:8000[^;]*;", servers, conf, flags=re.M)
    port = free_port()
    (root / "site.conf").write_text(conf.replace("listen 8080;", f"listen 127.0.0.1:{port};"))
    (root / "nginx.conf").write_text(
        f"daemon off; pid {root}/nginx.pid; error_log {root}/nginx.err warn; worker_processes 1;\n"
        f"events {{ worker_connections 1024; }}\n"
        f"http {{ access_log off; client_body_temp_path {root}/cb; proxy_temp_path {root}/pt;\n"
        f"  fastcgi_temp_path {root}/ft; uwsgi_temp_path {root}/ut; scgi_temp_path {root}/st;\n"
        f"  include {root}/site.conf; }}\n")
    return subprocess.Popen(["nginx", "-c", str(root / "nginx.conf"), "-p", str(root)]), port


def wait_ready(base: str, proc: subprocess.Popen, seconds: float = 120.0) -> None:
    from tests.e2e.servers import wait_alive

    wait_alive(base, proc, seconds, path="/readyz")


def feedback_rows_total(base: str) -> float:
    text = httpx.get(f"{base}/metrics", headers=H, timeout=10.0).text
    m = re.search(r'^lmve_feedback_rows_total\{method="lmve",model="site"\} (\S+)', text, flags=re.M)
    return float(m.group(1)) if m else 0.0


# ---------------------------------------------------------------------------------------------- the load
class Record:
    """One request: when it was due (s from the start), its route, its answer's kind, its latency (s)."""

    __slots__ = ("due", "route", "kind", "latency", "rows")

    def __init__(self, due, route, kind, latency, rows=0):
        self.due, self.route, self.kind, self.latency, self.rows = due, route, kind, latency, rows


async def offer(base: str, rows: dict, args, events) -> list[Record]:
    """The open-loop schedule through nginx; ``events(t, client)`` runs the mid-run actions."""
    records: list[Record] = []
    X, Y = rows["X"], rows["Y"]
    limits = httpx.Limits(max_connections=256, max_keepalive_connections=64)
    async with httpx.AsyncClient(base_url=base, headers=H, timeout=30.0, limits=limits) as client:
        t0 = time.monotonic()

        async def send(due: float, route: str, body: dict, n: int) -> None:
            try:
                r = await client.post(route, json=body)
                kind = str(r.status_code)
            except httpx.HTTPError as exc:
                kind = type(exc).__name__
            records.append(Record(due, route, kind, time.monotonic() - t0 - due, n))

        schedule = []
        for k in range(int(args.seconds * args.rate)):
            i = k % len(X)
            body = {"features": [X[i].tolist()]} if k % 2 == 0 else {"features": [X[i].tolist()], "points": [Y[i].tolist()]}
            schedule.append((k / args.rate, REGION[k % 2], body, 0))
        for k in range(int(args.seconds * args.feedback_rate)):
            i = (4 * k) % (len(X) - 4)
            schedule.append((k / args.feedback_rate + 0.5 / args.feedback_rate, "/feedback",
                             {"features": X[i:i + 4].tolist(), "points": Y[i:i + 4].tolist()}, 4))
        schedule.sort(key=lambda s: s[0])
        tasks = [asyncio.create_task(events(t0))]
        for due, route, body, n in schedule:
            delay = t0 + due - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(send(due, route, body, n)))
        await asyncio.gather(*tasks)
    return records


# ---------------------------------------------------------------------------------------------- the run
def run(args) -> dict:
    from tests.postgres import Cluster

    bundle, _ = cached_bundle("default")
    rows = np.load(bundle.parent / "rows.npz")
    root = Path(tempfile.mkdtemp(prefix="lmve-fleet-", dir="/tmp"))
    root.chmod(0o755)  # nginx's workers (nobody, under root) buffer larger bodies in a directory under it
    served = root / "bundles" / "site"
    shutil.copytree(bundle, served)
    cluster = Cluster().start()
    procs: list[subprocess.Popen] = []
    try:
        url = cluster.create_database()
        env = {"LMVE_STATE_URL": url, "LMVE_RECALIBRATED_DIR": str(root / "store"), "LMVE_LOG_LEVEL": "warning",
               "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
        ports = [free_port() for _ in range(3)]
        for i, port in enumerate(ports):
            procs.append(start_replica(served, port, env, root / f"replica{i}.log"))
        for port, proc in zip(ports, procs):
            wait_ready(f"http://127.0.0.1:{port}", proc)
        nginx, proxy = start_nginx(ports, root)
        procs.append(nginx)
        base = f"http://127.0.0.1:{proxy}"
        wait_ready(base, nginx, 20.0)
        replicas = [f"http://127.0.0.1:{p}" for p in ports]
        before = feedback_rows_total(replicas[0])
        timeline: dict = {}

        async def events(t0: float) -> None:
            async with httpx.AsyncClient(headers=H, timeout=60.0) as c:
                await asyncio.sleep(max(0.0, t0 + args.recalibrate_at - time.monotonic()))
                k = slice(0, 200)
                t = time.monotonic()
                r = await c.post(f"{base}/admin/recalibrate", json={"features": rows["X"][k].tolist(),
                                                                    "points": rows["Y"][k].tolist()})
                timeline["recalibrate"] = {"at_s": round(t - t0, 2), "status": r.status_code,
                                           "took_s": round(time.monotonic() - t, 3)}
                if r.status_code == 200:
                    version, pending = r.json()["version"], set(replicas)
                    while pending and time.monotonic() - t < 30:
                        for rep in list(pending):
                            if (await c.get(f"{rep}/model")).json()["version"] == version:
                                pending.discard(rep)
                        await asyncio.sleep(0.02)
                    timeline["recalibrate"]["all_replicas_serve_after_s"] = (
                        None if pending else round(time.monotonic() - t, 3))
                await asyncio.sleep(max(0.0, t0 + args.db_down_at - time.monotonic()))
                t = time.monotonic()
                await asyncio.to_thread(cluster.stop, "fast")
                down = time.monotonic()
                await asyncio.sleep(args.db_down_for)
                await asyncio.to_thread(cluster.start)
                up = time.monotonic()
                states = []
                while time.monotonic() - up < 30:
                    states = [(await c.get(f"{rep}/readyz")).json()["state"]["status"] for rep in replicas]
                    if set(states) == {"ok"}:
                        break
                    await asyncio.sleep(0.05)
                timeline["database"] = {"stopped_at_s": round(down - t0, 2), "started_at_s": round(up - t0, 2),
                                        "stop_took_s": round(down - t, 2),
                                        "replicas_ok_after_start_s": round(time.monotonic() - up, 2)}

        print(f"offering {args.rate} region + {args.feedback_rate} feedback requests/s for {args.seconds} s "
              f"through {base} ...", flush=True)
        records = asyncio.run(offer(base, rows, args, events))
        time.sleep(1.0)
        after = [feedback_rows_total(rep) for rep in replicas]
        versions = [httpx.get(f"{rep}/model", headers=H, timeout=10).json()["version"] for rep in replicas]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
        cluster.destroy()
        if args.keep:
            print(f"kept the run's directory (replica logs, nginx's): {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    return summarise(records, timeline, before, after, versions, args)


def _ms(values) -> dict:
    if not values:
        return {"p50_ms": None, "p99_ms": None}
    return {"p50_ms": round(float(np.percentile(values, 50)) * 1e3, 2),
            "p99_ms": round(float(np.percentile(values, 99)) * 1e3, 2)}


def summarise(records: list[Record], timeline: dict, before: float, after: list[float], versions: list[str],
              args) -> dict:
    db = timeline.get("database", {})
    outage = (db.get("stopped_at_s", 0) - 0.5, db.get("started_at_s", 0) + db.get("replicas_ok_after_start_s", 0))
    routes = {}
    for route in (*REGION, "/feedback"):
        rs = [r for r in records if r.route == route]
        ok = [r.latency for r in rs if r.kind == "200"]
        routes[route] = {"requests": len(rs), "answers": dict(Counter(r.kind for r in rs)),
                         "errors": sum(r.kind != "200" for r in rs), **_ms(ok),
                         "outage": {"requests": sum(outage[0] <= r.due <= outage[1] for r in rs),
                                    **_ms([r.latency for r in rs if r.kind == "200"
                                           and outage[0] <= r.due <= outage[1]])}}
    fb = [r for r in records if r.route == "/feedback"]
    feedback = {"rows_sent": sum(r.rows for r in fb), "rows_answered_200": sum(r.rows for r in fb if r.kind == "200"),
                "rows_refused_503": sum(r.rows for r in fb if r.kind == "503"),
                "rows_counted": [a - before for a in after]}
    feedback["exact"] = all(c == feedback["rows_answered_200"] for c in feedback["rows_counted"])
    per_second = defaultdict(lambda: {"region": [], "feedback": Counter()})
    for r in records:
        sec = int(r.due)
        if r.route in REGION and r.kind == "200":
            per_second[sec]["region"].append(r.latency)
        if r.route in REGION and r.kind != "200":
            per_second[sec]["feedback"]["region error"] += 1
        if r.route == "/feedback":
            per_second[sec]["feedback"][r.kind] += 1
    seconds = [{"second": s, "region_p99_ms": _ms(v["region"])["p99_ms"], "answers": dict(v["feedback"])}
               for s, v in sorted(per_second.items())]
    return {"commit": commit(), "command": command("fleet"),
            "date": time.strftime("%Y-%m-%d"), "machine": f"{platform.machine()}, {os.cpu_count()} cores",
            "offered": {"seconds": args.seconds, "region_per_s": args.rate, "feedback_per_s": args.feedback_rate},
            "events": timeline, "routes": routes, "feedback": feedback, "replica_versions": versions,
            "per_second": seconds}


# ---------------------------------------------------------------------------------------------- the report
def write(result: dict) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    write_json(OUT / "fleet.json", result, indent=1)
    ev, fb, off = result["events"], result["feedback"], result["offered"]
    rec, db = ev.get("recalibrate", {}), ev.get("database", {})
    lines = [
        "# A fleet under faults: 3 replicas on one PostgreSQL behind nginx (issue 42)", "",
        f"`{result['command']}` at `{result['commit']}`, {result['date']}, {result['machine']} (the replicas, nginx, "
        "PostgreSQL and the client share them).", "",
        f"Offered through nginx, open loop: {off['region_per_s']} single-row region requests/s (`/predict-region` "
        f"and `/contains` alternating) and {off['feedback_per_s']} four-row `/feedback` requests/s for "
        f"{off['seconds']} s; latency counted from each request's scheduled time.", "",
        f"- recalibration through nginx at {rec.get('at_s')} s: {rec.get('status')} in {rec.get('took_s')} s; every "
        f"replica served it {rec.get('all_replicas_serve_after_s')} s after it was sent",
        f"- PostgreSQL stopped at {db.get('stopped_at_s')} s, started at {db.get('started_at_s')} s; every replica's "
        f"`/readyz` said the state was ok {db.get('replicas_ok_after_start_s')} s after the start",
        f"- at the end the three replicas serve {', '.join(v[:12] for v in result['replica_versions'])}", "",
        "| route | requests | answers by kind | errors | p50 ms | p99 ms | in the outage: requests | p99 ms |",
        "|---|---:|---|---:|---:|---:|---:|---:|"]
    for route, r in result["routes"].items():
        kinds = ", ".join(f"{k}: {v}" for k, v in sorted(r["answers"].items()))
        lines.append(f"| `{route}` | {r['requests']} | {kinds} | {r['errors']} | {r['p50_ms']} | {r['p99_ms']} | "
                     f"{r['outage']['requests']} | {r['outage']['p99_ms']} |")
    lines += ["", "Feedback rows: " + f"{fb['rows_sent']} sent, {fb['rows_answered_200']} answered 200, "
              f"{fb['rows_refused_503']} refused with 503 in the outage (`State unavailable`, Retry-After; nothing "
              f"recorded), counted by the fleet: {fb['rows_counted']} (one figure per replica): "
              + ("**exact**." if fb["exact"] else "**NOT exact**."), "",
              "The region routes must answer every request (0 errors); feedback in the outage is refused, never "
              "lost: counted equals answered 200. Per second (region p99, feedback answers, the events marked): "
              "`benchmarks/results/fleet.png`.", ""]
    write_text(OUT / "fleet.md", "\n".join(lines))
    plot(result)


def plot(result: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    secs = result["per_second"]
    fig, (a, b) = plt.subplots(2, 1, figsize=(9, 5), sharex=True)
    a.plot([s["second"] for s in secs], [s["region_p99_ms"] or np.nan for s in secs], marker=".")
    a.set_ylabel("region p99 (ms)")
    kinds = sorted({k for s in secs for k in s["answers"]})
    bottom = np.zeros(len(secs))
    for kind in kinds:
        v = np.array([s["answers"].get(kind, 0) for s in secs], float)
        b.bar([s["second"] for s in secs], v, bottom=bottom, label=kind, width=0.9)
        bottom += v
    b.set_ylabel("answers / s")
    b.set_xlabel("second of the run")
    b.legend(title="feedback (and region errors)", fontsize=8)
    ev = result["events"]
    for ax in (a, b):
        if "recalibrate" in ev:
            ax.axvline(ev["recalibrate"]["at_s"], color="tab:green", ls="--")
        if "database" in ev:
            ax.axvspan(ev["database"]["stopped_at_s"], ev["database"]["started_at_s"], color="tab:red", alpha=0.15)
    a.set_title("recalibration (green), PostgreSQL down (red)")
    fig.tight_layout()
    fig.savefig(OUT / "fleet.png", dpi=90)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--rate", type=float, default=200.0, help="region requests per second, in all")
    p.add_argument("--feedback-rate", type=float, default=10.0, help="feedback requests (4 rows) per second")
    p.add_argument("--recalibrate-at", type=float, default=20.0)
    p.add_argument("--db-down-at", type=float, default=35.0)
    p.add_argument("--db-down-for", type=float, default=3.0)
    p.add_argument("--keep", action="store_true", help="keep the run's directory (the replicas' and nginx's logs)")
    args = p.parse_args(argv)
    if shutil.which("nginx") is None:
        sys.exit("nginx is not installed (apt-get install nginx-light)")
    result = run(args)
    write(result)
    print((OUT / "fleet.md").read_text())


if __name__ == "__main__":
    main()
