"""GET /docs and /redoc render in a real Chromium from a real ``lmve-serve`` where nothing but loopback is
reachable: tests/e2e/offline_docs_probe.py, in a network namespace of its own, or, where this machine may not
make one, with every other address behind a dead proxy."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.slow
def test_docs_render_with_no_network_route(tmp_path):
    """Runs tests/e2e/offline_docs_probe.py in a pytest of its own inside ``unshare -n`` (only loopback, no
    route), or where this machine may not make a namespace, with Chromium's every non-loopback request sent to
    a dead proxy."""
    netns = subprocess.run(["unshare", "-n", "true"], capture_output=True).returncode == 0
    cmd = [sys.executable, "-m", "pytest", str(Path(__file__).with_name("offline_docs_probe.py")), "-q", "-p",
           "no:cacheprovider", "--basetemp", str(tmp_path / "inner")]
    run = subprocess.run((["unshare", "-n"] if netns else []) + cmd, capture_output=True, text=True, timeout=240,
                         env={**os.environ, "LMVE_OFFLINE_DOCS": "netns" if netns else "proxy"},
                         cwd=Path(__file__).resolve().parents[2])
    assert run.returncode == 0 and re.search(r"\b1 passed\b", run.stdout), run.stdout[-4000:] + run.stderr[-2000:]
