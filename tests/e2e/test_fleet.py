"""A fleet on one state: three real ``lmve-serve`` processes on loopback share a SQLite file or a PostgreSQL
database (``LMVE_STATE_URL``), the same tests on both backends.

Feedback sent to the three processes lands in one exact count that each exports; one adaptive level per model;
a recalibration posted to one process is served by all three within 2 s (PostgreSQL: by LISTEN/NOTIFY, the
polling interval set to 30 s here; SQLite: by polling every 0.5 s); a restarted process keeps all of it.

Faults: two recalibrations of one model at once on two processes publish one child of the parent, the other is
told (409); ``kill -9`` of a process while it recalibrates never publishes half a bundle and the others keep
serving; PostgreSQL stopped and started under load: the region routes keep answering, feedback in the outage is
refused with 503 and its reason, the counts are exact after.
"""

from __future__ import annotations

import shutil
import signal
import threading
import time

import httpx
import numpy as np
import pytest

from models.bundle import load_bundle
from service.state import open_state

from tests.service.conftest import BACKENDS, features
from tests.e2e.servers import KEY, free_port, start_server, wait_alive

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
           "LMVE_ADAPTIVE_GAMMA": "0.05", "LMVE_RECALIBRATED_DIR": str(root / "store"),
           "LMVE_MAX_BODY_BYTES": "64000000"}
    fleet = Fleet(served, root, env)
    try:
        for i in range(3):
            fleet.start(i)
        yield fleet
    finally:
        for i in range(3):
            fleet.stop(i)


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
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


def recal_body(X, Y, n: int, shift: int = 0) -> dict:
    idx = (np.arange(n) + shift) % len(X)
    return {"features": features(X[idx]), "points": Y[idx].tolist()}


def published(fleet):
    state = open_state(fleet.env["LMVE_STATE_URL"])
    try:
        return state.served("site")
    finally:
        state.close()


@pytest.mark.slow
def test_two_recalibrations_at_once_publish_one_child_and_tell_the_other(fleet, test_rows):
    """Both processes calibrate against the same parent; the compare-and-set publish lets one through. Requests
    that do not overlap (the second starts after the first was followed) chain instead: never two children of
    one parent. Up to five rounds; at least one must overlap."""
    X, Y = test_rows
    conflicts = 0
    for attempt in range(5):
        parent = published(fleet).bundle_id
        bodies = [recal_body(X, Y, 3000, shift=7 * i + attempt) for i in range(2)]
        go, answers = threading.Barrier(2), [None, None]

        def post(i):
            go.wait()
            answers[i] = httpx.post(f"{fleet.base(i)}/admin/recalibrate", json=bodies[i], headers=H, timeout=60.0)

        threads = [threading.Thread(target=post, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        codes = sorted(a.status_code for a in answers)
        assert codes in ([200, 200], [200, 409]), [a.text for a in answers]
        won = [a.json() for a in answers if a.status_code == 200]
        if codes == [200, 409]:
            conflicts += 1
            (lost,) = [a.json() for a in answers if a.status_code == 409]
            assert lost["title"] == "Recalibration conflict" and won[0]["version"] in lost["detail"]
            assert won[0]["previous_version"] == parent
            winner = won[0]["version"]
        else:  # one after the other: the second recalibrated the first's child
            first, second = sorted(won, key=lambda w: w["previous_version"] != parent)
            assert first["previous_version"] == parent and second["previous_version"] == first["version"]
            winner = second["version"]
        assert published(fleet).bundle_id == winner
        for i in range(3):
            served, seconds = fleet.until(lambda: fleet.model(i)["version"] == winner, 2.0)
            assert served, f"process {i} still serves {fleet.model(i)['version']} after {seconds:.1f} s"
        if conflicts:
            break
    assert conflicts, "five rounds and the two recalibrations never overlapped"
    store = fleet.root / "store"
    assert not [p for p in store.iterdir() if p.name.startswith(".") and ".tmp-" in p.name]


@pytest.mark.slow
def test_kill_9_during_a_recalibration_publishes_nothing_half_written(fleet, test_rows):
    """The recalibration is timed once, then process 0 is killed at three points of another one (parsing,
    calibrating, writing): what is published is always a complete bundle, the other two never fail a request,
    and the restarted process serves what is published."""
    X, Y = test_rows
    body = recal_body(X, Y, 30000)
    t0 = time.monotonic()
    r = httpx.post(f"{fleet.base(0)}/admin/recalibrate", json=body, headers=H, timeout=120.0)
    took = time.monotonic() - t0
    assert r.status_code == 200, r.text
    stop, failures, answered = threading.Event(), [], [0]

    def hammer(i):
        with httpx.Client(base_url=fleet.base(i), headers=H, timeout=10.0) as c:
            while not stop.is_set():
                a = c.post("/predict-region", json={"features": features(X[:2])})
                if a.status_code != 200:
                    failures.append((i, a.status_code, a.text))
                answered[0] += 1

    load = [threading.Thread(target=hammer, args=(i,)) for i in (1, 2)]
    for t in load:
        t.start()
    try:
        for fraction in (0.3, 0.6, 0.9):
            sender = threading.Thread(target=lambda: _quietly(lambda: httpx.post(
                f"{fleet.base(0)}/admin/recalibrate", json=body, headers=H, timeout=120.0)))
            sender.start()
            time.sleep(took * fraction)
            fleet.procs[0].send_signal(signal.SIGKILL)
            fleet.procs[0].wait(timeout=30)
            sender.join()
            rec = published(fleet)
            assert load_bundle(rec.path).manifest["bundle_id"] == rec.bundle_id  # complete, verified
            for bundle in (fleet.root / "store").iterdir():
                if not bundle.name.startswith("."):  # every visible bundle is whole; a temporary one is hidden
                    load_bundle(bundle)
            fleet.start(0)
            assert fleet.model(0)["version"] == rec.bundle_id
    finally:
        stop.set()
        for t in load:
            t.join()
    assert not failures and answered[0] > 0, failures[:3]
    for i in range(3):
        assert fleet.model(i)["version"] == published(fleet).bundle_id


def _quietly(send) -> None:
    try:
        send()
    except httpx.HTTPError:
        pass  # the process was killed under the request


@pytest.mark.slow
def test_postgres_stopped_and_started_under_load(fleet, test_rows, request):
    """Region routes answer through the outage from the loaded bundle; feedback in the outage is refused with
    503 and the database's reason (never a 500, never lost silently); the totals are exact after."""
    if not fleet.env["LMVE_STATE_URL"].startswith("postgresql"):
        pytest.skip("a database server to stop: the PostgreSQL backend")
    cluster = request.getfixturevalue("pg_cluster")
    X, Y = test_rows
    before = counter(fleet.get(0, "/metrics").text, "lmve_feedback_rows_total")
    stop, region, feedback = threading.Event(), [], []

    def regions(i):
        with httpx.Client(base_url=fleet.base(i), headers=H, timeout=10.0) as c:
            while not stop.is_set():
                region.append(c.post("/predict-region", json={"features": features(X[:2])}).status_code)

    def feedbacks():
        k = 0
        while not stop.is_set():
            rows = slice(4 * (k % 10), 4 * (k % 10) + 4)
            a = httpx.post(f"{fleet.base(k % 3)}/feedback", json={"features": features(X[rows]),
                                                                   "points": Y[rows].tolist()}, headers=H, timeout=30)
            feedback.append((a.status_code, a.json(), a.headers.get("retry-after")))
            k += 1
            time.sleep(0.02)

    threads = [threading.Thread(target=regions, args=(i,)) for i in range(3)] + [threading.Thread(target=feedbacks)]
    for t in threads:
        t.start()
    try:
        time.sleep(1.0)
        cluster.stop("fast")
        degraded, _ = fleet.until(lambda: fleet.get(1, "/readyz").json()["status"] == "degraded", 10.0)
        time.sleep(2.0)
        ready_in_outage = fleet.get(1, "/readyz")
        cluster.start()
        back, seconds = fleet.until(lambda: all(fleet.get(i, "/readyz").json()["state"]["status"] == "ok"
                                                for i in range(3)), 20.0)
        time.sleep(1.0)
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert degraded and back, f"readyz never said degraded ({degraded}) or back ({back}, {seconds:.1f} s)"
    assert ready_in_outage.status_code == 200 and ready_in_outage.json()["state"]["status"] == "unavailable"
    assert region and set(region) == {200}, {c: region.count(c) for c in set(region)}
    codes = {c for c, _, _ in feedback}
    assert codes == {200, 503}, codes
    refused = [(b, ra) for c, b, ra in feedback if c == 503]
    assert all(b["title"] == "State unavailable" and ra for b, ra in refused), refused
    # a 503 says nothing was recorded, or (the server went away during COMMIT) that the outcome is unknown
    lost = [b for b, _ in refused if "nothing was recorded" in b["detail"]]
    unknown = [b for b, _ in refused if b["detail"].startswith("the outcome is unknown")]
    assert len(lost) + len(unknown) == len(refused), refused
    counted = sum(b["recorded"] for c, b, _ in feedback if c == 200)
    # a 200 whose window could not be read after its commit still counts, and says why it has no window
    late = [b for c, b, _ in feedback if c == 200 and "unavailable" in b["monitor"]]
    assert all("cannot be reached" in b["monitor"]["unavailable"] for b in late), late
    for i in range(3):
        total = counter(fleet.get(i, "/metrics").text, "lmve_feedback_rows_total")
        assert before + counted <= total <= before + counted + 4 * len(unknown), (total, before, counted, unknown)
