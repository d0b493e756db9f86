"""End to end: the real ``lmve-serve`` (uvicorn) on a free loopback port, driven with httpx."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import pytest

from tests.conftest import FAST_TRAIN_LMVE
from tests.e2e.servers import KEY, free_port, start_server, wait_alive
from tests.processes import stop

@pytest.fixture(scope="module")
def large_bundle(tmp_path_factory):
    """A 4,000-reading survey (800 positions) in the grouped protocol: about 72 calibration positions,
    so HTTP coverage at new positions can be checked."""
    from models.bundle import save_bundle
    from training.data.datasets import group_by_position, load_dataset
    from training.pipeline import TrainConfig, train

    ds = group_by_position(load_dataset("synthetic", n_samples=4000, seed=0))
    result = train(ds, TrainConfig(seed=0, methods=("ge", "nle", "lmve"), method_params={"lmve": FAST_TRAIN_LMVE},
                                   primary="lmve"))
    root = tmp_path_factory.mktemp("served")
    save_bundle(result.model, root / "bundle", dataset=ds.info, metrics=result.metrics)
    no_lmve = type(result.model)(**{**result.model.__dict__, "selection": {},  # a bundle from before --primary
                                    "methods": {k: v for k, v in result.model.methods.items() if k != "lmve"}})
    save_bundle(no_lmve, root / "bundle_no_lmve", dataset=ds.info)
    return root


@pytest.fixture(scope="module")
def server(large_bundle, tmp_path_factory):
    port = free_port()
    log = tmp_path_factory.mktemp("logs") / "server.log"
    proc = start_server(large_bundle / "bundle", port, log)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_alive(base, proc)
        yield base, proc, log
    finally:
        stop(proc)


def post(base, path, body, **kw):
    return httpx.post(f"{base}{path}", json=body, headers={"X-API-Key": KEY}, timeout=30.0, **kw)


@pytest.mark.slow
def test_ready_predict_contains_and_override(server):
    base, _, _ = server
    assert httpx.get(f"{base}/readyz").json()["status"] == "ready"
    from training.data.synthetic import make_localization

    X, Y, *_ = make_localization(50, seed=123)
    r = post(base, "/predict-region", {"features": X.tolist(), "boundary_points": 32})
    assert r.status_code == 200 and r.json()["method"] == "lmve"
    regions = r.json()["regions"]
    assert len(regions) == 50 and len(regions[0]["boundary"]) == 33
    c = post(base, "/contains", {"features": X.tolist(), "points": Y.tolist()}).json()
    assert len(c["results"]) == 50
    v90 = regions[0]["volume"]
    v50 = post(base, "/predict-region", {"features": X[:1].tolist(), "coverage": 0.5}).json()["regions"][0]["volume"]
    assert v50 < v90
    nle = post(base, "/nle/predict-region", {"features": X[:3].tolist()}).json()
    assert nle["method"] == "nle" and not nle["fallback"]
    assert post(base, "/predict-region", {"features": [[0.0] * 3]}).status_code == 422
    assert httpx.post(f"{base}/predict-region", json={"features": X[:1].tolist()}).status_code == 401


@pytest.mark.slow
def test_http_coverage_of_held_out_points_is_near_the_level(server):
    base, _, _ = server
    from training.data.synthetic import make_queries

    X, Y = make_queries(3000, seed=2024)  # readings at positions between the survey's reference points
    inside = []
    for eta in (0.9, 0.8):
        hits = []
        for i in range(0, 3000, 1000):
            body = {"features": X[i:i + 1000].tolist(), "points": Y[i:i + 1000].tolist(), "coverage": eta}
            hits += [r["inside"] for r in post(base, "/contains", body).json()["results"]]
        inside.append(np.mean(hits))
        # ~72 calibration positions (one score each): conditional coverage sd ~3.5 points
        assert eta - 0.05 < np.mean(hits) < eta + 0.08, (eta, np.mean(hits))


@pytest.mark.slow
def test_reload_good_then_corrupt_then_sighup(server, large_bundle, tmp_path):
    base, proc, log = server
    h = {"X-API-Key": KEY}
    v0 = httpx.get(f"{base}/model", headers=h).json()["version"]
    r = post(base, "/admin/reload", {"bundle": str(large_bundle / "bundle_no_lmve")})
    assert r.status_code == 200 and r.json()["previous_version"] == v0
    fb = post(base, "/predict-region", {"features": [[-70.0] * 16]}).json()
    assert fb["method"] == "nle" and fb["fallback"] is True
    corrupt = tmp_path / "corrupt"
    shutil.copytree(large_bundle / "bundle", corrupt)
    (corrupt / "scaler.npz").write_bytes(b"\x00" * 10)
    r = post(base, "/admin/reload", {"bundle": str(corrupt)})
    assert r.status_code == 422
    assert post(base, "/predict-region", {"features": [[-70.0] * 16]}).json()["method"] == "nle"  # still serving
    # SIGHUP reloads the configured bundle (the last good path)
    r = post(base, "/admin/reload", {"bundle": str(large_bundle / "bundle")})
    assert r.json()["version"] == v0
    proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 20
    text = ""
    while time.monotonic() < deadline:
        text = httpx.get(f"{base}/metrics").text
        if 'lmve_reloads_total{model="bundle",result="ok"} 3.0' in text:
            break
        time.sleep(0.2)
    assert 'lmve_reloads_total{model="bundle",result="ok"} 3.0' in text
    assert httpx.get(f"{base}/readyz").status_code == 200


@pytest.mark.slow
def test_start_without_bundle_stays_up_unready(tmp_path):
    port = free_port()
    log = tmp_path / "nobundle.log"
    proc = start_server(tmp_path / "nothing-here", port, log, LMVE_ALLOW_MISSING_BUNDLE="true")
    base = f"http://127.0.0.1:{port}"
    try:
        wait_alive(base, proc)
        r = httpx.get(f"{base}/readyz")
        assert r.status_code == 503 and "does not exist" in r.json()["detail"]
    finally:
        proc.send_signal(signal.SIGTERM)
        # uvicorn shuts down gracefully, then re-raises the signal it captured
        assert proc.wait(timeout=30) in (0, -signal.SIGTERM)
    text = log.read_text()
    assert "not ready" in text and "Application shutdown complete" in text


def _refused(args: list[str], **env) -> str:
    """``lmve-serve ARGS`` that must not start: exit 2 and one line on stderr, which is returned."""
    full = {**os.environ, "LMVE_GRPC_PORT": "0", **env}
    full.pop("LMVE_BUNDLE", None)
    done = subprocess.run([str(Path(sys.executable).parent / "lmve-serve"), "--host", "127.0.0.1", *args],
                          capture_output=True, text=True, timeout=60, env=full)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("lmve-serve: ") and "Traceback" not in done.stderr, done.stderr
    return lines[0]


@pytest.mark.slow
def test_a_second_server_on_taken_ports_exits_2_with_one_line(large_bundle, tmp_path):
    port, grpc_port = free_port(), free_port()
    proc = start_server(large_bundle / "bundle", port, tmp_path / "first.log", LMVE_GRPC_PORT=str(grpc_port))
    try:
        wait_alive(f"http://127.0.0.1:{port}", proc)
        line = _refused(["--bundle", str(large_bundle / "bundle"), "--port", str(free_port()),
                         "--grpc-port", str(grpc_port)])
        assert f"--grpc-port (LMVE_GRPC_PORT): 127.0.0.1:{grpc_port} is taken (gRPC)" in line
        assert "--grpc-port 0: no gRPC" in line
        line = _refused(["--bundle", str(large_bundle / "bundle"), "--port", str(port)])
        assert f"--port (LMVE_PORT): 127.0.0.1:{port} is taken (HTTP)" in line
        assert proc.poll() is None  # the first server is untouched
    finally:
        stop(proc)


@pytest.mark.slow
def test_a_missing_bundle_or_a_bad_setting_exits_2_with_one_line(tmp_path):
    line = _refused(["--bundle", str(tmp_path / "nothing-here"), "--port", str(free_port())])
    assert "does not exist" in line and "LMVE_ALLOW_MISSING_BUNDLE=true" in line and "lmve-train --out" in line
    line = _refused(["--bundle", str(tmp_path)], LMVE_PORT="70000")
    assert line == "lmve-serve: LMVE_PORT: Input should be less than or equal to 65535; received 70000"


@pytest.mark.slow
def test_example_client_runs_against_the_server(server):
    base, _, _ = server
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, str(root / "examples" / "client.py"), "--url", base, "--api-key", KEY],
                         capture_output=True, text=True, timeout=60, cwd=root)
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("95% ellipse") == 5 and "door inside 90% region" in out.stdout


def _mapped_libraries(pid: int) -> set[str]:
    return {Path(line.split()[-1]).name for line in Path(f"/proc/{pid}/maps").read_text().splitlines()
            if len(line.split()) >= 6}


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/maps").is_file(), reason="needs /proc (Linux)")
def test_serving_process_maps_no_libtorch(server):
    base, proc, _ = server
    # exercise every route that computes: LMVE, NLE, GE, containment
    for path in ("/predict-region", "/nle/predict-region", "/ge/predict-region"):
        assert post(base, path, {"features": [[-70.0] * 16]}).status_code == 200
    assert post(base, "/contains", {"features": [[-70.0] * 16], "points": [[1.0, 2.0]]}).status_code == 200
    libs = _mapped_libraries(proc.pid)
    assert any(name.startswith("_multiarray_umath") for name in libs)  # the maps are read, numpy is in them
    assert not [name for name in libs if "torch" in name], sorted(n for n in libs if "torch" in n)
    # the check can fail: a process that imports torch maps libtorch
    probe = subprocess.Popen([sys.executable, "-c", "import torch, sys; sys.stdout.write('ok'); sys.stdout.flush(); "
                              "sys.stdin.read()"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert probe.stdout.read(2) == b"ok"
        assert any(name.startswith("libtorch") for name in _mapped_libraries(probe.pid))
    finally:
        probe.communicate(b"")
