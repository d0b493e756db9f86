"""``ModelInfer``'s codec alone: typed contents and raw bytes decode alike, parameters map both ways, outputs go raw."""

from __future__ import annotations

import numpy as np
import pytest

from service.exceptions import V2Error
from service.open_inference import grpc_codec
from service.open_inference.pb import inference_pb2 as pb
from service.open_inference.tensors import InferResult


def _request(X: np.ndarray, raw: bool, datatype: str = "FP64") -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name="m", id="r-1")
    tensor = request.inputs.add(name="features", datatype=datatype, shape=list(X.shape))
    if raw:
        request.raw_input_contents.append(X.astype("<f8").tobytes())
    else:
        getattr(tensor.contents, grpc_codec.CONTENTS[datatype]).extend(X.ravel().tolist())
    return request


def test_raw_and_typed_contents_decode_alike():
    X = np.arange(8.0).reshape(2, 4)
    raw, typed = grpc_codec.decode(_request(X, True)), grpc_codec.decode(_request(X, False))
    np.testing.assert_array_equal(raw.features, X)
    np.testing.assert_array_equal(typed.features, X)
    assert raw.id == "r-1" and raw.outputs == typed.outputs
    ints = grpc_codec.decode(_request(X.astype(int), False, "INT32"))
    np.testing.assert_array_equal(ints.features, X)


def test_contents_that_disagree_are_named():
    request = _request(np.zeros((2, 4)), False)
    request.inputs[0].contents.fp64_contents.append(1.0)
    with pytest.raises(V2Error, match="input 'features': contents.fp64_contents has 9 values"):
        grpc_codec.decode(request)
    request = _request(np.zeros((2, 4)), True)
    request.raw_input_contents.append(b"")
    with pytest.raises(V2Error, match="raw_input_contents has 2 entries for 1 inputs"):
        grpc_codec.decode(request)
    with pytest.raises(V2Error, match="FP16 data must come as raw_input_contents"):
        grpc_codec.decode(_fp16_typed())


def _fp16_typed() -> pb.ModelInferRequest:
    """FP16 has no typed field: it can only come raw."""
    request = pb.ModelInferRequest(model_name="m")
    request.inputs.add(name="features", datatype="FP16", shape=[1, 4])
    return request


def test_parameters_map_both_ways():
    values = {"method": "nle", "fallback": False, "coverage": 0.9, "rows": 3, "skip": None}
    response = pb.ModelInferResponse()
    grpc_codec.set_parameters(response.parameters, values)
    assert grpc_codec.parameters(response.parameters) == {k: v for k, v in values.items() if v is not None}
    assert response.parameters["fallback"].WhichOneof("parameter_choice") == "bool_param"


def test_outputs_go_raw_in_order():
    result = InferResult("m", "v", None, {}, [("volume", "FP64", np.array([1.0, 2.0])),
                                             ("inside", "BOOL", np.array([True, False]))])
    response = grpc_codec.encode(result)
    assert [o.name for o in response.outputs] == ["volume", "inside"] and response.id == ""
    assert np.frombuffer(response.raw_output_contents[0], "<f8").tolist() == [1.0, 2.0]
    assert response.raw_output_contents[1] == b"\x01\x00" and list(response.outputs[0].shape) == [2]


def test_the_device_parameter_is_read_and_checked():
    request = _request(np.zeros((1, 4)), True)
    request.parameters["device"].string_param = "phone-b"
    assert grpc_codec.decode(request).device == "phone-b"
    assert grpc_codec.decode(_request(np.zeros((1, 4)), True)).device is None
    request.parameters["device"].string_param = "x" * 201
    with pytest.raises(V2Error, match="parameter 'device': expected at most 200 characters; received 201"):
        grpc_codec.decode(request)
    request.parameters["device"].int64_param = 3
    with pytest.raises(V2Error, match="parameter 'device': expected a device name"):
        grpc_codec.decode(request)
