"""The Open Inference Protocol (V2) over REST, in one process: metadata, health, inference equal to the
region routes, the repository extension, and every bad body answered 400/404 ``{"error"}`` naming the
input, output, parameter or model (never 500). Real clients on a real server: test_v2_e2e.py."""

from __future__ import annotations

import json
import numpy as np
import pytest
from fastapi.testclient import TestClient

from service.open_inference import tensors as v2
from service.app import create_app
from service.settings import ServiceSettings

KEY = {"x-api-key": "k"}
SITE = "site=1"


@pytest.fixture()
def v2_client(repository_copy):
    root, rows = repository_copy
    client = TestClient(create_app(ServiceSettings(model_repository=root, api_key="k", max_rows=64)))
    client.__enter__()
    yield client, root, rows
    client.__exit__(None, None, None)


def _tensor(name, values, datatype="FP64", flat=True):
    values = np.asarray(values)
    return {"name": name, "shape": list(values.shape), "datatype": datatype,
            "data": values.ravel().tolist() if flat else values.tolist()}


def _outputs(body) -> dict:
    return {o["name"]: np.asarray(o["data"]).reshape(o["shape"]) for o in body["outputs"]}


# ---------------------------------------------------------------------------- server and models
def test_server_metadata_health_and_model_metadata(v2_client):
    client, _, rows = v2_client
    assert client.get("/v2", headers=KEY).json() == {"name": "lmve", "version": "0.1.0",
                                                     "extensions": ["model_repository", "binary_tensor_data"]}
    assert client.get("/v2/health/live").json() == {"live": True}  # public, like /livez
    assert client.get("/v2/health/ready").json() == {"ready": True}
    assert client.get("/v2", headers={}).status_code == 401  # the rest is behind the key
    meta = client.get(f"/v2/models/{SITE}", headers=KEY).json()
    d = rows[SITE][0].shape[1]
    version = client.get(f"/models/{SITE}", headers=KEY).json()["version"]
    assert meta["name"] == SITE and meta["versions"] == [version] and meta["platform"] == "lmve"
    assert [(t["name"], t["datatype"], t["shape"]) for t in meta["inputs"]] == [
        ("features", "FP64", [-1, d]), ("points", "FP64", [-1, 2]), ("centers", "FP64", [-1, 2])]
    assert [(t["name"], t["datatype"], t["shape"]) for t in meta["outputs"]] == [
        ("center", "FP64", [-1, 2]), ("shape", "FP64", [-1, 2, 2]), ("volume", "FP64", [-1]),
        ("inside", "BOOL", [-1]), ("distance", "FP64", [-1]), ("p_value", "FP64", [-1]), ("typicality", "FP64", [-1])]
    assert client.get(f"/v2/models/{SITE}/versions/{version}", headers=KEY).json() == meta
    assert client.get(f"/v2/models/{SITE}/ready", headers=KEY).json() == {"name": SITE, "ready": True}
    r = client.get(f"/v2/models/{SITE}/versions/nope/ready", headers=KEY)
    assert r.status_code == 404 and r.json() == {"error": f"model {SITE!r} has no version 'nope'; it serves "
                                                          f"{version!r}"}
    r = client.get("/v2/models/elsewhere", headers=KEY)
    assert r.status_code == 404 and "'elsewhere'" in r.json()["error"] and SITE in r.json()["error"]
    r = client.get("/v2/nowhere", headers=KEY)
    assert r.status_code == 404 and r.json() == {"error": "no V2 route GET /v2/nowhere"}


# ---------------------------------------------------------------------------- inference
@pytest.mark.parametrize("flat", [True, False])
def test_infer_equals_the_region_routes(v2_client, flat):
    client, _, rows = v2_client
    X, Y = rows[SITE][0][:5], rows[SITE][1][:5]
    r = client.post(f"/v2/models/{SITE}/infer", headers=KEY,
                    json={"id": "q-7", "inputs": [_tensor("features", X, flat=flat), _tensor("points", Y, flat=flat)]})
    assert r.status_code == 200, r.text
    body = r.json()
    ref = client.post(f"/models/{SITE}/predict-region", json={"features": X.tolist()}, headers=KEY).json()
    refc = client.post(f"/models/{SITE}/contains", json={"features": X.tolist(), "points": Y.tolist()},
                       headers=KEY).json()
    assert body["model_name"] == SITE and body["id"] == "q-7" and body["model_version"] == ref["bundle_id"]
    assert [(o["name"], o["datatype"], o["shape"]) for o in body["outputs"]] == [
        ("center", "FP64", [5, 2]), ("shape", "FP64", [5, 2, 2]), ("volume", "FP64", [5]), ("inside", "BOOL", [5]),
        ("distance", "FP64", [5]), ("p_value", "FP64", [5]), ("typicality", "FP64", [5])]
    out = _outputs(body)
    np.testing.assert_array_equal(out["typicality"], [g["typicality"] for g in ref["regions"]])
    np.testing.assert_array_equal(out["typicality"], [g["typicality"] for g in refc["results"]])
    np.testing.assert_array_equal(out["center"], [g["center"] for g in ref["regions"]])
    np.testing.assert_array_equal(out["shape"], [g["shape"] for g in ref["regions"]])
    np.testing.assert_array_equal(out["volume"], [g["volume"] for g in ref["regions"]])
    assert out["inside"].tolist() == [g["inside"] for g in refc["results"]]
    np.testing.assert_array_equal(out["distance"], [g["distance"] for g in refc["results"]])
    np.testing.assert_array_equal(out["p_value"], [g["p_value"] for g in refc["results"]])
    p = body["parameters"]
    assert (p["method"], p["fallback"], p["coverage"], p["effective_coverage"], p["bundle_id"]) == (
        ref["method"], ref["fallback"], ref["coverage"], ref["effective_coverage"], ref["bundle_id"])


def test_infer_parameters_and_chosen_outputs(v2_client):
    client, _, rows = v2_client
    X = rows[SITE][0][:3]
    body = {"inputs": [_tensor("features", X)], "outputs": [{"name": "volume"}, {"name": "center"}],
            "parameters": {"coverage": 0.8, "method": "nle", "binary_data_output": False, "my_trace": "x"}}
    r = client.post(f"/v2/models/{SITE}/infer", headers=KEY, json=body)
    assert r.status_code == 200, r.text
    assert [o["name"] for o in r.json()["outputs"]] == ["volume", "center"] and "id" not in r.json()
    ref = client.post(f"/models/{SITE}/nle/predict-region", json={"features": X.tolist(), "coverage": 0.8},
                      headers=KEY).json()
    assert r.json()["parameters"]["method"] == "nle" and r.json()["parameters"]["coverage"] == 0.8
    np.testing.assert_array_equal(_outputs(r.json())["volume"], [g["volume"] for g in ref["regions"]])
    # a lower level: smaller regions (the parameter is honoured, not ignored)
    low = client.post(f"/v2/models/{SITE}/infer", headers=KEY, json={**body, "parameters": {"coverage": 0.5,
                                                                                            "method": "nle"}})
    assert np.all(_outputs(low.json())["volume"] < _outputs(r.json())["volume"])
    # integer data under an integer datatype is read as float64; the versioned route answers the same
    versioned = client.post(f"/v2/models/{SITE}/versions/{ref['bundle_id']}/infer", headers=KEY,
                            json={"inputs": [_tensor("features", np.round(X).astype(int), "INT32")]})
    plain = client.post(f"/v2/models/{SITE}/infer", headers=KEY, json={"inputs": [_tensor("features", np.round(X))]})
    assert versioned.status_code == 200 and versioned.json()["outputs"] == plain.json()["outputs"]
    text = client.get("/metrics").text
    assert 'route="/v2/models/{name}/infer",status="200"' in text and f'model="{SITE}"' in text


def _bad_bodies(d: int):
    row = [0.5] * d
    ok = {"name": "features", "shape": [1, d], "datatype": "FP64", "data": row}
    return [
        ({"inputs": [{**ok, "datatype": "BYTES"}]}, 400, "input 'features': datatype BYTES is not accepted"),
        ({"inputs": [{**ok, "datatype": "BOOL", "data": [True] * d}]}, 400, "input 'features': datatype BOOL"),
        ({"inputs": [{**ok, "datatype": "FLOAT64"}]}, 400, "input 'features': datatype 'FLOAT64' is not a V2"),
        ({"inputs": [{**ok, "data": ["a"] * d}]}, 400, "input 'features': data holds strings"),
        ({"inputs": [{**ok, "data": [None] * d}]}, 400, "input 'features': data holds non-numeric values"),
        ({"inputs": [{**ok, "shape": [2, d]}]}, 400, f"input 'features': data has {d} values but shape [2, {d}]"),
        ({"inputs": [{**ok, "shape": [d]}]}, 400, f"input 'features': shape [{d}] must be [rows, columns]"),
        ({"inputs": [{**ok, "shape": [1, d + 1], "data": row + [1.0]}]}, 400,
         f"input 'features': features has {d + 1} columns, but the bundle expects {d}"),
        ({"inputs": [{**ok, "data": [row[:1], row[1:]]}]}, 400, "input 'features': data is ragged"),
        ({"inputs": [{**ok, "data": [[row]], "shape": [1, d]}]}, 400, f"input 'features': nested data is [1, 1, {d}]"),
        ({"inputs": [{**ok, "parameters": {"binary_data_size": 8 * d}}]}, 400,
         "input 'features': parameters.binary_data_size needs the header Inference-Header-Content-Length"),
        ({"inputs": []}, 400, "input 'features' is missing"),
        ({"inputs": [{**ok, "name": "pixels"}]}, 400, "unknown input 'pixels'"),
        ({"inputs": [ok, ok]}, 400, "input 'features' is given twice"),
        ({"inputs": [ok, {**ok, "name": "points", "shape": [1, 3], "data": [0, 0, 0]}]}, 400,
         "input 'points': points has 3 columns"),
        ({"inputs": [ok, {**ok, "name": "points", "shape": [2, 2], "data": [0, 0, 0, 0]}]}, 400,
         "input 'points': features has 1 rows but points has 2"),
        ({"inputs": [ok, {**ok, "name": "centers", "shape": [1, 2], "data": [0, 0]}]}, 400,
         "input 'centers': centers: this bundle has its own centre"),
        ({"inputs": [ok], "outputs": [{"name": "area"}]}, 400, "unknown output 'area'"),
        ({"inputs": [ok], "outputs": [{"name": "inside"}]}, 400, "output 'inside' needs the input 'points'"),
        ({"inputs": [ok], "parameters": {"coverage": "high"}}, 400, "parameter 'coverage': expected a number"),
        ({"inputs": [ok], "parameters": {"coverage": True}}, 400, "parameter 'coverage': expected a number"),
        ({"inputs": [ok], "parameters": {"coverage": 1.5}}, 400, "parameter 'coverage': coverage must lie in"),
        ({"inputs": [ok], "parameters": {"method": "lmve-net"}}, 400, "parameter 'method': method 'lmve-net' is "
                                                                       "not served"),
        ({"inputs": [ok], "parameters": {"method": 3}}, 400, "parameter 'method': expected a method name"),
        ({"inputs": [{**ok, "shape": [65, d], "data": row * 65}]}, 413, "features has 65 rows; the limit is 64"),
        ({"inputs": "features"}, 400, "invalid inference request: inputs: Input should be a valid array"),
        ({"inputs": [{"name": "features", "data": row}]}, 400, "invalid inference request: inputs[0].shape: Field "
                                                               "required"),
        ({}, 400, "invalid inference request: inputs: Field required"),
        (None, 400, "invalid inference request: body: a JSON document; received an empty body"),
    ]


def test_bad_bodies_are_400_naming_the_input_never_500(v2_client):
    client, _, rows = v2_client
    d = rows[SITE][0].shape[1]
    for body, status, message in _bad_bodies(d):
        r = client.post(f"/v2/models/{SITE}/infer", headers=KEY, json=body)
        assert r.status_code == status and set(r.json()) == {"error"}, (body, r.text)
        assert message in r.json()["error"], (message, r.json())
    r = client.post(f"/v2/models/{SITE}/infer", headers=KEY, content=b"{not json")
    assert r.status_code == 400 and "invalid inference request: body: a JSON document; received `{not json`, not " \
        "JSON" in r.json()["error"]
    r = client.post(f"/v2/models/{SITE}/infer", headers={**KEY, "Inference-Header-Content-Length": "10"},
                    content=b'{"inputs":[]}\x00\x00')
    assert r.status_code == 400 and "invalid inference request: body: " in r.json()["error"]
    ok = {"inputs": [_tensor("features", rows[SITE][0][:1])]}
    r = client.post("/v2/models/elsewhere/infer", headers=KEY, json=ok)
    assert r.status_code == 404 and "no model named 'elsewhere'" in r.json()["error"]
    r = client.post(f"/v2/models/{SITE}/versions/v0/infer", headers=KEY, json=ok)
    assert r.status_code == 404 and "has no version 'v0'" in r.json()["error"]
    r = client.post(f"/v2/models/{SITE}/infer", json=ok)
    assert r.status_code == 401 and "API key" in r.json()["error"]
    r = client.get(f"/v2/models/{SITE}/infer", headers=KEY)
    assert r.status_code == 405 and r.json() == {"error": f"GET is not allowed on /v2/models/{SITE}/infer"}


# ---------------------------------------------------------------------------- repository extension
def test_repository_index_load_and_unload(v2_client):
    client, root, rows = v2_client
    index = client.post("/v2/repository/index", headers=KEY).json()  # no body at all
    versions = {m["name"]: m["version"] for m in index}
    assert [(m["name"], m["state"]) for m in index] == [("site=0", "READY"), ("site=1", "READY"), ("site=2", "READY")]
    assert client.post("/v2/repository/index", headers=KEY, json={"ready": True}).json() == index
    r = client.post(f"/v2/repository/models/{SITE}/unload", headers=KEY, content=b'{"parameters": '
                    b'{"unload_dependents": false}}')  # as tritonclient sends it: no content type
    assert r.status_code == 200 and r.json() == {"name": SITE, "unload": True}
    r = client.get(f"/v2/models/{SITE}/ready", headers=KEY)
    assert r.status_code == 503 and "UNLOADED" in r.json()["error"]
    r = client.post(f"/v2/models/{SITE}/infer", headers=KEY, json={"inputs": [_tensor("features", rows[SITE][0][:1])]})
    assert r.status_code == 503 and f"model {SITE!r} is not ready (UNLOADED)" in r.json()["error"]
    index = client.post("/v2/repository/index", headers=KEY, content=b"").json()
    assert {"name": SITE, "state": "UNLOADED", "reason": index[1]["reason"]} == index[1] and "version" not in index[1]
    assert [m["name"] for m in client.post("/v2/repository/index", headers=KEY, json={"ready": True}).json()] == [
        "site=0", "site=2"]
    assert client.get("/v2/health/ready").status_code == 200  # an operator's unload is not a fault
    r = client.post(f"/v2/repository/models/{SITE}/load", headers=KEY, content=b"{}")
    assert r.status_code == 200 and r.json() == {"name": SITE, "load": True, "version": versions[SITE]}
    assert client.get(f"/v2/models/{SITE}/ready", headers=KEY).status_code == 200
    # errors: unknown model, a bad body, no key, and a refused bundle (the previous one keeps serving)
    r = client.post("/v2/repository/models/elsewhere/unload", headers=KEY)
    assert r.status_code == 404 and "'elsewhere'" in r.json()["error"]
    r = client.post(f"/v2/repository/models/{SITE}/load", headers=KEY, content=b"[1]")
    assert r.status_code == 400 and r.json()["error"].startswith("invalid load request")
    r = client.post("/v2/repository/index", headers=KEY, json={"ready": "sometimes"})
    assert r.status_code == 400 and "ready" in r.json()["error"]
    assert client.post(f"/v2/repository/models/{SITE}/unload").status_code == 401
    (root / SITE / "ge.npz").write_bytes(b"tampered")
    r = client.post(f"/v2/repository/models/{SITE}/load", headers=KEY)
    assert r.status_code == 400 and "ge.npz" in r.json()["error"] and versions[SITE] in r.json()["error"]
    assert client.get(f"/v2/models/{SITE}/ready", headers=KEY).status_code == 200


def test_readiness_names_a_model_that_cannot_serve(repository_copy):
    root, _ = repository_copy
    (root / "site=2" / "ge.npz").write_bytes(b"tampered")
    with TestClient(create_app(ServiceSettings(model_repository=root, api_key="k"))) as client:
        r = client.get("/v2/health/ready")
        assert r.status_code == 503 and r.json()["ready"] is False and "site=2" in r.json()["error"]
        r = client.get("/v2/models/site=2", headers=KEY)
        assert r.status_code == 503 and "UNAVAILABLE" in r.json()["error"] and "ge.npz" in r.json()["error"]
        index = client.post("/v2/repository/index", headers=KEY).json()
        assert index[2]["state"] == "UNAVAILABLE" and "ge.npz" in index[2]["reason"]


def test_admin_routes_need_a_configured_key(repository_copy):
    root, _ = repository_copy
    with TestClient(create_app(ServiceSettings(model_repository=root))) as client:
        r = client.post(f"/v2/repository/models/{SITE}/unload")
        assert r.status_code == 403 and "LMVE_API_KEY" in r.json()["error"]


# ---------------------------------------------------------------------------- the codec
def test_tensor_reads_flat_and_nested_data_alike():
    flat = v2.from_json("points", "FP32", [2, 3], [1, 2, 3, 4, 5, 6.5])
    nested = v2.from_json("points", "FP64", [2, 3], [[1, 2, 3], [4, 5, 6.5]])
    for arr in (flat, nested):
        assert arr.dtype == np.float64 and arr.tolist() == [[1, 2, 3], [4, 5, 6.5]]
    assert v2.from_json("f", "FP64", [0, 4], []).shape == (0, 4)


def test_output_tensors_are_flat_row_major():
    from service.open_inference import rest

    shapes = np.arange(8.0).reshape(2, 2, 2)
    result = v2.InferResult("m", "1", None, {}, [("shape", "FP64", shapes), ("inside", "BOOL", np.array([True, False]))])
    body, header = rest.encode(result)
    out = json.loads(body)["outputs"]
    assert header is None and out[0]["shape"] == [2, 2, 2] and out[0]["data"] == list(range(8))
    assert out[1]["datatype"] == "BOOL" and out[1]["data"] == [True, False]


# ---------------------------------------------------------------------------- binary tensors
def _binary(X, header_extra: dict | None = None) -> tuple[bytes, dict]:
    raw = np.ascontiguousarray(X, "<f8").tobytes()
    head = json.dumps({"inputs": [{"name": "features", "shape": list(X.shape), "datatype": "FP64",
                                   "parameters": {"binary_data_size": len(raw)}}], **(header_extra or {})}).encode()
    return head + raw, {**KEY, "Inference-Header-Content-Length": str(len(head))}


def test_nan_in_a_binary_tensor_is_json_null_not_heard_with_the_same_warning(v2_client):
    client, _, rows = v2_client
    X = rows[SITE][0][:2].copy()
    X[0, 3] = np.nan
    body, headers = _binary(X)
    r = client.post(f"/v2/models/{SITE}/infer", content=body, headers=headers)
    assert r.status_code == 200, r.text
    as_null = [[None if np.isnan(v) else v for v in row] for row in X.tolist()]
    ref = client.post(f"/models/{SITE}/predict-region", json={"features": as_null}, headers=KEY).json()
    assert r.json()["parameters"]["warnings"] == "; ".join(ref["warnings"]) and ref["warnings"]
    np.testing.assert_array_equal(_outputs(r.json())["volume"], [g["volume"] for g in ref["regions"]])


def test_the_limits_hold_for_binary_bodies(repository_copy):
    root, rows = repository_copy
    X = rows[SITE][0]
    client = TestClient(create_app(ServiceSettings(model_repository=root, api_key="k", max_rows=64,
                                                   max_body_bytes=4096)))
    client.__enter__()
    body, headers = _binary(np.repeat(X[:1], 65, axis=0)[:, :2])  # few columns: under the byte limit
    r = client.post(f"/v2/models/{SITE}/infer", content=body, headers=headers)
    assert r.status_code == 413 and "features has 65 rows; the limit is 64" in r.json()["error"]
    body, headers = _binary(np.repeat(X[:1], 60, axis=0))  # 60 x d x 8 bytes: over 4,096
    r = client.post(f"/v2/models/{SITE}/infer", content=body, headers=headers)
    assert r.status_code == 413 and "LMVE_MAX_BODY_BYTES" in r.json()["error"]
    client.__exit__(None, None, None)
