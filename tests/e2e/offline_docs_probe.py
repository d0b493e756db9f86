"""Run by tests/e2e/test_docs_offline.py in a pytest of its own, never collected on its own (its name is not
``test_*.py``): inside ``unshare -n`` (``LMVE_OFFLINE_DOCS=netns``: a network namespace that holds only
loopback) or with Chromium's every request but loopback's sent to a proxy nobody answers
(``LMVE_OFFLINE_DOCS=proxy``), a real ``lmve-serve`` and a headless Chromium: ``/docs`` and ``/redoc`` render
the API, everything they load comes from the server, and what they ask of another origin the page's
Content-Security-Policy refuses."""

from __future__ import annotations

import fcntl
import os
import socket
import struct

import pytest

from tests.service.routers.test_docs import BUNDLE

MODE = os.environ.get("LMVE_OFFLINE_DOCS")


def loopback_up() -> None:
    """Bring ``lo`` up (a new network namespace has it down): SIOCSIFFLAGS with IFF_UP added, as
    ``ip link set lo up`` does (no iproute2 needed)."""
    get_flags, set_flags, up = 0x8913, 0x8914, 0x1
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        flags = struct.unpack("16sH", fcntl.ioctl(s, get_flags, struct.pack("16sH22x", b"lo", 0))[:18])[1]
        fcntl.ioctl(s, set_flags, struct.pack("16sH22x", b"lo", flags | up))


@pytest.mark.skipif(MODE not in ("netns", "proxy"), reason="run by tests/e2e/test_docs_offline.py, offline")
def test_the_pages_render_offline(tmp_path):
    from selenium.webdriver.support.ui import WebDriverWait

    from tests.processes import stop
    from tests.e2e.servers import chromium, free_port, start_server, wait_alive

    if MODE == "netns":
        loopback_up()
        with pytest.raises(OSError):  # no route out: the namespace holds only lo
            socket.create_connection(("1.1.1.1", 443), timeout=3)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    server = start_server(BUNDLE, port, tmp_path / "serve.log")
    # a proxy nobody answers: Chromium sends every request but loopback's there
    args = () if MODE == "netns" else ("--proxy-server=http://127.0.0.1:9",)
    try:
        wait_alive(base, server, path="/readyz")
        with chromium(*args) as driver:
            wait = WebDriverWait(driver, 60)
            driver.get(f"{base}/docs")
            wait.until(lambda d: d.execute_script("return document.querySelectorAll('.opblock').length") > 0)
            assert driver.title == "lmve - Swagger UI"
            ops = driver.execute_script("return [...document.querySelectorAll('.opblock-summary-path')]"
                                        ".map(e => e.innerText)")
            assert "/predict-region" in ops and "/contains" in ops, ops
            fetched = driver.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
            driver.get(f"{base}/redoc")
            wait.until(lambda d: "/predict-region" in d.execute_script(
                "const c = document.querySelector('.api-content'); return c ? c.innerText : ''"))
            assert driver.title == "lmve - ReDoc"
            fetched += driver.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
            errors = [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        assert {f"{base}/docs/assets/swagger-ui-bundle.js", f"{base}/docs/assets/redoc.standalone.js",
                f"{base}/openapi.json"} <= set(fetched), fetched
        # what the pages asked of another origin, the page's policy refused before any lookup (the entry stays,
        # empty): ReDoc's logo from cdn.redoc.ly
        refusals = [m for m in errors if "violates the following Content Security Policy" in m
                    and "has been blocked" in m]
        assert errors == refusals, errors  # no error but those refusals
        elsewhere = {url for url in fetched if not url.startswith(base + "/")}
        assert elsewhere == {m.split("'")[1] for m in refusals}, (elsewhere, errors)
    finally:
        stop(server)
