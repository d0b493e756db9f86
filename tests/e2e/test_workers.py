"""Several workers, one state: the real ``lmve-serve --workers 2`` on loopback.

Feedback taken by either worker lands in the one SQLite state and in the counters any worker
exports; a restart keeps it; ``/admin/recalibrate`` and ``/admin/reload`` taken by one worker
reach every worker within seconds, with no failed request under load.
"""

from __future__ import annotations

import shutil
import threading
import time

import httpx
import numpy as np
import pytest

from tests.service.conftest import features
from tests.processes import stop
from tests.e2e.servers import H, SYNC, by_worker, fresh_get, free_port, start_server, wait_ready, wait_workers

def counter(text: str, name: str, method: str = "lmve") -> float:
    for line in text.splitlines():
        if line.startswith(f'{name}{{method="{method}",model="bundle"}}'):
            return float(line.split()[-1])
    return 0.0


@pytest.fixture(scope="module")
def cluster(bundle_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("workers")
    served = root / "served" / "bundle"
    shutil.copytree(bundle_dir, served)
    env = {"LMVE_STATE_DB": str(root / "state" / "lmve.sqlite"), "LMVE_SYNC_INTERVAL_S": SYNC, "LMVE_WORKERS": "2"}
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    procs = []

    def start():
        proc = start_server(served, port, root / f"server{len(procs)}.log", **env)
        procs.append(proc)
        wait_ready(base, proc)
        wait_workers(base, proc)
        return proc

    start()
    try:
        yield base, served, start, procs
    finally:
        for p in procs:
            stop(p)


@pytest.mark.slow
def test_feedback_to_both_workers_lands_in_one_state_and_survives_a_restart(cluster, test_rows):
    base, _, start, procs = cluster
    X, Y = test_rows
    pids, sent = set(), 0
    for i in range(200):
        rows = slice(3 * (i % 20), 3 * (i % 20) + 3)
        with httpx.Client(timeout=10.0) as c:
            r = c.post(f"{base}/feedback", json={"features": features(X[rows]), "points": Y[rows].tolist()},
                       headers=H)
        assert r.status_code == 200, r.text
        pids.add(r.json()["worker_pid"])
        sent += 3
        if len(pids) == 2 and i >= 10:
            break
    assert len(pids) == 2, "the kernel gave every connection to one worker"
    # every worker exports the host totals and the same window
    for _ in range(6):
        assert counter(fresh_get(base, "/metrics").text, "lmve_feedback_rows_total") == sent
    rows = by_worker(base, "/model", lambda b: b["feedback"]["methods"]["lmve"]["rows"])
    assert len(rows) == 2 and set(rows.values()) == {min(sent, 500)}
    stop(procs[-1])
    start()
    assert counter(fresh_get(base, "/metrics").text, "lmve_feedback_rows_total") == sent


@pytest.mark.slow
def test_queries_to_both_workers_step_one_shift_test(cluster, test_rows):
    """Region requests answered by either worker feed one shift test in the shared state: within a few sync
    intervals both workers report every query, and the same evidence."""
    base, _, _, _ = cluster
    X, _ = test_rows
    time.sleep(3 * float(SYNC))
    before = fresh_get(base, "/model").json()["shift"]["queries"]
    sent = 0
    for i in range(100):  # each on a new connection: the kernel deals them to both workers
        with httpx.Client(timeout=10.0) as c:
            r = c.post(f"{base}/predict-region", json={"features": features(X[2 * (i % 30):2 * (i % 30) + 2])},
                       headers=H)
        assert r.status_code == 200 and all(0.0 < g["typicality"] <= 1.0 for g in r.json()["regions"]), r.text
        sent += 2
    time.sleep(4 * float(SYNC))  # every worker's pending queries flushed
    reports = by_worker(base, "/model", lambda b: (b["shift"]["queries"], b["shift"]["evidence"]))
    assert len(reports) == 2 and len(set(reports.values())) == 1, reports
    assert next(iter(reports.values()))[0] == before + sent


@pytest.mark.slow
def test_recalibrate_under_load_reaches_every_worker_and_a_bad_body_changes_nothing(cluster, test_rows):
    base, served, _, _ = cluster
    X, Y = test_rows
    old = fresh_get(base, "/model").json()["version"]
    statuses, versions, stop_load = [], set(), threading.Event()

    def load():
        while not stop_load.is_set():
            with httpx.Client(timeout=10.0) as c:
                r = c.post(f"{base}/predict-region", json={"features": features(X[:4])}, headers=H)
            statuses.append(r.status_code)
            if r.status_code == 200:
                versions.add(r.json()["bundle_id"])

    threads = [threading.Thread(target=load) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        time.sleep(0.5)
        r = httpx.post(f"{base}/admin/recalibrate", json={"features": features(X[:50]), "points": Y[:50].tolist()},
                       headers=H, timeout=30.0)
        assert r.status_code == 200, r.text
        new = r.json()["version"]
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline:
            seen = by_worker(base, "/model", lambda b: b["version"], tries=40)
            if len(seen) == 2 and set(seen.values()) == {new}:
                break
            time.sleep(0.2)
        assert len(seen) == 2 and set(seen.values()) == {new}, seen
        time.sleep(0.5)
    finally:
        stop_load.set()
        for t in threads:
            t.join()
    assert statuses and set(statuses) == {200}, sorted(set(statuses))
    assert {old, new} <= versions
    # a bad body: refused, and every worker keeps serving the new bundle
    bad = httpx.post(f"{base}/admin/recalibrate", json={"features": features(X[:3]), "points": Y[:3].tolist()},
                     headers=H, timeout=30.0)
    assert bad.status_code == 422 and bad.json()["errors"][0]["field"] == "features"
    time.sleep(3 * float(SYNC))
    assert set(by_worker(base, "/model", lambda b: b["version"]).values()) == {new}
    # reload of the original bundle reaches every worker too
    r = httpx.post(f"{base}/admin/reload", json={"bundle": str(served)}, headers=H, timeout=30.0)
    assert r.status_code == 200 and r.json()["version"] == old
    time.sleep(3 * float(SYNC))
    assert set(by_worker(base, "/model", lambda b: b["version"]).values()) == {old}
    ok = np.mean([fresh_get(base, "/readyz").status_code == 200 for _ in range(4)])
    assert ok == 1.0
