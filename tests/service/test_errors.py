"""Every bad input gets problem+json naming the field, the expected and the received; never a 500."""

import json

import pytest

from tests.service.conftest import features

ROW = [-60.0] * 16


def problem(r, status):
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    body = r.json()
    assert body["status"] == status and body["title"] and body["detail"]
    assert body["code"] == {404: "NOT_FOUND", 413: "RESOURCE_EXHAUSTED", 422: "INVALID_ARGUMENT",
                            400: "INVALID_ARGUMENT", 503: "UNAVAILABLE"}[status]
    return body


def test_wrong_feature_count(client):
    body = problem(client.post("/predict-region", json={"features": [ROW, ROW[:7]]}), 422)
    assert body["errors"][0] == {"field": "features[1]", "expected": "16 values", "received": "7 values"}
    assert "bundle expects 16" in body["detail"]
    names = client.get("/model").json()["feature_names"]
    assert f"(one per feature: {', '.join(names[:4])}, ...)" in body["detail"]


def test_wrong_point_dimension_names_the_targets(client):
    body = problem(client.post("/contains", json={"features": [ROW], "points": [[1.0, 2.0, 3.0]]}), 422)
    assert body["errors"][0] == {"field": "points[0]", "expected": "2 values", "received": "3 values"}
    targets = client.get("/model").json()["target_names"]
    assert f"(one per target: {', '.join(targets)})" in body["detail"]


@pytest.mark.parametrize("token", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_values(client, token):
    raw = '{"features": [[' + ", ".join(["-60"] * 15 + [token]) + "]]}"
    body = problem(client.post("/predict-region", content=raw, headers={"content-type": "application/json"}), 422)
    assert body["errors"][0]["field"] == "features[0][15]"
    assert body["errors"][0]["expected"] == "a finite number"


def test_empty_batch_and_batch_over_limit(make_client):
    client = make_client(max_rows=8)
    body = problem(client.post("/predict-region", json={"features": []}), 422)
    assert body["errors"][0]["received"] == "0 rows"
    body = problem(client.post("/predict-region", json={"features": [ROW] * 9}), 413)
    assert body["errors"][0] == {"field": "features", "expected": "at most 8 rows", "received": "9 rows"}


@pytest.mark.parametrize("coverage", [0, 1, 1.5, -0.2])
def test_coverage_out_of_range(client, coverage):
    body = problem(client.post("/predict-region", json={"features": [ROW], "coverage": coverage}), 422)
    assert body["errors"][0]["field"] == "coverage"


def test_unattainable_coverage_says_so(client):
    body = problem(client.post("/predict-region", json={"features": [ROW], "coverage": 0.999}), 422)
    assert "whole space" in body["detail"] and "highest attainable level" in body["detail"]


def test_unknown_method(client):
    body = problem(client.post("/copula/predict-region", json={"features": [ROW]}), 404)
    assert body["errors"][0]["received"] == "copula"
    problem(client.post("/magic/contains", json={"features": [ROW], "points": [[0, 0]]}), 404)


def test_contains_errors(client):
    body = problem(client.post("/contains", json={"features": [ROW, ROW], "points": [[1.0, 2.0]]}), 422)
    assert body["errors"][0]["field"] == "points"
    body = problem(client.post("/contains", json={"features": [ROW], "points": [[1.0, 2.0, 3.0]]}), 422)
    assert body["errors"][0] == {"field": "points[0]", "expected": "2 values", "received": "3 values"}


def test_boundary_points_range(client):
    for k in (2, 100000):
        body = problem(client.post("/predict-region", json={"features": [ROW], "boundary_points": k}), 422)
        assert body["errors"][0]["field"] == "boundary_points"


def test_schema_errors_name_the_field(client):
    body = problem(client.post("/predict-region", json={"features": [["a"] * 16]}), 422)
    assert body["errors"][0]["field"] == "features[0][0]"
    body = problem(client.post("/predict-region", json={"features": [ROW], "colour": "red"}), 422)
    assert body["errors"][0]["field"] == "colour"
    body = problem(client.post("/predict-region", json={}), 422)
    assert body["errors"][0]["field"] == "features"


def test_a_flat_row_gets_one_error_that_says_to_wrap_it(client):
    body = problem(client.post("/predict-region", json={"features": ROW}), 422)
    assert len(body["errors"]) == 1 and body["errors"][0]["field"] == "features"
    assert 'wrap a single row in brackets, {"features": [[...]]}' in body["errors"][0]["expected"]
    assert body["errors"][0]["received"].startswith("16 numbers where rows belong, [-60.0, -60.0")
    assert body["detail"].startswith("features: a list of rows")
    # the same for /contains' points, beside a right features field
    body = problem(client.post("/contains", json={"features": [ROW], "points": [1.0, 2.0]}), 422)
    assert [e["field"] for e in body["errors"]] == ["points"] and "2 numbers" in body["errors"][0]["received"]
    # anything else keeps pydantic's own errors, one per element: booleans, strings, a wrong nesting
    body = problem(client.post("/predict-region", json={"features": [True, "x"]}), 422)
    assert [e["field"] for e in body["errors"]] == ["features[0]", "features[1]"]
    body = problem(client.post("/predict-region", json={"features": [[ROW]]}), 422)
    assert body["errors"][0]["field"].startswith("features[0][0]")


def test_body_size_limit(make_client):
    client = make_client(max_body_bytes=4096)
    payload = json.dumps({"features": [ROW] * 100})
    body = problem(client.post("/predict-region", content=payload, headers={"content-type": "application/json"}), 413)
    assert "4096" in body["detail"]


def test_no_bundle_means_not_ready_but_alive(make_client, tmp_path):
    client = make_client(bundle=tmp_path / "missing")
    assert client.get("/livez").status_code == 200
    body = problem(client.get("/readyz"), 503)
    assert "does not exist" in body["detail"]
    problem(client.post("/predict-region", json={"features": [ROW]}), 503)
    problem(client.get("/model"), 503)


@pytest.mark.parametrize("raw, came", [
    (b'{"features": [[1, 2', '`{"features": [[1, 2`, not JSON (EOF while parsing a list at line 1 column 19)'),
    (b"{not json", "`{not json`, not JSON (key must be a string at line 1 column 2)"),
    (b"\xff\xfe", "not JSON"),
    (b"", "an empty body")])
def test_a_body_that_is_not_json_is_a_400_that_quotes_it_as_text(client, raw, came):
    for path in ("/predict-region", "/contains"):
        body = problem(client.post(path, content=raw, headers={"content-type": "application/json"}), 400)
        assert body["title"] == "Malformed JSON" and came in body["detail"]
        (error,) = body["errors"]
        assert error["field"] == "body" and error["expected"] == "a JSON document" and came in error["received"]
        assert "b'" not in body["detail"] and "None" not in body["detail"]
    v2 = client.post(f"/v2/models/{client.get('/model').json()['name']}/infer", content=raw)
    assert v2.status_code == 400 and came in v2.json()["error"] and "b'" not in v2.json()["error"]


def test_received_values_are_quoted_as_json(client):
    body = problem(client.post("/predict-region", content=b"null", headers={"content-type": "application/json"}), 422)
    assert body["errors"][0]["received"] == "null"
    body = problem(client.post("/predict-region", json={"features": [["a"] * 16]}), 422)
    assert body["errors"][0]["received"] == '"a"' and "'a'" not in body["detail"]
