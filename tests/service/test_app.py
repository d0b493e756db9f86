"""service.app.ServiceApp: the hot routes' short stack answers exactly as FastAPI's full stack does."""

import json

import pytest
from fastapi.testclient import TestClient

from service.app import create_app
from service.settings import ServiceSettings
from tests.service.conftest import features

KEY = "hot-path-key"


def _requests(X, Y):
    one, two = features(X[:1]), features(X[:2])
    row = json.dumps({"features": two}).encode()
    return [
        ("/predict-region", {"features": one}),
        ("/contains", {"features": two, "points": features(Y[:2])}),
        ("/nle/predict-region", {"features": two, "boundary_points": 5}),
        ("/models/synthetic/ge/contains", {"features": one, "points": features(Y[:1])}),
        ("/v2/models/synthetic/infer", {"inputs": [{"name": "features", "shape": [1, X.shape[1]],
                                                     "datatype": "FP64", "data": one[0]}]}),
        ("/predict-region", {"features": [one[0][:-1]]}),  # 422: a column short
        ("/predict-region", {"features": one, "coverage": 2.0}),  # 422: a level outside (0, 1)
        ("/bogus/predict-region", {"features": one}),  # 404: no such method
        ("/models/nowhere/contains", {"features": one, "points": [[0.0, 0.0]]}),  # 404: no such model
        ("/models/synthetic/predict-region", {"features": one, "model": "other"}),  # 422: two names
        ("/v2/models/synthetic/infer", {"inputs": []}),  # the protocol's 400
        ("/predict-region", b'{"features": [[1, 2'),  # 400: malformed JSON
        ("/contains", row[: len(row) // 2]),  # 400: cut short
        ("/predict-region", b"x" * 5000),  # 413: declared length over the limit
    ]


def _send(client, path, body, **headers):
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return client.post(path, content=content, headers={"content-type": "application/json", "x-api-key": KEY,
                                                        **headers})


def _answer(response):
    return response.status_code, response.headers["content-type"], response.json()


def test_hot_routes_answer_as_the_full_stack(bundle_dir, test_rows):
    X, Y = test_rows
    app = create_app(ServiceSettings(bundle=bundle_dir, api_key=KEY, max_body_bytes=4096))
    assert app.hot is not None
    with TestClient(app) as client:
        hot = app.hot
        answers = {}
        for on in (True, False):
            app.hot = hot if on else None
            answers[on] = [_answer(_send(client, path, body)) for path, body in _requests(X, Y)]
            answers[on].append(_answer(client.post("/predict-region", json={"features": features(X[:1])})))  # 401
        assert answers[True] == answers[False]
        statuses = [status for status, _, _ in answers[True]]
        assert statuses == [200] * 5 + [422, 422, 404, 404, 422, 400, 400, 400, 413, 401]  # not JSON: 400
        app.hot = hot
        metrics = client.get("/metrics").text
        assert 'route="/models/{name}/{method}/contains",status="200"' in metrics
        assert 'route="/v2/models/{name}/infer",status="400"' in metrics


def test_a_streamed_body_over_the_limit_is_refused_on_the_hot_path(make_client):
    client = make_client(max_body_bytes=4096)
    assert client.app.hot is not None
    chunks = iter([b'{"features": [', b"[1.0, 2.0]," * 400, b"[1.0]]}"])  # no Content-Length: chunked
    r = client.post("/predict-region", content=chunks, headers={"content-type": "application/json"})
    assert r.status_code == 413 and "4096" in r.json()["detail"]


def test_an_unexpected_error_on_the_hot_path_is_a_logged_500(make_client, test_rows, monkeypatch, caplog):
    from service.routers import regions

    def broken(*args):
        raise RuntimeError("a bug")

    monkeypatch.setattr(regions, "_regions", broken)  # the endpoint looks it up at call time
    client = make_client()
    client = TestClient(client.app, raise_server_exceptions=False)
    r = client.post("/predict-region", json={"features": features(test_rows[0][:1])})
    assert r.status_code == 500 and r.headers["content-type"] == "application/problem+json"
    assert "unexpected error" in r.json()["detail"] and "a bug" not in r.text
    assert any("unhandled error on POST /predict-region" in rec.message for rec in caplog.records)
    assert 'route="/predict-region",status="500"' in client.get("/metrics").text


def test_cors_headers_on_the_hot_path(make_client, test_rows):
    client = make_client(cors_origins=["http://site.example"])
    assert client.app.hot is not None
    r = client.post("/predict-region", json={"features": features(test_rows[0][:1])},
                    headers={"origin": "http://site.example"})
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "http://site.example"
    r = client.post("/predict-region", json={"features": features(test_rows[0][:1])},
                    headers={"origin": "http://elsewhere.example"})
    assert "access-control-allow-origin" not in r.headers


def test_telemetry_keeps_every_request_on_fastapis_stack(bundle_dir):
    from service.app import _telemetry

    settings = ServiceSettings(bundle=bundle_dir, otel=True)
    if not _telemetry(settings):
        pytest.skip("this FastAPI has no native telemetry")
    assert create_app(settings).hot is None


@pytest.mark.parametrize("level, shown", [("debug", True), ("info", True), ("INFO", True), ("warning", False),
                                          ("error", False), ("critical", False)])
def test_the_access_log_is_on_only_where_its_level_shows(level, shown):
    from service.cli import access_log

    assert access_log(level) is shown


def test_no_cors_unless_configured(make_client):
    plain = make_client()
    r = plain.options("/predict-region", headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"})
    assert "access-control-allow-origin" not in r.headers
    cors = make_client(cors_origins=["https://maps.example"])
    r = cors.options("/predict-region", headers={"Origin": "https://maps.example",
                                                 "Access-Control-Request-Method": "POST"})
    assert r.headers["access-control-allow-origin"] == "https://maps.example"
