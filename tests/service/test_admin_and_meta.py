"""Model metadata, metrics, OpenAPI, API keys and reload."""

import shutil

import pytest

from tests.service.conftest import features

ROW = [-60.0] * 16


def test_model_metadata(client, bundle_dir):
    from models.bundle import read_manifest

    m = read_manifest(bundle_dir)
    body = client.get("/model").json()
    assert body["version"] == m["bundle_id"] and body["d"] == 16 and body["n"] == 2
    assert body["primary_method"] == "lmve" and body["coverage"] == 0.9  # the fixture forces it (--primary lmve)
    assert body["selection"] == m["selection"] and body["selection"]["rule"] == "forced"
    assert body["selection"]["order"][0] == "lmve" and set(body["selection"]["held_out"]) == set(m["methods"])
    assert body["methods"]["lmve"]["alpha_q"] == pytest.approx(m["methods"]["lmve"]["alpha_q"])
    assert body["metrics"]["ge"]["coverage"] == m["metrics"]["ge"]["coverage"]
    assert body["feature_names"][0] == "beacon_01"
    m_c = m["methods"]["lmve"]["n_calibration"]
    assert body["methods"]["lmve"]["max_coverage"] == pytest.approx(m_c / (m_c + 1))
    # the advertised level is answered; anything above it is refused
    row = body["methods"]["lmve"]["max_coverage"]
    assert client.post("/predict-region", json={"features": [ROW], "coverage": row}).status_code == 200
    assert client.post("/predict-region", json={"features": [ROW], "coverage": row + 1e-6}).status_code == 422


def test_metrics_count_requests_batches_and_model(client):
    client.post("/predict-region", json={"features": [ROW] * 3})
    client.post("/predict-region", json={"features": [ROW[:2]]})
    client.post("/nle/contains", json={"features": [ROW], "points": [[0.0, 0.0]]})
    text = client.get("/metrics").text
    # the routes that answer (plain Starlette routes, service.routing.HotRoutes) label by template
    assert 'lmve_http_requests_total{method="POST",model="synthetic",route="/{method}/contains",status="200"} 1.0' in text
    assert 'lmve_http_requests_total{method="POST",model="synthetic",route="/predict-region",status="200"} 1.0' in text
    assert 'lmve_http_requests_total{method="POST",model="synthetic",route="/predict-region",status="422"} 1.0' in text
    assert 'lmve_batch_rows_sum{model="synthetic",route="predict-region"} 3.0' in text
    assert "lmve_inference_seconds_count" in text and "lmve_model_info{" in text
    assert 'lmve_model_ready{model="synthetic"} 1.0' in text


def test_openapi_documents_routes_with_examples(client):
    spec = client.get("/openapi.json").json()
    for path in ("/predict-region", "/contains", "/{method}/predict-region", "/model",
                 "/readyz", "/admin/reload"):
        assert path in spec["paths"], path
    schema = spec["components"]["schemas"]["PredictRegionRequest"]
    assert schema["examples"][0]["features"]


def test_api_key_guards_all_but_health(make_client):
    client = make_client(api_key="s3cret")
    assert client.get("/livez").status_code == 200 and client.get("/readyz").status_code == 200
    assert client.get("/metrics").status_code == 200
    r = client.post("/predict-region", json={"features": [ROW]})
    assert r.status_code == 401 and r.headers["content-type"].startswith("application/problem+json")
    assert client.post("/predict-region", json={"features": [ROW]}, headers={"X-API-Key": "wrong"}).status_code == 401
    assert client.post("/predict-region", json={"features": [ROW]}, headers={"X-API-Key": "s3cret"}).status_code == 200
    assert client.get("/model", headers={"Authorization": "Bearer s3cret"}).status_code == 200


def test_reload_is_disabled_without_a_key(client):
    assert client.post("/admin/reload").status_code == 403


def test_reload_good_and_corrupt_bundles(make_client, bundle_dir, tmp_path, trained_synthetic):
    from models.bundle import save_bundle

    client = make_client(api_key="k")
    h = {"X-API-Key": "k"}
    v0 = client.get("/model", headers=h).json()["version"]
    assert client.post("/admin/reload").status_code == 401
    # a good new bundle (another coverage level -> other content hash)
    result, ds = trained_synthetic
    model = result.model
    other = type(model)(**{**model.__dict__, "methods": {k: v for k, v in model.methods.items() if k != "copula"}})
    save_bundle(other, tmp_path / "new", dataset=ds.info)
    r = client.post("/admin/reload", json={"bundle": str(tmp_path / "new")}, headers=h)
    assert r.status_code == 200 and r.json()["previous_version"] == v0
    v1 = r.json()["version"]
    assert v1 != v0 and client.get("/model", headers=h).json()["version"] == v1
    # a corrupt one is refused, the good one keeps serving
    bad = tmp_path / "bad"
    shutil.copytree(bundle_dir, bad)
    (bad / "ge.npz").write_bytes(b"tampered")
    r = client.post("/admin/reload", json={"bundle": str(bad)}, headers=h)
    assert r.status_code == 422 and "ge.npz does not match the manifest" in r.json()["detail"]
    assert client.get("/model", headers=h).json()["version"] == v1
    assert client.post("/predict-region", json={"features": [ROW]}, headers=h).status_code == 200
    assert 'lmve_reloads_total{model="synthetic",result="refused"} 1.0' in client.get("/metrics").text


def test_no_cors_unless_configured(make_client):
    plain = make_client()
    r = plain.options("/predict-region", headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"})
    assert "access-control-allow-origin" not in r.headers
    cors = make_client(cors_origins=["https://maps.example"])
    r = cors.options("/predict-region", headers={"Origin": "https://maps.example",
                                                 "Access-Control-Request-Method": "POST"})
    assert r.headers["access-control-allow-origin"] == "https://maps.example"


def test_api_key_is_checked_before_routing_and_docs_stay_public(make_client):
    client = make_client(api_key="s3cret")
    # an unknown path is refused for want of a key, before the router could say 404
    assert client.get("/no-such-route").status_code == 401
    assert client.get("/no-such-route", headers={"X-API-Key": "s3cret"}).status_code == 404
    assert client.post("/ge/predict-region", json={"features": [ROW]}).status_code == 401
    assert client.get("/openapi.json").status_code == 200 and client.get("/docs").status_code == 200
    assert 'lmve_rejected_total{reason="unauthorised"}' in client.get("/metrics").text


def test_request_bodies_are_documented_and_metric_labels_stay_bounded(client):
    spec = client.get("/openapi.json").json()
    for path, model in (("/predict-region", "PredictRegionRequest"), ("/contains", "ContainsRequest"),
                        ("/{method}/contains", "ContainsRequest"), ("/feedback", "FeedbackRequest"),
                        ("/admin/recalibrate", "RecalibrateRequest")):
        ref = spec["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]["$ref"]
        assert ref == f"#/components/schemas/{model}" and model in spec["components"]["schemas"]
    for method in ("FOO", "BAR"):
        client.request(method, "/predict-region")
    text = client.get("/metrics").text
    assert 'method="other"' in text and 'method="FOO"' not in text
