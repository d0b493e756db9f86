"""A fleet on one state: three real ``lmve-serve`` processes on loopback share a SQLite file or a PostgreSQL
database (``LMVE_STATE_URL``), the same tests on both backends.

Feedback sent to the three processes lands in one exact count that each exports; one adaptive level per model;
a recalibration posted to one process is served by all three within 2 s (PostgreSQL: by LISTEN/NOTIFY, the
polling interval set to 30 s here; SQLite: by polling every 0.5 s); a restarted process keeps all of it.
"""

from __future__ import annotations

import shutil
import signal
import threading
import time

import httpx
import pytest

from tests.service.conftest import BACKENDS, features
from tests.service.test_e2e import KEY, free_port, start_server, wait_alive

H = {"X-API-Key": KEY}
POLL = {"sqlite": "0.5", "postgresql": "30"}


def counter(text: str, name: str, method: str = "lmve") -> float:
    for line in text.splitlines():
        if line.startswith(f'{name}{{method="{method}",model="site"}}'):
            return float(line.split()[-1])
    return 0.0


class Fleet:
    def __init__(self, served, root, env):
        self.served, self.root, self.env = served, root, env
        self.ports = [free_port() for _ in range(3)]
        self.procs: list = [None] * 3
        self.starts = 0

    def base(self, i: int) -> str:
        return f"http://127.0.0.1:{self.ports[i]}"

    def start(self, i: int) -> None:
        self.starts += 1
        self.procs[i] = start_server(self.served, self.ports[i], self.root / f"p{i}-{self.starts}.log", **self.env)
        wait_alive(self.base(i), self.procs[i], 90.0, path="/readyz")

    def stop(self, i: int) -> None:
        proc = self.procs[i]
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)

    def get(self, i: int, path: str) -> httpx.Response:
        return httpx.get(f"{self.base(i)}{path}", headers=H, timeout=10.0)

    def model(self, i: int) -> dict:
        return self.get(i, "/model").json()

    def until(self, check, seconds: float):
        """``check()`` until truthy, for at most ``seconds``; its last value and the time taken."""
        t0 = time.monotonic()
        while True:
            value = check()
            if value or time.monotonic() - t0 > seconds:
                return value, time.monotonic() - t0
            time.sleep(0.05)


@pytest.fixture(scope="module", params=BACKENDS)
def fleet(request, bundle_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp(f"fleet-{request.param}")
    served = root / "bundles" / "site"
    shutil.copytree(bundle_dir, served)
    url = (f"sqlite:///{root}/state.sqlite" if request.param == "sqlite"
           else request.getfixturevalue("pg_cluster").create_database())
    env = {"LMVE_STATE_URL": url, "LMVE_SYNC_INTERVAL_S": POLL[request.param], "LMVE_ADAPTIVE": "aci",
           "LMVE_ADAPTIVE_GAMMA": "0.05", "LMVE_RECALIBRATED_DIR": str(root / "store")}
    fleet = Fleet(served, root, env)
    try:
        for i in range(3):
            fleet.start(i)
        yield fleet
    finally:
        for i in range(3):
            fleet.stop(i)


def test_feedback_from_three_processes_lands_in_one_count_and_one_adaptive_level(fleet, test_rows):
    X, Y = test_rows
    sent, errors = [0, 0, 0], []

    def send(i):
        with httpx.Client(base_url=fleet.base(i), headers=H, timeout=30.0) as c:
            for b in range(15):
                start = 4 * ((b + 5 * i) % (len(X) // 4))
                rows = slice(start, start + 4)
                r = c.post("/feedback", json={"features": features(X[rows]), "points": Y[rows].tolist()})
                if r.status_code != 200:
                    errors.append(r.text)
                    return
                assert r.json()["worker_pid"] == fleet.procs[i].pid
                sent[i] += 4

    threads = [threading.Thread(target=send, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:2]
    total = sum(sent)
    assert total == 180
    ready = fleet.get(2, "/readyz").json()
    assert ready["status"] == "ready" and ready["state"]["status"] == "ok"
    assert ready["state"]["backend"].startswith(fleet.env["LMVE_STATE_URL"].split("://")[0])
    for i in range(3):  # every process exports the fleet's totals
        assert counter(fleet.get(i, "/metrics").text, "lmve_feedback_rows_total") == total
        assert fleet.model(i)["feedback"]["methods"]["lmve"]["rows"] == total

    def levels():
        got = {fleet.model(i)["feedback"]["methods"]["lmve"]["effective_coverage"] for i in range(3)}
        return got if len(got) == 1 else None

    level, seconds = fleet.until(levels, 2.0)
    assert level is not None, "the three processes serve different adaptive levels"
    assert level != {fleet.model(0)["coverage"]}  # 180 rows moved it off the bundle's level


def test_a_recalibration_posted_to_one_process_is_served_by_all_three_within_2s(fleet, test_rows):
    X, Y = test_rows
    old = fleet.model(0)["version"]
    r = httpx.post(f"{fleet.base(0)}/admin/recalibrate", json={"features": features(X[:60]),
                                                                "points": Y[:60].tolist()}, headers=H, timeout=60.0)
    assert r.status_code == 200, r.text
    new, path = r.json()["version"], r.json()["path"]
    assert new != old and path.startswith(str(fleet.root / "store"))  # written once, to the shared store
    for i in (1, 2):
        version, seconds = fleet.until(lambda: fleet.model(i)["version"] == new, 2.0)
        assert version, f"process {i} still serves {fleet.model(i)['version']} after {seconds:.1f} s"


def test_a_restarted_process_keeps_the_fleets_bundle_counts_and_level(fleet):
    before = [fleet.model(i) for i in range(3)]
    rows = counter(fleet.get(0, "/metrics").text, "lmve_feedback_rows_total")
    assert rows > 0 and len({b["version"] for b in before}) == 1
    fleet.stop(1)
    fleet.start(1)
    after = fleet.model(1)
    assert after["version"] == before[0]["version"]  # the recalibrated bundle, not the configured one
    assert counter(fleet.get(1, "/metrics").text, "lmve_feedback_rows_total") == rows
    assert (after["feedback"]["methods"]["lmve"]["effective_coverage"]
            == before[0]["feedback"]["methods"]["lmve"]["effective_coverage"])
