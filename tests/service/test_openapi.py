"""service.openapi: every operation's errors in its dialect, the guards' statuses documented where they apply, a
path that names the model forbidding the body's `model`, the settings' limits in the schema."""

from __future__ import annotations

from service.app import create_app
from service.auth import PUBLIC_PATHS
from service.middleware import UNLIMITED
from service.settings import ServiceSettings


def _spec(bundle_dir, **settings) -> dict:
    return create_app(ServiceSettings(bundle=bundle_dir, **settings)).openapi()


def test_errors_are_documented_in_each_dialect_with_the_guards_statuses(bundle_dir):
    spec = _spec(bundle_dir, api_key="k")
    operations = [(path, method, op) for path, item in spec["paths"].items() for method, op in item.items()]
    assert len(operations) > 30
    for path, method, op in operations:
        v2 = path.startswith("/v2")
        for status, response in op["responses"].items():
            if status[0] in "45":
                (media, content), = response["content"].items()
                assert media == ("application/json" if v2 else "application/problem+json"), (path, status)
                assert content["schema"]["$ref"].endswith("ErrorResponse" if v2 else "Problem")
        statuses = set(op["responses"])
        assert ("401" in statuses) == (path not in PUBLIC_PATHS), path
        assert {"503", "504"} <= statuses or path in UNLIMITED, path
        if "requestBody" in op:
            assert "413" in statuses and "400" in statuses, path
        assert "422" not in statuses or not v2, path
    assert "401" not in _spec(bundle_dir)["paths"]["/predict-region"]["post"]["responses"]  # no key, no 401


def test_a_path_naming_the_model_takes_no_model_in_the_body(bundle_dir):
    spec = _spec(bundle_dir, max_boundary_points=100)
    schemas = spec["components"]["schemas"]

    def body(path):
        return spec["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]["$ref"]

    assert body("/predict-region").endswith("/PredictRegionRequest")
    assert body("/models/{name}/{method}/predict-region").endswith("/PredictRegionRequestForModel")
    assert body("/models/{name}/feedback").endswith("/FeedbackRequestForModel")
    assert schemas["ContainsRequestForModel"]["properties"]["model"]["type"] == "null"
    assert schemas["PredictRegionRequest"]["properties"]["model"] != {"type": "null"}
    bounds = schemas["PredictRegionRequest"]["properties"]["boundary_points"]["anyOf"][0]
    assert (bounds["minimum"], bounds["maximum"]) == (3, 100)
    geo = spec["paths"]["/predict-region"]["post"]["responses"]["200"]["content"]
    assert set(geo) == {"application/json", "application/geo+json"}


def test_openapi_documents_routes_with_examples(client):
    spec = client.get("/openapi.json").json()
    for path in ("/predict-region", "/contains", "/{method}/predict-region", "/model",
                 "/readyz", "/admin/reload"):
        assert path in spec["paths"], path
    schema = spec["components"]["schemas"]["PredictRegionRequest"]
    assert schema["examples"][0]["features"]
