"""The model repository on the real ``lmve-serve --model-repository DIR --workers 2`` on loopback.

Three models, one of them corrupt at start: the corrupt one is listed with its reason and readiness
names it while the others serve; each model answers its own regions; one model is unloaded and loaded
again while another is under load (no failed request on it), and every worker follows; feedback and
metrics are per model; an unknown model is a 404 naming it; repaired and loaded, every worker is ready.
"""

from __future__ import annotations

import shutil
import threading
import time

import httpx
import numpy as np
import pytest

from tests.e2e.servers import free_port, start_server, wait_alive, wait_workers
from tests.processes import stop
from tests.e2e.servers import H, SYNC, by_worker, fresh_get

SITES = ("site=0", "site=1", "site=2")


@pytest.fixture(scope="module")
def repo_server(site_repository, tmp_path_factory):
    src, rows = site_repository
    root = tmp_path_factory.mktemp("repo-e2e")
    repo = root / "repo"
    shutil.copytree(src, repo)
    (repo / "site=2" / "ge.npz").write_bytes(b"tampered")  # corrupt from the start
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = start_server(None, port, root / "server.log", LMVE_MODEL_REPOSITORY=str(repo), LMVE_WORKERS="2",
                        LMVE_STATE_DB=str(root / "state.sqlite"), LMVE_SYNC_INTERVAL_S=SYNC)
    try:
        wait_alive(base, proc, 90.0)
        wait_workers(base, proc, path="/models/site=0")
        yield base, src, repo, rows
    finally:
        stop(proc)


def _status_on_both(base: str, path: str, body: dict, want: int, seconds: float = 8.0) -> None:
    """Until 20 requests in a row on new connections (both workers, with 2 workers and fresh connections)
    answer ``want``."""
    deadline, streak = time.monotonic() + seconds, 0
    while time.monotonic() < deadline and streak < 20:
        with httpx.Client(timeout=10.0) as c:
            code = c.post(f"{base}{path}", json=body, headers=H).status_code
        streak = streak + 1 if code == want else 0
    assert streak >= 20, f"{path} did not answer {want} on every worker within {seconds} s"


@pytest.mark.slow
def test_a_corrupt_model_is_named_by_readiness_while_each_other_answers_its_own(repo_server):
    base, _, _, rows = repo_server
    r = httpx.get(f"{base}/readyz")
    assert r.status_code == 503 and list(r.json()["models"]) == ["site=2"] and "ge.npz" in r.json()["detail"]
    listing = {m["name"]: m for m in fresh_get(base, "/models").json()["models"]}
    assert [listing[s]["state"] for s in SITES] == ["READY", "READY", "UNAVAILABLE"]
    assert "ge.npz" in listing["site=2"]["reason"] and listing["site=2"]["bundle_id"] is None
    X = rows["site=0"][0][:5].tolist()
    centres = []
    for site in ("site=0", "site=1"):
        r = httpx.post(f"{base}/models/{site}/predict-region", json={"features": X}, headers=H)
        assert r.status_code == 200 and r.json()["model"] == site
        centres.append(np.mean([reg["center"][0] for reg in r.json()["regions"]]))
    assert centres[1] - centres[0] == pytest.approx(100.0, abs=15.0)  # each model in its own frame
    r = httpx.post(f"{base}/models/site=2/predict-region", json={"features": X}, headers=H)
    assert r.status_code == 503 and "ge.npz" in r.json()["detail"]
    r = httpx.post(f"{base}/models/nowhere/predict-region", json={"features": X}, headers=H)
    assert r.status_code == 404 and "'nowhere'" in r.json()["detail"] and r.json()["errors"][0]["field"] == "model"
    r = httpx.post(f"{base}/predict-region", json={"features": X, "model": "nowhere"}, headers=H)
    assert r.status_code == 404 and "'nowhere'" in r.json()["detail"]


@pytest.mark.slow
def test_unload_and_load_one_model_under_load_on_another(repo_server):
    base, _, _, rows = repo_server
    X0 = rows["site=0"][0][:4].tolist()
    X1 = {"features": rows["site=1"][0][:2].tolist()}
    statuses, models, stop_load = [], set(), threading.Event()

    def load():
        while not stop_load.is_set():
            with httpx.Client(timeout=10.0) as c:
                r = c.post(f"{base}/models/site=0/predict-region", json={"features": X0}, headers=H)
            statuses.append(r.status_code)
            models.add(r.json().get("model"))

    threads = [threading.Thread(target=load) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        time.sleep(0.5)
        v1 = fresh_get(base, "/models/site=1").json()["version"]
        r = httpx.post(f"{base}/admin/models/site=1/unload", headers=H, timeout=30.0)
        assert r.status_code == 200 and r.json()["state"] == "UNLOADED" and r.json()["previous_bundle_id"] == v1
        _status_on_both(base, "/models/site=1/predict-region", X1, 503)  # every worker followed
        r = httpx.post(f"{base}/admin/models/site=1/load", headers=H, timeout=30.0)
        assert r.status_code == 200 and r.json()["version"] == v1
        _status_on_both(base, "/models/site=1/predict-region", X1, 200)
        time.sleep(0.3)
    finally:
        stop_load.set()
        for t in threads:
            t.join()
    assert len(statuses) > 20 and set(statuses) == {200}, sorted(set(statuses))  # no failed request on site=0
    assert models == {"site=0"}


def test_feedback_and_metrics_are_per_model_on_every_worker(repo_server):
    base, _, _, rows = repo_server
    sent = {"site=0": 0, "site=1": 0}
    pids = set()
    for _ in range(10):  # requests of its own, whichever test ran before (a worker counts those it answered)
        with httpx.Client(timeout=10.0) as c:
            assert c.post(f"{base}/models/site=0/predict-region", json={"features": rows["site=0"][0][:1].tolist()},
                          headers=H).status_code == 200
    for i in range(400):  # until both workers answered (the kernel may favour one for a while), 40 at least
        if len(pids) == 2 and i >= 40:
            break
        site = ("site=0", "site=1")[i % 2]
        X, Y = rows[site]
        k = 2 if site == "site=0" else 1
        with httpx.Client(timeout=10.0) as c:
            r = c.post(f"{base}/models/{site}/feedback", json={"features": X[:k].tolist(), "points": Y[:k].tolist()},
                       headers=H)
        assert r.status_code == 200 and r.json()["model"] == site
        pids.add(r.json()["worker_pid"])
        sent[site] += k
    assert len(pids) == 2, "the kernel gave every connection to one worker"
    texts = [fresh_get(base, "/metrics").text for _ in range(6)]
    for text in texts:  # any worker exports the host's per-model feedback totals
        for site, k in sent.items():
            assert f'lmve_feedback_rows_total{{method="nle",model="{site}"}} {float(k)}' in text
        assert 'model="nowhere"' not in text  # a name no model has is no label value
    assert any('model="site=0",route="/models/{name}/predict-region",status="200"' in text for text in texts)
    windows = by_worker(base, "/models/site=1", lambda b: b["feedback"]["methods"]["nle"]["rows"])
    assert set(windows.values()) == {sent["site=1"]}


def test_repaired_and_loaded_every_worker_is_ready(repo_server):
    base, src, repo, _ = repo_server
    shutil.rmtree(repo / "site=2")
    shutil.copytree(src / "site=2", repo / "site=2")
    r = httpx.post(f"{base}/admin/models/site=2/load", headers=H, timeout=30.0)
    assert r.status_code == 200 and r.json()["model"] == "site=2"
    deadline, streak = time.monotonic() + 8.0, 0
    while time.monotonic() < deadline and streak < 20:
        with httpx.Client(timeout=10.0) as c:
            streak = streak + 1 if c.get(f"{base}/readyz").status_code == 200 else 0
    assert streak >= 20, "not every worker became ready"
    body = httpx.get(f"{base}/readyz").json()
    assert sorted(body["models"]) == list(SITES)
    states = {m["name"]: m["state"] for m in fresh_get(base, "/models").json()["models"]}
    assert states == dict.fromkeys(SITES, "READY")
