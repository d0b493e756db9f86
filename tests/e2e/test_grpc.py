"""The Open Inference Protocol over gRPC on the real ``lmve-serve --model-repository DIR --grpc-port P
--workers 2``, driven by NVIDIA's ``tritonclient[grpc]`` (not our code): live, ready, server and model
metadata, the repository index, inference on two models equal to the REST answers (raw and typed
contents), and every refusal as the status code of the REST answer's meaning, with its words."""

from __future__ import annotations

import shutil

import grpc
import httpx
import numpy as np
import pytest
import tritonclient.grpc as tg
from tritonclient.utils import InferenceServerException

from tests.processes import stop
from tests.e2e.servers import KEY, SYNC, assert_answers_as_rest, free_port, start_server, wait_alive

H = {"x-api-key": KEY}


@pytest.fixture(scope="module")
def grpc_server(site_repository, tmp_path_factory):
    src, rows = site_repository
    root = tmp_path_factory.mktemp("grpc-e2e")
    shutil.copytree(src, root / "repo")
    port, grpc_port = free_port(), free_port()
    proc = start_server(None, port, root / "server.log", LMVE_MODEL_REPOSITORY=str(root / "repo"), LMVE_WORKERS="2",
                        LMVE_STATE_DB=str(root / "state.sqlite"), LMVE_SYNC_INTERVAL_S=SYNC,
                        LMVE_GRPC_PORT=str(grpc_port), LMVE_MAX_BODY_BYTES="200000", LMVE_MAX_ROWS="64")
    try:
        wait_alive(f"http://127.0.0.1:{port}", proc, 90.0, path="/v2/health/ready")
        yield port, grpc_port, rows, root / "server.log"
    finally:
        stop(proc)


def _client(grpc_port: int) -> tg.InferenceServerClient:
    return tg.InferenceServerClient(f"127.0.0.1:{grpc_port}")


def _rest(port: int, site: str, X, Y=None) -> dict:
    base = f"http://127.0.0.1:{port}/models/{site}"
    if Y is None:
        return httpx.post(f"{base}/predict-region", json={"features": X.tolist()}, headers=H).json()
    return httpx.post(f"{base}/contains", json={"features": X.tolist(), "points": Y.tolist()}, headers=H).json()


def _input(name: str, values: np.ndarray, datatype: str = "FP64") -> tg.InferInput:
    tensor = tg.InferInput(name, list(values.shape), datatype)
    tensor.set_data_from_numpy(values)
    return tensor


@pytest.mark.slow
def test_tritonclient_grpc_health_metadata_index_and_infer_on_two_models(grpc_server):
    port, grpc_port, rows, _ = grpc_server
    client = _client(grpc_port)
    assert client.is_server_live() and client.is_server_ready()  # the probes need no key
    meta = client.get_server_metadata(headers=H)
    assert (meta.name, list(meta.extensions)) == ("lmve", ["model_repository", "binary_tensor_data"])
    index = client.get_model_repository_index(headers=H)
    assert [(m.name, m.state) for m in index.models] == [(f"site={k}", "READY") for k in range(3)]
    for site in ("site=0", "site=2"):
        X, Y = rows[site][0][:40], rows[site][1][:40]  # over INLINE_ROWS: the thread pool too
        assert client.is_model_ready(site, headers=H)
        meta = client.get_model_metadata(site, headers=H)
        assert meta.inputs[0].name == "features" and list(meta.inputs[0].shape) == [-1, X.shape[1]]
        assert [o.name for o in meta.outputs][-1] == "typicality"
        result = client.infer(site, [_input("features", X), _input("points", Y)], headers=H, request_id="g-1")
        ref, refc = _rest(port, site, X), _rest(port, site, X, Y)
        response = result.get_response()
        assert response.id == "g-1" and response.model_name == site and response.model_version == ref["bundle_id"]
        assert_answers_as_rest(result, ref, refc)
        assert response.parameters["method"].string_param == ref["method"]
        assert response.parameters["coverage"].double_param == ref["coverage"]
    # parameters and chosen outputs; the versioned model answers the same
    site = "site=1"
    X = rows[site][0][:5]
    version = _rest(port, site, X)["bundle_id"]
    chosen = client.infer(site, [_input("features", X)], headers=H, model_version=version,
                          parameters={"coverage": 0.8, "method": "ge", "trace": "abc"},
                          outputs=[tg.InferRequestedOutput("volume")])
    ref = httpx.post(f"http://127.0.0.1:{port}/models/{site}/ge/predict-region", headers=H,
                     json={"features": X.tolist(), "coverage": 0.8}).json()
    assert [o.name for o in chosen.get_response().outputs] == ["volume"]
    np.testing.assert_array_equal(chosen.as_numpy("volume"), [g["volume"] for g in ref["regions"]])
    # FP32 raw bytes in, read as float64
    single = client.infer(site, [_input("features", X.astype(np.float32), "FP32")], headers=H)
    ref32 = httpx.post(f"http://127.0.0.1:{port}/models/{site}/predict-region", headers=H,
                       json={"features": X.astype(np.float32).astype(np.float64).tolist()}).json()
    np.testing.assert_array_equal(single.as_numpy("volume"), [g["volume"] for g in ref32["regions"]])
    # the call counted by the worker that served it (each scrape, a new connection, may reach either worker)
    series = 'lmve_grpc_requests_total{code="OK",model="site=1",rpc="ModelInfer"}'
    assert any(series in httpx.get(f"http://127.0.0.1:{port}/metrics").text for _ in range(30))


def test_typed_contents_answer_as_raw_bytes_do(grpc_server):
    """A client that sends ``contents.fp64_contents`` instead of raw bytes (the protocol allows either)."""
    from service.open_inference.pb import inference_pb2 as pb

    port, grpc_port, rows, _ = grpc_server
    X = rows["site=0"][0][:3]
    request = pb.ModelInferRequest(model_name="site=0")
    request.inputs.add(name="features", datatype="FP64", shape=list(X.shape)).contents.fp64_contents.extend(X.ravel())
    with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
        infer = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer",
                                    request_serializer=pb.ModelInferRequest.SerializeToString,
                                    response_deserializer=pb.ModelInferResponse.FromString)
        response = infer(request, metadata=tuple(H.items()))
    names = [o.name for o in response.outputs]
    volume = np.frombuffer(response.raw_output_contents[names.index("volume")], "<f8")
    np.testing.assert_array_equal(volume, [g["volume"] for g in _rest(port, "site=0", X)["regions"]])


def test_refusals_are_status_codes_with_the_rest_words(grpc_server):
    port, grpc_port, rows, _ = grpc_server
    client = _client(grpc_port)
    X = rows["site=0"][0][:2]

    def refused(call) -> InferenceServerException:
        with pytest.raises(InferenceServerException) as err:
            call()
        return err.value

    err = refused(lambda: client.infer("site=0", [_input("features", X)]))  # no key
    assert err.status() == "StatusCode.UNAUTHENTICATED" and "API key" in err.message()
    err = refused(lambda: client.infer("site=0", [_input("features", X)], headers={"x-api-key": "wrong"}))
    assert err.status() == "StatusCode.UNAUTHENTICATED"
    err = refused(lambda: client.infer("elsewhere", [_input("features", X)], headers=H))
    assert err.status() == "StatusCode.NOT_FOUND" and "no model named 'elsewhere'" in err.message()
    err = refused(lambda: client.get_model_metadata("site=0", model_version="v0", headers=H))
    assert err.status() == "StatusCode.NOT_FOUND" and "has no version 'v0'" in err.message()
    wide = np.hstack([X, X[:, :1]])
    err = refused(lambda: client.infer("site=0", [_input("features", wide)], headers=H))
    assert err.status() == "StatusCode.INVALID_ARGUMENT" and err.message().startswith("input 'features': ")
    err = refused(lambda: client.infer("site=0", [_input("features", X), _input("pixels", X)], headers=H))
    assert err.status() == "StatusCode.INVALID_ARGUMENT" and "unknown input 'pixels'" in err.message()
    err = refused(lambda: client.infer("site=0", [_input("features", X)], headers=H, parameters={"coverage": "high"}))
    assert err.status() == "StatusCode.INVALID_ARGUMENT" and "parameter 'coverage'" in err.message()
    many = np.repeat(X, 40, axis=0)  # 80 rows, over LMVE_MAX_ROWS=64
    err = refused(lambda: client.infer("site=0", [_input("features", many)], headers=H))
    assert err.status() == "StatusCode.RESOURCE_EXHAUSTED" and "the limit is 64" in err.message()
    huge = np.zeros((30_000, X.shape[1]))  # over LMVE_MAX_BODY_BYTES=200000
    err = refused(lambda: client.infer("site=0", [_input("features", huge)], headers=H))
    assert err.status() == "StatusCode.RESOURCE_EXHAUSTED"
