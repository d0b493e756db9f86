"""``infer`` over REST, the codec alone: JSON and binary inputs decoded alike, every size mismatch named, binary
outputs laid out as the extension says."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from service.exceptions import V2Error
from service.open_inference import rest
from service.open_inference.tensors import InferResult, from_raw


def _binary(inputs: list[tuple[str, str, np.ndarray]], extra: dict | None = None) -> tuple[bytes, int]:
    header = {"inputs": [{"name": n, "datatype": t, "shape": list(a.shape),
                          "parameters": {"binary_data_size": a.nbytes}} for n, t, a in inputs], **(extra or {})}
    head = json.dumps(header).encode()
    return head + b"".join(a.tobytes() for _, _, a in inputs), len(head)


def test_binary_and_json_inputs_decode_to_the_same_call():
    X, Y = np.arange(12.0).reshape(3, 4) - 70, np.arange(6.0).reshape(3, 2)
    body, length = _binary([("features", "FP64", X), ("points", "FP32", Y.astype(np.float32))])
    call = rest.decode(body, length)
    np.testing.assert_array_equal(call.features, X)
    np.testing.assert_array_equal(call.points, Y)
    as_json = rest.decode(json.dumps({"inputs": [
        {"name": "features", "datatype": "FP64", "shape": [3, 4], "data": X.ravel().tolist()},
        {"name": "points", "datatype": "FP64", "shape": [3, 2], "data": Y.tolist()}]}).encode(), None)
    np.testing.assert_array_equal(as_json.features, call.features)
    assert call.outputs == as_json.outputs and call.binary == frozenset()


def test_bf16_fp16_and_integers_are_read_as_float64():
    values = np.array([[1.5, -2.25], [3.0, 0.5]])
    bf16 = (values.astype(np.float32).view(np.uint32) >> 16).astype("<u2")
    np.testing.assert_array_equal(from_raw("features", "BF16", [2, 2], bf16.tobytes()), values)
    np.testing.assert_array_equal(from_raw("features", "FP16", [2, 2], values.astype("<f2").tobytes()), values)
    np.testing.assert_array_equal(from_raw("features", "INT16", [2, 2], np.array([[1, -2], [3, 4]], "<i2").tobytes()),
                                  [[1, -2], [3, 4]])


@pytest.mark.parametrize("cut, size_delta, message", [
    (8, 0, "runs past the end of the body"), (0, -8, "bytes of raw data, but FP64 [3, 4] needs 96"),
    (0, 8, "runs past the end of the body")])
def test_a_size_that_disagrees_with_the_bytes_names_the_input(cut, size_delta, message):
    X = np.zeros((3, 4))
    body, length = _binary([("features", "FP64", X)])
    header = json.loads(body[:length])
    header["inputs"][0]["parameters"]["binary_data_size"] += size_delta
    head = json.dumps(header).encode()
    raw = head + X.tobytes()
    with pytest.raises(V2Error, match=re.escape(message)) as err:
        rest.decode(raw[:len(raw) - cut], len(head))
    assert err.value.status == 400 and "'features'" in err.value.detail


def test_bytes_left_after_the_inputs_and_a_bad_header_length_are_refused():
    body, length = _binary([("features", "FP64", np.zeros((1, 4)))])
    with pytest.raises(V2Error, match="8 bytes follow the last binary input"):
        rest.decode(body + b"\0" * 8, length)
    for bad in (b"x", b"-1", str(len(body) + 1).encode()):
        with pytest.raises(V2Error, match="Inference-Header-Content-Length"):
            rest.header_length(bad, len(body))
    assert rest.header_length(None, 10) is None and rest.header_length(b"7", 10) == 7


def test_binary_outputs_as_asked():
    body, length = _binary([("features", "FP64", np.zeros((2, 4)))],
                           {"outputs": [{"name": "volume", "parameters": {"binary_data": True}}, {"name": "center"}]})
    assert rest.decode(body, length).binary == frozenset({"volume"})
    body, length = _binary([("features", "FP64", np.zeros((2, 4)))], {"parameters": {"binary_data_output": True}})
    everything = rest.decode(body, length)
    assert everything.binary == frozenset(everything.outputs)
    with pytest.raises(V2Error, match="binary_data_output must be true or false"):
        rest.decode(*_binary([("features", "FP64", np.zeros((1, 4)))], {"parameters": {"binary_data_output": "yes"}}))


def test_encoded_binary_outputs_follow_the_json_header():
    volume, inside = np.array([1.5, 2.5]), np.array([True, False])
    result = InferResult("m", "v1", "q", {"method": "nle"}, [("volume", "FP64", volume), ("inside", "BOOL", inside)])
    body, length = rest.encode(result, frozenset({"volume", "inside"}))
    header = json.loads(body[:length])
    sizes = [o["parameters"]["binary_data_size"] for o in header["outputs"]]
    assert sizes == [16, 2] and header["id"] == "q" and len(body) == length + 18
    np.testing.assert_array_equal(np.frombuffer(body[length:length + 16], "<f8"), volume)
    assert body[length + 16:] == b"\x01\x00"
    json_body, none = rest.encode(result)
    assert none is None and json.loads(json_body)["outputs"][1]["data"] == [True, False]
