"""The Open Inference Protocol's ``ModelInfer`` over gRPC: a ``ModelInferRequest`` into an
:class:`~service.open_inference.tensors.InferCall`, an
:class:`~service.open_inference.tensors.InferResult` into a ``ModelInferResponse``.

Inputs come as ``raw_input_contents`` (one entry per input, in input order, as the REST binary
extension's bytes) or as typed ``contents`` (``fp64_contents`` for FP64, ``int_contents`` for INT8 to
INT32, ...; FP16 and BF16 only raw). Outputs always go back as ``raw_output_contents``. Parameters map
both ways between ``InferParameter`` and plain values (bool, int, float, str).
"""

from __future__ import annotations

import numpy as np

from service.exceptions import V2Error
from service.open_inference.pb import inference_pb2 as pb
from service.open_inference.tensors import InferCall, InferResult, call, check_header, check_input_name, from_raw

#: the ``InferTensorContents`` field that carries each datatype's typed values
CONTENTS = {"FP64": "fp64_contents", "FP32": "fp32_contents", "INT8": "int_contents", "INT16": "int_contents",
            "INT32": "int_contents", "INT64": "int64_contents", "UINT8": "uint_contents", "UINT16": "uint_contents",
            "UINT32": "uint_contents", "UINT64": "uint64_contents", "BOOL": "bool_contents", "BYTES": "bytes_contents"}


def parameters(fields) -> dict:
    """A protobuf ``map<string, InferParameter>`` as a dict of plain values."""
    out = {}
    for key, value in fields.items():
        which = value.WhichOneof("parameter_choice")
        out[key] = None if which is None else getattr(value, which)
    return out


def set_parameters(target, values: dict) -> None:
    """Write plain values into a ``map<string, InferParameter>`` (``None`` values are left out)."""
    for key, value in values.items():
        if value is None:
            continue
        if isinstance(value, bool):
            target[key].bool_param = value
        elif isinstance(value, int):
            target[key].int64_param = value
        elif isinstance(value, float):
            target[key].double_param = value
        else:
            target[key].string_param = str(value)


def _typed(name: str, datatype: str, shape, contents) -> np.ndarray:
    upper, (rows, cols) = check_header(name, datatype, shape)
    field = CONTENTS.get(upper)
    if field is None:
        raise V2Error(400, f"input {name!r}: {upper} data must come as raw_input_contents")
    values = getattr(contents, field)
    if len(values) != rows * cols:
        raise V2Error(400, f"input {name!r}: contents.{field} has {len(values)} values but shape {[rows, cols]} needs "
                           f"{rows * cols}")
    return np.asarray(values, dtype=np.float64).reshape(rows, cols)


def decode(request) -> InferCall:
    """A ``ModelInferRequest`` as an :class:`InferCall`; a 400 (INVALID_ARGUMENT) naming the input, output or
    parameter, as over REST."""
    raw = request.raw_input_contents
    if raw and len(raw) != len(request.inputs):
        raise V2Error(400, f"raw_input_contents has {len(raw)} entries for {len(request.inputs)} inputs: give one per "
                           "input, in input order")
    arrays = []
    for i, inp in enumerate(request.inputs):
        check_input_name(inp.name)
        if raw:
            if inp.HasField("contents"):
                raise V2Error(400, f"input {inp.name!r}: give raw_input_contents or contents, not both")
            arrays.append((inp.name, from_raw(inp.name, inp.datatype, inp.shape, raw[i])))
        else:
            arrays.append((inp.name, _typed(inp.name, inp.datatype, inp.shape, inp.contents)))
    return call(arrays, parameters(request.parameters), [o.name for o in request.outputs], request.id or None)


def encode(result: InferResult):
    """An :class:`InferResult` as a ``ModelInferResponse``, every output raw (little-endian; BOOL one byte)."""
    response = pb.ModelInferResponse(model_name=result.model_name, model_version=result.model_version,
                                     id=result.id or "")
    set_parameters(response.parameters, result.parameters)
    raw = []
    for name, datatype, values in result.outputs:
        response.outputs.add(name=name, datatype=datatype, shape=values.shape)
        raw.append(np.ascontiguousarray(values, dtype="<f8" if datatype == "FP64" else np.bool_).tobytes())
    response.raw_output_contents.extend(raw)
    return response
