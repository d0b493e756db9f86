"""service/metrics.py: the Prometheus families every request feeds, their labels bounded."""

from __future__ import annotations

from tests.service.conftest import features

ROW = [-60.0] * 16


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
