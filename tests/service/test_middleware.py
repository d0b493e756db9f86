"""service/middleware.py: the API key is checked before any route, on every route but the public ones."""

from __future__ import annotations

from tests.service.conftest import features

ROW = [-60.0] * 16


def test_api_key_guards_all_but_health(make_client):
    client = make_client(api_key="s3cret")
    assert client.get("/livez").status_code == 200 and client.get("/readyz").status_code == 200
    assert client.get("/metrics").status_code == 200
    r = client.post("/predict-region", json={"features": [ROW]})
    assert r.status_code == 401 and r.headers["content-type"].startswith("application/problem+json")
    assert client.post("/predict-region", json={"features": [ROW]}, headers={"X-API-Key": "wrong"}).status_code == 401
    assert client.post("/predict-region", json={"features": [ROW]}, headers={"X-API-Key": "s3cret"}).status_code == 200
    assert client.get("/model", headers={"Authorization": "Bearer s3cret"}).status_code == 200


def test_api_key_is_checked_before_routing_and_docs_stay_public(make_client):
    client = make_client(api_key="s3cret")
    # an unknown path is refused for want of a key, before the router could say 404
    assert client.get("/no-such-route").status_code == 401
    assert client.get("/no-such-route", headers={"X-API-Key": "s3cret"}).status_code == 404
    assert client.post("/ge/predict-region", json={"features": [ROW]}).status_code == 401
    assert client.get("/openapi.json").status_code == 200 and client.get("/docs").status_code == 200
    assert 'lmve_rejected_total{reason="unauthorised"}' in client.get("/metrics").text
