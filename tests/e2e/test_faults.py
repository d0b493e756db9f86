"""Faults and limits under concurrency, on a real uvicorn: each fails if the behaviour regresses."""

from __future__ import annotations

import shutil
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest

from tests.processes import stop
from tests.e2e.servers import KEY, free_port, start_server, wait_alive

H = {"X-API-Key": KEY}


def big_body(rows: int = 1024, k: int = 512) -> dict:
    rng = np.random.default_rng(0)
    return {"features": (-70 + 8 * rng.normal(size=(rows, 16))).tolist(), "boundary_points": k}


@pytest.fixture()
def served(bundle_dir, tmp_path):
    procs = []

    def _start(**env):
        port = free_port()
        proc = start_server(bundle_dir, port, tmp_path / f"s{len(procs)}.log", **env)
        procs.append(proc)
        base = f"http://127.0.0.1:{port}"
        wait_alive(base, proc)
        return base, proc

    yield _start
    for p in procs:
        stop(p)


@pytest.mark.slow
def test_concurrency_limit_answers_503_instead_of_queueing(served):
    base, _ = served(LMVE_MAX_CONCURRENCY="1")
    body = big_body()
    with ThreadPoolExecutor(6) as pool:
        codes = list(pool.map(lambda _: httpx.post(f"{base}/predict-region", json=body, headers=H, timeout=60),
                              range(6)))
    status = [r.status_code for r in codes]
    assert 200 in status and 503 in status, status
    refused = next(r for r in codes if r.status_code == 503)
    assert refused.headers["retry-after"] == "1" and "in flight" in refused.json()["detail"]
    assert 'lmve_rejected_total{reason="overloaded"}' in httpx.get(f"{base}/metrics").text


@pytest.mark.slow
def test_request_timeout_answers_504(served):
    base, _ = served(LMVE_REQUEST_TIMEOUT_S="0.01")
    r = httpx.post(f"{base}/predict-region", json=big_body(), headers=H, timeout=60)
    assert r.status_code == 504 and r.headers["content-type"].startswith("application/problem+json")
    assert httpx.post(f"{base}/predict-region", json={"features": [[-70.0] * 16]}, headers=H).status_code in (200, 504)
    assert httpx.get(f"{base}/livez").status_code == 200  # the server is fine afterwards


@pytest.mark.slow
def test_reload_during_load_loses_no_request(served, bundle_dir, tmp_path, trained_synthetic):
    from models.bundle import save_bundle

    result, ds = trained_synthetic
    model = result.model
    other = type(model)(**{**model.__dict__, "methods": {k: v for k, v in model.methods.items() if k != "copula"}})
    save_bundle(other, tmp_path / "other", dataset=ds.info)
    base, _ = served()
    versions = {httpx.get(f"{base}/model", headers=H).json()["version"]}
    stop = threading.Event()
    outcomes = []

    def client():
        with httpx.Client(base_url=base, headers=H, timeout=30) as c:
            for _ in range(400):  # bounded
                if stop.is_set():
                    return
                r = c.post("/contains", json={"features": [[-70.0] * 16] * 4, "points": [[20.0, 12.0]] * 4})
                outcomes.append((r.status_code, r.json().get("bundle_id")))

    threads = [threading.Thread(target=client) for _ in range(4)]
    for t in threads:
        t.start()
    for target in (tmp_path / "other", bundle_dir, tmp_path / "other", bundle_dir):
        time.sleep(0.3)
        r = httpx.post(f"{base}/admin/reload", json={"bundle": str(target)}, headers=H, timeout=60)
        assert r.status_code == 200
        versions.add(r.json()["version"])
    stop.set()
    for t in threads:
        t.join()
    assert len(outcomes) > 50
    assert all(code == 200 for code, _ in outcomes), {code for code, _ in outcomes}
    assert {v for _, v in outcomes} <= versions and len(versions) == 2


@pytest.mark.slow
def test_sigterm_drains_in_flight_requests(served):
    base, proc = served()
    result = {}

    def slow():
        result["r"] = httpx.post(f"{base}/predict-region", json=big_body(), headers=H, timeout=60)

    t = threading.Thread(target=slow)
    t.start()
    time.sleep(0.3)  # the request is in flight (parsing 16k numbers, then 525k boundary points)
    proc.send_signal(signal.SIGTERM)
    t.join(timeout=60)
    r = result["r"]
    assert r.status_code == 200 and len(r.json()["regions"]) == 1024
    assert proc.wait(timeout=30) in (0, -signal.SIGTERM)
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{base}/livez", timeout=2)


def test_tampered_bundle_at_start_keeps_process_up_and_unready(bundle_dir, tmp_path):
    bad = tmp_path / "bad"
    shutil.copytree(bundle_dir, bad)
    (bad / "centre.npz").write_bytes(b"evil")
    port = free_port()
    proc = start_server(bad, port, tmp_path / "bad.log")
    base = f"http://127.0.0.1:{port}"
    try:
        wait_alive(base, proc)
        r = httpx.get(f"{base}/readyz")
        assert r.status_code == 503 and "centre.npz does not match the manifest" in r.json()["detail"]
        assert httpx.post(f"{base}/predict-region", json={"features": [[-70.0] * 16]}, headers=H).status_code == 503
    finally:
        stop(proc)
    assert "centre.npz does not match the manifest" in (tmp_path / "bad.log").read_text()


@pytest.mark.slow
def test_one_limit_on_requests_in_flight_holds_for_rest_and_grpc_together(served):
    """LMVE_MAX_CONCURRENCY=1 is one request in flight over both protocols: a REST request holding the slot
    (its body still arriving) makes a gRPC call UNAVAILABLE, and a gRPC call holding it (a large batch being
    computed) makes REST answer 503, each with the same words."""
    import grpc
    import tritonclient.grpc as tg
    from tritonclient.utils import InferenceServerException

    grpc_port = free_port()
    base, _ = served(LMVE_MAX_CONCURRENCY="1", LMVE_GRPC_PORT=str(grpc_port), LMVE_MAX_ROWS="400000",
                     LMVE_MAX_BODY_BYTES="60000000", LMVE_REQUEST_TIMEOUT_S="120")
    client = tg.InferenceServerClient(f"127.0.0.1:{grpc_port}")
    name = httpx.get(f"{base}/model", headers=H).json()["name"]
    one = tg.InferInput("features", [1, 16], "FP64")
    one.set_data_from_numpy(np.full((1, 16), -70.0))
    meta = [("x-api-key", KEY)]

    release, entered = threading.Event(), threading.Event()

    def slow_body():  # the request is in flight from its first byte until its body ends
        yield b'{"features": [[' + b", ".join([b"-70.0"] * 16)
        entered.set()
        release.wait(30)
        yield b"]]}"

    with ThreadPoolExecutor(1) as pool:
        holding = pool.submit(httpx.post, f"{base}/predict-region", content=slow_body(), timeout=60,
                              headers={**H, "content-type": "application/json"})
        assert entered.wait(30)
        time.sleep(0.3)  # the first bytes reach the server
        with pytest.raises(InferenceServerException) as refused:
            client.infer(name, [one], headers=dict(meta))
        assert refused.value.status() == str(grpc.StatusCode.UNAVAILABLE) and "in flight" in refused.value.message()
        rest = httpx.post(f"{base}/predict-region", json={"features": [[-70.0] * 16]}, headers=H)
        assert rest.status_code == 503 and "1 requests are already in flight" in rest.json()["detail"]
        release.set()
        assert holding.result().status_code == 200
    assert client.infer(name, [one], headers=dict(meta)).as_numpy("volume").shape == (1,)  # the slot is free again

    big = tg.InferInput("features", [300_000, 16], "FP64")
    big.set_data_from_numpy(-70 + 8 * np.random.default_rng(0).normal(size=(300_000, 16)))
    done, answers = threading.Event(), []
    client.async_infer(name, [big], lambda result, error: (answers.append((result, error)), done.set()),
                       headers=dict(meta))
    statuses = set()
    while not done.is_set():
        r = httpx.post(f"{base}/predict-region", json={"features": [[-70.0] * 16]}, headers=H)
        statuses.add(r.status_code)
        if r.status_code == 503:
            assert "1 requests are already in flight" in r.json()["detail"]
            break
    done.wait(120)
    assert answers and answers[0][1] is None, answers
    assert 503 in statuses, f"REST was never refused while the gRPC call computed ({statuses})"
