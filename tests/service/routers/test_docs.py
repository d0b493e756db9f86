"""GET /docs and /redoc (service/routers/docs.py) with no network: the pages name only their own server's
assets, and the assets are the installed package's. tests/e2e/test_docs_offline.py renders them in a real
Chromium with no network."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service.app import create_app
from service.auth import PUBLIC_PATHS
from service.routers.docs import ASSETS, FILES, PATHS, POLICY
from service.settings import ServiceSettings

BUNDLE = Path(__file__).resolve().parents[2] / "fixtures" / "bundle_v2"
PAGES = ("/docs", "/redoc", "/docs/oauth2-redirect")


@pytest.fixture(scope="module")
def client():
    with TestClient(create_app(ServiceSettings(bundle=BUNDLE, api_key="s3cret"))) as c:
        yield c


def test_the_pages_name_no_other_host(client):
    for page in PAGES:
        html = client.get(page).text
        assert not re.search(r"(https?:)?//[\w.-]+\.[a-z]{2,}", html, re.I), (page, html)
    links = re.findall(r'(?:src|href)="([^"]*)"', client.get("/docs").text + client.get("/redoc").text)
    assert sorted(set(links)) == ["/docs/assets/favicon.png", "/docs/assets/redoc.standalone.js",
                                  "/docs/assets/swagger-ui-bundle.js", "/docs/assets/swagger-ui.css"]
    for page in ("/docs", "/redoc"):  # the browser itself refuses any other origin
        assert client.get(page).headers["content-security-policy"] == POLICY and "http" not in POLICY
    assert "url: '/openapi.json'" in client.get("/docs").text
    assert 'spec-url="/openapi.json"' in client.get("/redoc").text


def test_the_assets_are_the_installed_files_public_and_only_those(client):
    for name, media in FILES.items():
        r = client.get(f"/docs/assets/{name}")  # no API key: public, like the pages
        assert r.status_code == 200 and r.headers["content-type"].startswith(media), name
        assert r.content == (ASSETS / name).read_bytes() and "max-age" in r.headers["cache-control"]
    for name in ("core.py", "..%2F__init__.py", "swagger-ui.CSS"):
        r = client.get(f"/docs/assets/{name}", headers={"X-API-Key": "s3cret"})
        assert r.status_code == 404, name
    error = client.get("/docs/assets/core.py", headers={"X-API-Key": "s3cret"}).json()["errors"][0]
    assert error["field"] == "asset" and error["received"] == "core.py" and "swagger-ui.css" in error["expected"]
    # FastAPI's own CDN pages are off: service.routers.docs answers these paths, public ones
    assert client.app.docs_url is None and client.app.redoc_url is None and PATHS <= PUBLIC_PATHS


def test_the_pages_follow_the_root_path():
    app = create_app(ServiceSettings(bundle=BUNDLE))
    with TestClient(app, root_path="/lmve") as c:
        assert 'src="/lmve/docs/assets/swagger-ui-bundle.js"' in c.get("/docs").text
        assert "url: '/lmve/openapi.json'" in c.get("/docs").text
        assert 'spec-url="/lmve/openapi.json"' in c.get("/redoc").text


def test_metrics_name_the_docs_routes(client):
    for path in ("/docs", "/openapi.json", "/docs/assets/favicon.png", "/docs/assets/nothing", "/nothing"):
        client.get(path, headers={"X-API-Key": "s3cret"})
    text = client.get("/metrics").text
    for route, status in (("/docs", 200), ("/openapi.json", 200), ("/docs/assets/{asset}", 200),
                          ("/docs/assets/{asset}", 404), ("unmatched", 404)):
        assert re.search(rf'lmve_http_requests_total{{[^}}]*route="{re.escape(route)}",status="{status}"}} [1-9]', text), \
            (route, status)
