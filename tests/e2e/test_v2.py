"""The Open Inference Protocol (V2) on the real ``lmve-serve --model-repository DIR --workers 2``, driven
by two independent clients from the package index, not our code: NVIDIA's ``tritonclient[http]`` and
the generated ``open-inference-openapi`` client. Health, server and model metadata, the repository
index, inference with FP64 tensors (answers equal to ``POST /models/{name}/predict-region`` and
``/contains``), errors as each client reports them, and unload/load followed by both workers."""

from __future__ import annotations

import json
import shutil
import time

import httpx
import numpy as np
import pytest
import tritonclient.http as triton
from open_inference.openapi.client import OpenInferenceClient
from open_inference.openapi.errors import BadRequestError
from open_inference.openapi.types import InferenceRequest, RequestInput
from tritonclient.utils import InferenceServerException

from tests.e2e.servers import assert_answers_as_rest, free_port, start_server, wait_alive
from tests.processes import stop
from tests.e2e.servers import H, SYNC

SITES = ("site=0", "site=1", "site=2")
# every call gets its own copy of the key header H: tritonclient writes Inference-Header-Content-Length into
# the headers dict it is given (a binary request), which would then ride along on every later request


@pytest.fixture(scope="module")
def v2_server(site_repository, tmp_path_factory):
    src, rows = site_repository
    root = tmp_path_factory.mktemp("v2-e2e")
    shutil.copytree(src, root / "repo")
    port = free_port()
    proc = start_server(None, port, root / "server.log", LMVE_MODEL_REPOSITORY=str(root / "repo"), LMVE_WORKERS="2",
                        LMVE_STATE_DB=str(root / "state.sqlite"), LMVE_SYNC_INTERVAL_S=SYNC)
    try:
        wait_alive(f"http://127.0.0.1:{port}", proc, 90.0, path="/v2/health/ready")
        yield port, rows
    finally:
        stop(proc)


def _triton(port: int) -> triton.InferenceServerClient:
    return triton.InferenceServerClient(f"127.0.0.1:{port}", connection_timeout=10.0, network_timeout=30.0)


def _open_inference(port: int) -> OpenInferenceClient:
    return OpenInferenceClient(base_url=f"http://127.0.0.1:{port}",
                               httpx_client=httpx.Client(headers={**H}, timeout=30.0))


def _reference(port: int, site: str, X, Y) -> tuple[dict, dict]:
    base = f"http://127.0.0.1:{port}"
    ref = httpx.post(f"{base}/models/{site}/predict-region", json={"features": X.tolist()}, headers={**H}).json()
    refc = httpx.post(f"{base}/models/{site}/contains", json={"features": X.tolist(), "points": Y.tolist()},
                      headers={**H}).json()
    return ref, refc


@pytest.mark.slow
def test_tritonclient_health_metadata_index_and_infer(v2_server):
    port, rows = v2_server
    client = _triton(port)
    assert client.is_server_live() and client.is_server_ready()
    assert client.get_server_metadata(headers={**H}) == {"name": "lmve", "version": "0.1.0",
                                                     "extensions": ["model_repository",
                                                                                    "binary_tensor_data"]}
    index = client.get_model_repository_index(headers={**H})
    assert [(m["name"], m["state"]) for m in index] == [(s, "READY") for s in SITES]
    site = "site=1"
    X, Y = rows[site][0][:6], rows[site][1][:6]
    meta = client.get_model_metadata(site, headers={**H})
    assert meta["inputs"][0] == {"name": "features", "datatype": "FP64", "shape": [-1, X.shape[1]],
                                 "parameters": {"optional": False}}
    assert client.is_model_ready(site, headers={**H})
    features = triton.InferInput("features", list(X.shape), "FP64")
    features.set_data_from_numpy(X, binary_data=False)
    points = triton.InferInput("points", list(Y.shape), "FP64")
    points.set_data_from_numpy(Y, binary_data=False)
    result = client.infer(site, [features, points], request_id="t-1", headers={**H})
    ref, refc = _reference(port, site, X, Y)
    assert result.get_response()["id"] == "t-1" and result.get_response()["model_name"] == site
    assert_answers_as_rest(result, ref, refc)
    # requested outputs and parameters (the client's own are ignored by the server)
    chosen = client.infer(site, [features], headers={**H}, parameters={"coverage": 0.8, "trace": "abc"},
                          outputs=[triton.InferRequestedOutput("volume", binary_data=False)])
    assert [o["name"] for o in chosen.get_response()["outputs"]] == ["volume"]
    assert chosen.get_response()["parameters"]["coverage"] == 0.8


@pytest.mark.slow
def test_tritonclient_binary_tensors_in_and_out_equal_the_json_answers(v2_server):
    """tritonclient's binary tensor data extension, both ways: raw FP64 and FP32 inputs, raw outputs (its
    default), mixed with JSON outputs; every value equal to the region routes' JSON answer."""
    port, rows = v2_server
    client = _triton(port)
    site = "site=1"
    X, Y = rows[site][0][:40], rows[site][1][:40]  # over INLINE_ROWS: the thread-pool path too
    features = triton.InferInput("features", list(X.shape), "FP64")
    features.set_data_from_numpy(X, binary_data=True)
    points = triton.InferInput("points", list(Y.shape), "FP64")
    points.set_data_from_numpy(Y, binary_data=True)
    result = client.infer(site, [features, points], headers={**H})  # no outputs named: every one binary
    assert all("binary_data_size" in o["parameters"] for o in result.get_response()["outputs"])
    ref, refc = _reference(port, site, X, Y)
    assert_answers_as_rest(result, ref, refc)
    # FP32 bytes in (read as float64), one output raw and one JSON
    single = triton.InferInput("features", list(X.shape), "FP32")
    single.set_data_from_numpy(X.astype(np.float32), binary_data=True)
    mixed = client.infer(site, [single], headers={**H}, outputs=[
        triton.InferRequestedOutput("volume", binary_data=True), triton.InferRequestedOutput("center", binary_data=False)])
    outputs = {o["name"]: o for o in mixed.get_response()["outputs"]}
    assert "binary_data_size" in outputs["volume"]["parameters"] and "data" in outputs["center"]
    ref32 = httpx.post(f"http://127.0.0.1:{port}/models/{site}/predict-region", headers={**H},
                       json={"features": X.astype(np.float32).astype(np.float64).tolist()}).json()
    np.testing.assert_array_equal(mixed.as_numpy("volume"), [g["volume"] for g in ref32["regions"]])
    np.testing.assert_array_equal(mixed.as_numpy("center"), [g["center"] for g in ref32["regions"]])


def _binary_body(X: np.ndarray, size: int | None = None, datatype: str = "FP64", cut: int = 0) -> tuple[bytes, dict]:
    raw = X.astype(np.float64).tobytes()
    header = {"inputs": [{"name": "features", "shape": list(X.shape), "datatype": datatype,
                          "parameters": {"binary_data_size": len(raw) if size is None else size}}]}
    head = json.dumps(header).encode()
    body = head + raw
    return body[:len(body) - cut], {**H, "Inference-Header-Content-Length": str(len(head)),
                                    "Content-Type": "application/octet-stream"}


def test_bad_binary_bodies_are_400_naming_the_input(v2_server):
    port, rows = v2_server
    url = f"http://127.0.0.1:{port}/v2/models/site=0/infer"
    X = rows["site=0"][0][:3]
    body, headers = _binary_body(X)
    assert httpx.post(url, content=body, headers=headers).status_code == 200
    for kwargs, says in (({"size": 8 * X.size - 8}, f"{8 * X.size - 8} bytes of raw data, but FP64 [3, "),
                         ({"size": 8 * X.size + 8}, "runs past the end of the body"),
                         ({"cut": 5}, "truncated"),
                         ({"datatype": "FP32"}, f"needs {4 * X.size}"),
                         ({"datatype": "BYTES"}, "datatype BYTES is not accepted")):
        body, headers = _binary_body(X, **kwargs)
        r = httpx.post(url, content=body, headers=headers)
        assert r.status_code == 400 and r.json()["error"].startswith("input 'features': "), (kwargs, r.text)
        assert says in r.json()["error"], (kwargs, r.json())
    body, headers = _binary_body(X)
    r = httpx.post(url, content=body, headers={**headers, "Inference-Header-Content-Length": str(len(body) + 1)})
    assert r.status_code == 400 and "Inference-Header-Content-Length" in r.json()["error"]


def test_tritonclient_sees_errors_naming_the_input_or_model(v2_server):
    port, rows = v2_server
    client = _triton(port)
    X = rows["site=0"][0][:2]
    wrong = triton.InferInput("features", list(X.shape), "BYTES")
    wrong.set_data_from_numpy(X.astype(object).astype(bytes), binary_data=False)
    with pytest.raises(InferenceServerException) as err:
        client.infer("site=0", [wrong], headers={**H})
    assert err.value.status() == "400" and "input 'features': datatype BYTES" in err.value.message()
    short = triton.InferInput("features", [X.shape[0], X.shape[1] + 1], "FP64")  # binary, one column too many
    short.set_data_from_numpy(np.hstack([X, X[:, :1]]), binary_data=True)
    with pytest.raises(InferenceServerException) as err:
        client.infer("site=0", [short], headers={**H})
    assert err.value.status() == "400" and "input 'features'" in err.value.message()
    with pytest.raises(InferenceServerException) as err:
        client.get_model_metadata("elsewhere", headers={**H})
    assert err.value.status() == "404" and "'elsewhere'" in err.value.message()
    with pytest.raises(InferenceServerException) as err:
        client.unload_model("site=0")  # no key
    assert err.value.status() == "401"


def test_open_inference_client_answers_equal_the_region_route(v2_server):
    port, rows = v2_server
    client = _open_inference(port)
    client.check_server_liveness()
    client.check_server_readiness()
    assert client.read_server_metadata().extensions == ["model_repository", "binary_tensor_data"]
    site = "site=2"
    client.check_model_readiness(site)
    meta = client.read_model_metadata(site)
    assert [t.name for t in meta.outputs] == ["center", "shape", "volume", "inside", "distance", "p_value",
                                              "typicality"]
    X, Y = rows[site][0][:4], rows[site][1][:4]
    answer = client.model_infer(site, request=InferenceRequest(id="o-1", inputs=[
        RequestInput(name="features", shape=list(X.shape), datatype="FP64", data=X.tolist()),  # nested data
        RequestInput(name="points", shape=list(Y.shape), datatype="FP64", data=Y.ravel().tolist())]))
    out = {o.name: np.asarray(o.data.__root__).reshape(o.shape) for o in answer.outputs}
    ref, refc = _reference(port, site, X, Y)
    assert answer.id == "o-1" and answer.model_version == ref["bundle_id"]
    np.testing.assert_array_equal(out["center"], [g["center"] for g in ref["regions"]])
    np.testing.assert_array_equal(out["volume"], [g["volume"] for g in ref["regions"]])
    np.testing.assert_array_equal(out["distance"], [g["distance"] for g in refc["results"]])
    np.testing.assert_array_equal(out["typicality"], [g["typicality"] for g in ref["regions"]])
    with pytest.raises(BadRequestError) as err:
        client.model_infer(site, request=InferenceRequest(inputs=[
            RequestInput(name="features", shape=[1, X.shape[1] + 1], datatype="FP64", data=[0.0] * (X.shape[1] + 1))]))
    assert "input 'features'" in err.value.body["error"]


def _ready_on_both(port: int, site: str, want: bool, seconds: float = 8.0) -> None:
    """Until 20 checks in a row, each by a new tritonclient (a new connection: either worker), say ``want``."""
    deadline, streak = time.monotonic() + seconds, 0
    while time.monotonic() < deadline and streak < 20:
        client = _triton(port)
        streak = streak + 1 if client.is_model_ready(site, headers={**H}) == want else 0
        client.close()
    assert streak >= 20, f"{site} ready != {want} on some worker after {seconds} s"


def test_tritonclient_unload_and_load_reach_both_workers(v2_server):
    port, rows = v2_server
    client = _triton(port)
    site = "site=0"
    client.unload_model(site, headers={**H})
    _ready_on_both(port, site, False)
    index = {m["name"]: m for m in client.get_model_repository_index(headers={**H})}
    assert index[site]["state"] == "UNLOADED" and "version" not in index[site]
    features = triton.InferInput("features", [1, rows[site][0].shape[1]], "FP64")
    features.set_data_from_numpy(rows[site][0][:1], binary_data=False)
    with pytest.raises(InferenceServerException) as err:
        client.infer(site, [features], headers={**H})
    assert err.value.status() == "503" and "UNLOADED" in err.value.message()
    client.load_model(site, headers={**H})
    _ready_on_both(port, site, True)
    assert client.infer(site, [features], headers={**H}).as_numpy("volume").shape == (1,)
