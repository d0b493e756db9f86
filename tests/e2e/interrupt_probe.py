"""Run by tests/e2e/test_processes.py through ``scripts/test.sh``, never collected on its own (its name is not
``test_*.py``): one test that starts each kind of server the suite starts -- ``lmve-serve`` with two uvicorn
workers, nginx in front of it, a PostgreSQL cluster, chromedriver with its headless Chromium on the proxy --
writes what it started to the file ``$LMVE_PROBE_READY`` names, and then waits to be interrupted, or fails
once a file of that name with the suffix ``.fail`` appears. lmve-serve and nginx are left to the run's record
(tests.processes.stop_all), the cluster and the browser are stopped by the test's own ``finally``."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest

from tests.deploy.test_deploy import start_nginx
from tests.postgres import Cluster, bindir
from tests.e2e.servers import chromium, free_port, start_server, wait_alive


def test_start_every_kind_of_server_and_wait(tmp_path):
    ready = Path(os.environ["LMVE_PROBE_READY"])
    if shutil.which("nginx") is None or bindir() is None:
        pytest.skip("nginx or PostgreSQL's server is not installed")
    port = free_port()
    serve = start_server(None, port, tmp_path / "serve.log", LMVE_WORKERS="2")
    wait_alive(f"http://127.0.0.1:{port}", serve, 90.0)
    listen = free_port()
    site = f"server {{ listen 127.0.0.1:{listen}; location / {{ proxy_pass http://127.0.0.1:{port}; }} }}"
    nginx = start_nginx(tmp_path, site, workers=2)
    proxy = f"http://127.0.0.1:{listen}"
    wait_alive(proxy, nginx, 20.0)
    cluster = Cluster().start()
    try:
        with chromium() as driver:
            driver.get(f"{proxy}/livez")
            assert "\"status\":\"ok\"" in driver.page_source
            started = {"pytest": os.getpid(), "lmve-serve": serve.pid, "nginx": nginx.pid,
                       "postgres": int((cluster.data / "postmaster.pid").read_text().split()[0]),
                       "chromedriver": driver.service.process.pid, "cluster": str(cluster.root)}
            tmp = ready.with_suffix(".tmp")
            tmp.write_text(json.dumps(started))
            tmp.rename(ready)
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                assert not ready.with_suffix(".fail").exists(), "failing on purpose, with every server up"
                time.sleep(0.1)
            pytest.fail("no interrupt came within 120 s")
    finally:
        cluster.destroy()
