"""The committed protobuf module is what protoc makes of the committed proto, and the messages keep the protocol's
field numbers (what travels on the wire)."""

from __future__ import annotations

from pathlib import Path

from service.open_inference.pb import inference_pb2 as pb
from service.open_inference.pb.__main__ import generate

PB = Path(pb.__file__)


def test_the_generated_module_matches_the_proto(tmp_path):
    generate(tmp_path)
    fresh = tmp_path / "service" / "open_inference" / "pb" / "inference_pb2.py"
    assert fresh.read_text() == PB.read_text(), "run: python -m service.open_inference.pb"


def test_the_wire_field_numbers_are_the_protocols():
    def numbers(message) -> dict:
        return {f.name: f.number for f in message.DESCRIPTOR.fields}

    assert numbers(pb.ModelInferRequest) == {"model_name": 1, "model_version": 2, "id": 3, "parameters": 4,
                                             "inputs": 5, "outputs": 6, "raw_input_contents": 7}
    assert numbers(pb.ModelInferResponse) == {"model_name": 1, "model_version": 2, "id": 3, "parameters": 4,
                                              "outputs": 5, "raw_output_contents": 6}
    assert numbers(pb.ModelInferRequest.InferInputTensor) == {"name": 1, "datatype": 2, "shape": 3, "parameters": 4,
                                                             "contents": 5}
    assert numbers(pb.InferTensorContents)["fp64_contents"] == 7 and numbers(pb.InferParameter) == {
        "bool_param": 1, "int64_param": 2, "string_param": 3, "double_param": 4, "uint64_param": 5}
    assert numbers(pb.RepositoryIndexResponse.ModelIndex) == {"name": 1, "version": 2, "state": 3, "reason": 4}
