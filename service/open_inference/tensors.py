"""The Open Inference Protocol's tensors: what a model of this service takes and gives, and the codec
between a request's tensors (JSON ``data``, raw bytes) and the arrays a model computes on.

Inputs: ``features`` (FP64 ``[rows, d]``), and optionally ``points`` and ``centers`` (FP64
``[rows, n]``). JSON ``data`` is row-major, flat or nested; raw bytes (REST's binary extension, gRPC's
``raw_input_contents``) are little-endian and row-major. Any numeric datatype is read as float64 (FP64
is what the metadata declares); ``BOOL`` and ``BYTES`` are refused. Outputs: the fields of the table of
answers (:mod:`models.answers`) that declare a tensor: ``center`` ``[rows, n]``, ``shape`` ``[rows, n, n]``,
``volume`` ``[rows]``; with ``points``, ``inside`` (BOOL), ``distance`` and ``p_value`` ``[rows]``; with a
bundle's typicality step, ``typicality`` ``[rows]``. A request's
``outputs`` picks some; its ``parameters`` ``coverage``, ``method`` and ``device`` (the device that read the
rows, for the radio watch's per-device offset: at most :data:`service.schemas.DEVICE_CHARS` characters) are
read, the others ignored.
Every refusal is a :class:`~service.exceptions.V2Error` (400) naming the input, output or parameter.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from models import answers
from service.exceptions import V2Error
from service.schemas import DEVICE_CHARS

#: the V2 datatypes read as float64 (exactly, for the integer ones up to 2**53)
NUMERIC = frozenset({"FP64", "FP32", "FP16", "BF16", "INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16",
                     "UINT32", "UINT64"})
DATATYPES = NUMERIC | {"BOOL", "BYTES"}
#: the little-endian numpy type of each numeric datatype's raw bytes (BF16: the upper half of a float32)
RAW_DTYPES = {"FP64": "<f8", "FP32": "<f4", "FP16": "<f2", "BF16": "<u2", "INT8": "i1", "INT16": "<i2",
              "INT32": "<i4", "INT64": "<i8", "UINT8": "u1", "UINT16": "<u2", "UINT32": "<u4", "UINT64": "<u8"}
INPUTS = ("features", "points", "centers")
#: from either computation; in the default outputs when the bundle has the typicality step
TYPICALITY = "typicality"
#: the output tensors: the fields of the table of answers with a tensor, in its order
OUTPUTS = answers.tensor_names()
REGION_OUTPUTS = tuple(name for name in answers.tensor_names(answers.REGION) if name != TYPICALITY)
CONTAINMENT_OUTPUTS = tuple(name for name in answers.tensor_names(answers.CONTAINS) if name != TYPICALITY)
REGION_OUTPUTS_SET, CONTAINMENT_OUTPUTS_SET = frozenset(REGION_OUTPUTS), frozenset(CONTAINMENT_OUTPUTS)


@dataclass(frozen=True, slots=True)
class InferCall:
    """A decoded ``infer`` request: the arrays, the parameters that matter and the outputs wanted."""

    features: np.ndarray
    points: np.ndarray | None
    centers: np.ndarray | None
    coverage: float | None
    method: str | None
    id: str | None
    outputs: tuple[str, ...]
    regions: bool  # an output of predict_region is wanted
    containment: bool  # an output of assess is wanted
    #: the request named its outputs (``typicality`` then must be available); else the defaults
    named: bool = False
    #: the outputs to send as raw bytes (REST's binary extension); gRPC sends every output raw
    binary: frozenset = frozenset()
    #: the device that read the rows (parameter ``device``), as REST's ``device`` field
    device: str | None = None

    @property
    def rows(self) -> int:
        return len(self.features)


def check_header(name: str, datatype: str, shape) -> tuple[str, tuple[int, int]]:
    """An input's datatype (upper case) and 2-D shape, checked: a 400 naming the input otherwise."""
    upper = datatype.upper()
    if upper not in DATATYPES:
        raise V2Error(400, f"input {name!r}: datatype {datatype!r} is not a V2 datatype; expected FP64")
    if upper not in NUMERIC:
        raise V2Error(400, f"input {name!r}: datatype {datatype} is not accepted; expected FP64 (any numeric "
                           "datatype is read as float64)")
    shape = list(shape)
    if len(shape) != 2 or min(shape) < 0:
        raise V2Error(400, f"input {name!r}: shape {shape} must be [rows, columns] (2 non-negative sizes)")
    return upper, (shape[0], shape[1])


def from_json(name: str, datatype: str, shape, data) -> np.ndarray:
    """One input's JSON ``data`` as a float64 array of its declared 2-D ``shape``; a 400 naming the input."""
    datatype, shape = check_header(name, datatype, shape)
    if data is None:
        raise V2Error(400, f"input {name!r}: no data: give `data`, or `parameters.binary_data_size` with the "
                           "bytes after the JSON header (Inference-Header-Content-Length)")
    try:
        arr = np.asarray(data)
    except ValueError:  # ragged nesting
        raise V2Error(400, f"input {name!r}: data is ragged; expected {shape[0] * shape[1]} numbers, "
                           "row-major, flat or nested") from None
    if arr.dtype.kind not in "fiu":
        kind = {"b": "booleans", "U": "strings", "S": "strings"}.get(arr.dtype.kind, "non-numeric values")
        raise V2Error(400, f"input {name!r}: data holds {kind}; expected {datatype} numbers")
    if arr.size != shape[0] * shape[1]:
        raise V2Error(400, f"input {name!r}: data has {arr.size} values but shape {list(shape)} needs "
                           f"{shape[0] * shape[1]}")
    if arr.ndim > 1 and arr.shape != shape:
        raise V2Error(400, f"input {name!r}: nested data is {list(arr.shape)}, but shape says {list(shape)}")
    return arr.reshape(shape).astype(np.float64, copy=False)


def from_raw(name: str, datatype: str, shape, raw) -> np.ndarray:
    """One input's raw little-endian row-major bytes (``bytes`` or a ``memoryview``) as a float64 array of
    its 2-D ``shape``, without a copy for FP64; a 400 naming the input when the size disagrees."""
    datatype, shape = check_header(name, datatype, shape)
    dtype = np.dtype(RAW_DTYPES[datatype])
    need = shape[0] * shape[1] * dtype.itemsize
    if len(raw) != need:
        raise V2Error(400, f"input {name!r}: {len(raw)} bytes of raw data, but {datatype} {list(shape)} needs "
                           f"{need}")
    arr = np.frombuffer(raw, dtype=dtype).reshape(shape)
    if datatype == "BF16":  # bfloat16: the upper 16 bits of a float32
        arr = (arr.astype(np.uint32) << 16).view(np.float32)
    return arr.astype(np.float64, copy=False)


def _parameter(params: dict, key: str, kind, expected: str):
    value = params.get(key)
    if value is None:
        return None
    if not isinstance(value, kind) or isinstance(value, bool):
        raise V2Error(400, f"parameter {key!r}: expected {expected}; received {value!r}"[:300])
    return value


def call(arrays: list[tuple[str, np.ndarray]], parameters: dict | None, outputs: list[str] | None,
         id: str | None, binary: frozenset = frozenset()) -> InferCall:
    """An :class:`InferCall` from the decoded inputs ``(name, array)`` in request order, the request's
    parameters, the names of the outputs it asks for (``None`` or empty: the defaults) and its id; a 400
    naming an unknown, repeated or missing input, a bad parameter or an unknown output."""
    found: dict[str, np.ndarray] = {}
    for name, arr in arrays:
        if name in found:
            raise V2Error(400, f"input {name!r} is given twice")
        found[name] = arr
    if "features" not in found:
        raise V2Error(400, "input 'features' is missing: FP64 [rows, d], one row per query")
    coverage = method = device = None
    if parameters:
        coverage = _parameter(parameters, "coverage", (int, float), "a number in (0, 1)")
        method = _parameter(parameters, "method", str, "a method name, e.g. \"nle\"")
        device = _parameter(parameters, "device", str, f"a device name of at most {DEVICE_CHARS} characters")
        if device is not None and len(device) > DEVICE_CHARS:
            raise V2Error(400, f"parameter 'device': expected at most {DEVICE_CHARS} characters; received "
                               f"{len(device)}")
    points = found.get("points")
    if not outputs:
        wanted = (OUTPUTS if points is not None else REGION_OUTPUTS + (TYPICALITY,))
    else:
        wanted = []
        for name in outputs:
            if name not in OUTPUTS:
                raise V2Error(400, f"unknown output {name!r}; the model gives {', '.join(OUTPUTS)}")
            if name in CONTAINMENT_OUTPUTS and points is None:
                raise V2Error(400, f"output {name!r} needs the input 'points' (FP64 [rows, n])")
            if name not in wanted:
                wanted.append(name)
        wanted = tuple(wanted)
    containment = not CONTAINMENT_OUTPUTS_SET.isdisjoint(wanted)
    return InferCall(features=found["features"], points=points, centers=found.get("centers"),
                     coverage=None if coverage is None else float(coverage), method=method, id=id,
                     outputs=wanted, containment=containment,
                     regions=not REGION_OUTPUTS_SET.isdisjoint(wanted) or (TYPICALITY in wanted and not containment),
                     named=bool(outputs), binary=binary, device=device)


def check_input_name(name: str) -> None:
    """A 400 for an input the model does not take."""
    if name not in INPUTS:
        raise V2Error(400, f"unknown input {name!r}; the model takes {', '.join(INPUTS)}")


def datatype_of(name: str) -> str:
    """An output's datatype (the table of answers')."""
    return answers.BY_NAME[name].tensor[0]


@dataclass(frozen=True, slots=True)
class InferResult:
    """A computed ``infer`` answer, protocol-free: the outputs ``(name, datatype, array)`` in the order
    asked, the answer's parameters, and the model, version and request id it answers."""

    model_name: str
    model_version: str
    id: str | None
    parameters: dict
    outputs: list[tuple[str, str, np.ndarray]]


def input_error_message(exc) -> str:
    """A model's :class:`~models.exceptions.InputError` in the protocol's words: the input or parameter it
    concerns, then the message."""
    root = (exc.field or "").split("[")[0]
    if not root:
        return str(exc)
    return f"{'input' if root in INPUTS else 'parameter'} {root!r}: {exc}"
