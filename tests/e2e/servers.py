"""Real processes for the process-level tests: ``lmve-serve`` (uvicorn, its workers, its gRPC port) on a free
loopback port, an httpx client on it, and a headless Chromium driven by selenium. Every process runs in a
process group of its own (:func:`tests.processes.spawn`), stopped at the end of the run at the latest."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import httpx
import numpy as np
import pytest

from tests import processes
from tests.processes import spawn, stop

KEY = "e2e-key"
#: the API key header of every server these helpers start
H = {"X-API-Key": KEY}
#: the replicas' sync interval (seconds) in the multi-worker tests
SYNC = "0.3"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(bundle: Path | None, port: int, log: Path, **env) -> subprocess.Popen:
    """``lmve-serve`` on ``port`` in a process group of its own (:func:`tests.processes.spawn`: stopped at the
    end of the run at the latest, an interrupted run included)."""
    cmd = [str(Path(sys.executable).parent / "lmve-serve"), "--host", "127.0.0.1", "--port", str(port),
           "--log-level", "info"]
    if bundle is not None:
        cmd += ["--bundle", str(bundle)]
    full_env = {**os.environ, "LMVE_API_KEY": KEY, **env}
    full_env.pop("LMVE_BUNDLE", None)
    return spawn(cmd, stdout=open(log, "wb"), stderr=subprocess.STDOUT, env=full_env)


def wait_alive(base: str, proc: subprocess.Popen, timeout: float = 60.0, path: str = "/livez") -> None:
    """Poll ``path`` until it answers 200 (``/readyz``: a verified bundle is served)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            if httpx.get(f"{base}{path}", timeout=1.0).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"server did not answer {path}")


def wait_ready(base: str, proc, timeout: float = 90.0) -> None:
    wait_alive(base, proc, timeout, path="/readyz")


def wait_workers(base: str, proc: subprocess.Popen, workers: int = 2, path: str = "/model",
                 timeout: float = 90.0) -> None:
    """Until ``workers`` distinct workers answered ``path`` (a route whose body names ``worker_pid``) on new
    connections: the first worker to load
    takes every connection while its siblings still load, so a test that needs each worker waits here."""
    deadline, pids = time.monotonic() + timeout, set()
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            pids.add(fresh_get(base, path).json()["worker_pid"])
        except (httpx.TransportError, KeyError, ValueError):
            pass
        if len(pids) >= workers:
            return
        time.sleep(0.05)
    raise TimeoutError(f"{len(pids)} of {workers} workers answered within {timeout} s")


@contextmanager
def serving_client(log: Path, **env):
    """A real ``lmve-serve`` on a free loopback port (``env``: its settings, e.g. ``LMVE_MODEL_REPOSITORY``),
    ready, and an httpx client on it with the API key; stopped on exit."""
    port = free_port()
    proc = start_server(None, port, log, **env)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_alive(base, proc, path="/readyz")
        with httpx.Client(base_url=base, timeout=30.0, headers=H) as client:
            yield client
    finally:
        stop(proc, timeout=20)


def serving_repository(root: Path, default: str, logs: Path, **env):
    """:func:`serving_client` on the model repository ``root`` whose default model is ``default``, logging
    to ``logs/server.log``."""
    return serving_client(logs / "server.log", LMVE_MODEL_REPOSITORY=str(root), LMVE_DEFAULT_MODEL=default, **env)


def post(base: str, route: str, body) -> httpx.Response:
    """``body`` as JSON to ``base + route`` with the key (NaN sent as NaN, as a careless client would)."""
    return httpx.post(f"{base}{route}", content=json.dumps(body), timeout=30.0,
                      headers={**H, "Content-Type": "application/json"})


def assert_answers_as_rest(result, ref: dict, refc: dict) -> None:
    """A tritonclient result (HTTP or gRPC) holds, output by output, what REST answered for the same rows:
    ``ref`` from ``/predict-region``, ``refc`` from ``/contains``."""
    for name in ("center", "shape", "volume", "typicality"):
        np.testing.assert_array_equal(result.as_numpy(name), [g[name] for g in ref["regions"]])
    assert result.as_numpy("inside").dtype == np.bool_
    assert result.as_numpy("inside").tolist() == [g["inside"] for g in refc["results"]]
    for name in ("distance", "p_value"):
        np.testing.assert_array_equal(result.as_numpy(name), [g[name] for g in refc["results"]])


def fresh_get(base: str, path: str) -> httpx.Response:
    """One request on a new connection (so that either worker may take it)."""
    with httpx.Client(timeout=10.0) as c:
        return c.get(f"{base}{path}", headers=H)


def by_worker(base: str, path: str, key, tries: int = 200) -> dict:
    """``worker_pid -> key(json)`` from requests on new connections, until two workers answered."""
    seen = {}
    for _ in range(tries):
        body = fresh_get(base, path).json()
        seen[body["worker_pid"]] = key(body)
        if len(seen) == 2:
            break
    return seen


@contextmanager
def chromium(*args: str):
    """A headless Chromium driven by selenium (chromedriver and Chromium in a process group of their own, so
    that tests.processes stops them at the end of the run at the latest, should ``quit()`` never come), with
    ``args`` besides its own; skips where they are not installed."""
    if CHROMIUM is None or CHROMEDRIVER is None:
        pytest.skip("no chromium/chromedriver on PATH (Debian: apt-get install chromium chromium-driver; .ci/run "
                    "installs them)")
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1400,900", "--force-device-scale-factor=1", *args):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = Service(CHROMEDRIVER, popen_kw={"start_new_session": True})
    driver = webdriver.Chrome(service=service, options=options)
    processes.adopt(service.process)
    try:
        yield driver
    finally:
        driver.quit()
        processes.stop(service.process)
