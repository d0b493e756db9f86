"""The Open Inference Protocol's ``infer`` over REST: a body (JSON, or JSON then raw tensors) into an
:class:`~service.open_inference.tensors.InferCall`, and an
:class:`~service.open_inference.tensors.InferResult` back into a body.

The binary tensor data extension (Triton's, which KServe's clients speak): the request's
``Inference-Header-Content-Length`` header gives the length of the JSON header that opens the body;
each input with ``parameters.binary_data_size`` takes that many bytes, in input order, from what
follows. The answer carries an output as raw bytes when the request asks (``parameters.binary_data``
on that output, else the request's ``parameters.binary_data_output``; JSON otherwise), and then
opens with its own JSON header, whose length it sends in the same header.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import orjson

from service.exceptions import V2Error
from service.open_inference import bodies
from service.open_inference.tensors import InferCall, InferResult, call, check_input_name, from_json, from_raw

#: the binary extension's header, as ASGI spells header names (lower-case bytes)
HEADER_LENGTH = b"inference-header-content-length"
JSON, BINARY = "application/json", "application/octet-stream"


def header_length(value: bytes | str | None, body_bytes: int) -> int | None:
    """The JSON header's length from ``Inference-Header-Content-Length`` (``None``: absent, all JSON); a 400
    when it is not a length within the body."""
    if value is None:
        return None
    text = value.decode("latin-1") if isinstance(value, bytes) else value
    if not text.strip().isdigit() or int(text) > body_bytes:
        raise V2Error(400, f"header Inference-Header-Content-Length: expected the JSON header's length in bytes, "
                           f"at most the body's {body_bytes}; received {text[:40]!r}")
    return int(text)


def _binary_size(name: str, parameters: dict | None) -> int | None:
    size = (parameters or {}).get("binary_data_size")
    if size is None:
        return None
    if isinstance(size, float) and size.is_integer():  # JSON's 12.0 is the integer 12
        size = int(size)
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise V2Error(400, f"input {name!r}: parameters.binary_data_size must be a byte count (an integer >= 0); "
                           f"received {size!r}"[:300])
    return size


def _flag(parameters: dict | None, key: str, where: str) -> bool | None:
    value = (parameters or {}).get(key)
    if value is not None and not isinstance(value, bool):
        raise V2Error(400, f"{where}: parameters.{key} must be true or false; received {value!r}"[:300])
    return value


def decode(raw: bytes, length: int | None) -> InferCall:
    """An ``infer`` body as an :class:`InferCall`: all JSON (``length`` None), or a JSON header of ``length``
    bytes followed by the binary inputs; a 400 naming the input whose bytes are missing, short or extra."""
    request = bodies.parse_request(raw if length is None else raw[:length])
    view = memoryview(raw)
    offset = 0 if length is None else length
    arrays = []
    for inp in request.inputs:
        check_input_name(inp.name)
        size = _binary_size(inp.name, inp.parameters)
        if size is None:
            arrays.append((inp.name, from_json(inp.name, inp.datatype, inp.shape, inp.data)))
            continue
        if length is None:
            raise V2Error(400, f"input {inp.name!r}: parameters.binary_data_size needs the header "
                               "Inference-Header-Content-Length (the JSON header's length; the bytes follow it)")
        if inp.data is not None:
            raise V2Error(400, f"input {inp.name!r}: give `data` or `parameters.binary_data_size`, not both")
        if offset + size > len(raw):
            raise V2Error(400, f"input {inp.name!r}: binary_data_size {size} runs past the end of the body "
                               f"({len(raw) - offset} bytes left after byte {offset}): the body is truncated")
        arrays.append((inp.name, from_raw(inp.name, inp.datatype, inp.shape, view[offset:offset + size])))
        offset += size
    if length is not None and offset != len(raw):
        raise V2Error(400, f"{len(raw) - offset} bytes follow the last binary input: the binary_data_size "
                           "values do not add up to the bytes after the JSON header")
    every = _flag(request.parameters, "binary_data_output", "the request") or False
    names, binary = [], set()
    for out in request.outputs or ():
        names.append(out.name)
        own = _flag(out.parameters, "binary_data", f"output {out.name!r}")
        if own if own is not None else every:
            binary.add(out.name)
    decoded = call(arrays, request.parameters, names, request.id, frozenset(binary))
    if every and not names:  # the default outputs, each as raw bytes
        decoded = replace(decoded, binary=frozenset(decoded.outputs))
    return decoded


def encode(result: InferResult, binary: frozenset = frozenset()) -> tuple[bytes, int | None]:
    """The response body, and the length of its JSON header when outputs in ``binary`` follow it as raw
    bytes (``None``: all JSON)."""
    outputs, blobs = [], []
    for name, datatype, values in result.outputs:
        flat = np.ascontiguousarray(values)
        entry = {"name": name, "datatype": datatype, "shape": list(values.shape)}
        if name in binary:
            blob = flat.astype("<f8" if datatype == "FP64" else np.bool_, copy=False).tobytes()
            entry["parameters"] = {"binary_data_size": len(blob)}
            blobs.append(blob)
        else:
            entry["data"] = flat.reshape(-1)  # orjson writes the numpy array directly
        outputs.append(entry)
    body = {"model_name": result.model_name, "model_version": result.model_version,
            "parameters": result.parameters, "outputs": outputs}
    if result.id is not None:
        body["id"] = result.id
    header = orjson.dumps(body, option=orjson.OPT_SERIALIZE_NUMPY)
    if not blobs:
        return header, None
    return b"".join([header, *blobs]), len(header)
