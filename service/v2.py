"""The Open Inference Protocol ("V2", KServe / Triton / MLServer) over REST: its JSON bodies and the
tensor codec between them and a model's arrays.

A V2 request names its tensors: ``features`` (FP64 ``[-1, d]``), and optionally ``points`` and
``centers`` (FP64 ``[-1, n]``). ``data`` is row-major, flat or nested; any numeric datatype is read
as float64 (FP64 is what the metadata declares), ``BOOL`` and ``BYTES`` are refused. The answer
holds ``center`` ``[-1, n]``, ``shape`` ``[-1, n, n]`` and ``volume`` ``[-1]``, and when ``points``
came, ``inside`` (BOOL), ``distance`` and ``p_value`` ``[-1]``; with a bundle's typicality step, ``typicality``
``[-1]`` (each row's conformal p-value of typicality); a request's ``outputs`` picks some.
Request ``parameters``: ``coverage`` and ``method``; the others (``binary_data_output``, a client's
own) are ignored. Binary tensor data (Triton's extension) is refused with a 400 that says how to
send JSON. Every error is :class:`V2Error`: a status and a message naming the input, output or
parameter, rendered ``{"error": "..."}`` by :mod:`service.errors`.

The spec: https://github.com/kserve/open-inference-protocol (``specification/protocol/``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

#: the V2 datatypes read as float64 (exactly, for the integer ones up to 2**53)
NUMERIC = frozenset({"FP64", "FP32", "FP16", "BF16", "INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16",
                     "UINT32", "UINT64"})
DATATYPES = NUMERIC | {"BOOL", "BYTES"}
INPUTS = ("features", "points", "centers")
REGION_OUTPUTS = ("center", "shape", "volume")
CONTAINMENT_OUTPUTS = ("inside", "distance", "p_value")
#: from either computation; in the default outputs when the bundle has the typicality step
TYPICALITY = "typicality"
OUTPUTS = REGION_OUTPUTS + CONTAINMENT_OUTPUTS + (TYPICALITY,)
REGION_OUTPUTS_SET, CONTAINMENT_OUTPUTS_SET = frozenset(REGION_OUTPUTS), frozenset(CONTAINMENT_OUTPUTS)
BINARY_HINT = ("binary tensor data is not supported: send the data as JSON (tritonclient: "
               "InferInput.set_data_from_numpy(x, binary_data=False))")


class V2Error(Exception):
    """A V2 request refused: ``status`` (400 bad input, 404 unknown model, 503 not ready) and a message
    that names the input, output, parameter or model."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


# ---------------------------------------------------------------------------------------- bodies
class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")  # the protocol lets implementations add members


class RequestInput(_Open):
    name: str = Field(description="`features`, `points` or `centers`")
    shape: list[int] = Field(description="`[rows, columns]`, e.g. `[1, d]` for one row of features")
    datatype: str = Field(description="FP64 (any numeric datatype is read as float64)")
    parameters: dict[str, Any] | None = None
    data: list[Any] = Field(description="the values, row-major: flat or nested")


class RequestOutput(_Open):
    name: str = Field(description="one of center, shape, volume, inside, distance, p_value")
    parameters: dict[str, Any] | None = None


class InferenceRequest(_Open):
    model_config = ConfigDict(extra="allow", json_schema_extra={"examples": [
        {"id": "q-1", "parameters": {"coverage": 0.9},
         "inputs": [{"name": "features", "shape": [1, 16], "datatype": "FP64",
                     "data": [-62.0, -71.5, -80.2, -66.0, -90.1, -75.3, -58.9, -84.0,
                              -77.7, -69.2, -92.4, -81.3, -73.8, -88.6, -64.1, -70.0]}]}]})

    id: str | None = Field(default=None, description="echoed in the response")
    parameters: dict[str, Any] | None = Field(default=None, description="`coverage` (in (0, 1)) and `method` "
                                              "(a method of the bundle); others are ignored")
    inputs: list[RequestInput]
    outputs: list[RequestOutput] | None = Field(default=None, description="the outputs to return (default: all "
                                                "that the inputs allow)")


class ResponseOutput(BaseModel):
    name: str
    shape: list[int]
    datatype: str
    parameters: dict[str, Any] | None = None
    data: list[Any]


class InferenceResponse(BaseModel):
    model_name: str
    model_version: str | None = None
    id: str | None = None
    parameters: dict[str, Any] | None = Field(default=None, description="method, fallback, fallback_reason, "
                                              "coverage, effective_coverage, adaptive, bundle_id")
    outputs: list[ResponseOutput]


class MetadataTensor(BaseModel):
    name: str
    datatype: str
    shape: list[int]
    parameters: dict[str, Any] | None = None


class MetadataServerResponse(BaseModel):
    name: str
    version: str
    extensions: list[str]


class MetadataModelResponse(BaseModel):
    name: str
    versions: list[str] | None = None
    platform: str
    inputs: list[MetadataTensor]
    outputs: list[MetadataTensor]
    parameters: dict[str, Any] | None = None


class RepositoryIndexRequest(_Open):
    ready: bool | None = Field(default=None, description="true: only the models that are ready")


class RepositoryModel(BaseModel):
    name: str
    version: str | None = None
    state: str = Field(description="READY, UNAVAILABLE, UNLOADED or LOADING")
    reason: str | None = None


class ErrorResponse(BaseModel):
    error: str


class LoadRequest(_Open):
    parameters: dict[str, Any] | None = None


# ---------------------------------------------------------------------------------------- metadata
def model_metadata(name: str, version: str, d: int, n: int, requires_centers: bool, primary: str,
                   coverage: float, typicality: bool = False) -> dict:
    """``GET /v2/models/{name}``: the tensors a model takes and gives."""
    def tensor(tname, shape, datatype="FP64", **params):
        return {"name": tname, "datatype": datatype, "shape": shape, "parameters": params}

    return {"name": name, "versions": [version], "platform": "lmve",
            "inputs": [tensor("features", [-1, d], optional=False),
                       tensor("points", [-1, n], optional=True),
                       tensor("centers", [-1, n], optional=not requires_centers)],
            "outputs": [tensor("center", [-1, n]), tensor("shape", [-1, n, n]), tensor("volume", [-1]),
                        tensor("inside", [-1], "BOOL", requires="points"),
                        tensor("distance", [-1], requires="points"), tensor("p_value", [-1], requires="points")]
            + ([tensor(TYPICALITY, [-1])] if typicality else []),
            "parameters": {"coverage": coverage, "primary_method": primary}}


# ---------------------------------------------------------------------------------------- requests
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

    @property
    def rows(self) -> int:
        return len(self.features)


def _where(loc) -> str:
    out = ""
    for p in loc:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "body"


def parse(raw: bytes, model: type[BaseModel], what: str, optional: bool = False):
    """A request body as ``model`` (pydantic-core's JSON parser, whatever the content type: the ecosystem's
    clients do not all send one); ``optional``: an empty body is ``None``. A 400 naming the first bad
    member otherwise."""
    if optional and not raw.strip():
        return None
    try:
        return model.model_validate_json(raw or b"null")
    except ValidationError as exc:
        e = exc.errors(include_url=False)[0]
        where = _where(e.get("loc", ()))
        got = repr(e.get("input"))
        raise V2Error(400, f"invalid {what}: {where}: {e.get('msg', '')}; received "
                           f"{got if len(got) <= 80 else got[:77] + '...'}") from None


def parse_request(raw: bytes) -> InferenceRequest:
    """The ``infer`` body as an :class:`InferenceRequest`; a 400 naming the first bad member."""
    return parse(raw, InferenceRequest, "inference request")


def tensor(inp: RequestInput) -> np.ndarray:
    """One input's ``data`` as a float64 array of its declared 2-D ``shape``; a 400 naming the input."""
    name = inp.name
    if (inp.parameters or {}).get("binary_data_size") is not None:
        raise V2Error(400, f"input {name!r}: {BINARY_HINT}")
    datatype = inp.datatype.upper()
    if datatype not in DATATYPES:
        raise V2Error(400, f"input {name!r}: datatype {inp.datatype!r} is not a V2 datatype; expected FP64")
    if datatype not in NUMERIC:
        raise V2Error(400, f"input {name!r}: datatype {inp.datatype} is not accepted; expected FP64 (any numeric "
                           "datatype is read as float64)")
    shape = inp.shape
    if len(shape) != 2 or min(shape) < 0:
        raise V2Error(400, f"input {name!r}: shape {shape} must be [rows, columns] (2 non-negative sizes)")
    try:
        arr = np.asarray(inp.data)
    except ValueError:  # ragged nesting
        raise V2Error(400, f"input {name!r}: data is ragged; expected {shape[0] * shape[1]} numbers, "
                           "row-major, flat or nested") from None
    if arr.dtype.kind not in "fiu":
        kind = {"b": "booleans", "U": "strings", "S": "strings"}.get(arr.dtype.kind, "non-numeric values")
        raise V2Error(400, f"input {name!r}: data holds {kind}; expected {datatype} numbers")
    if arr.size != shape[0] * shape[1]:
        raise V2Error(400, f"input {name!r}: data has {arr.size} values but shape {shape} needs "
                           f"{shape[0] * shape[1]}")
    if arr.ndim > 1 and arr.shape != tuple(shape):
        raise V2Error(400, f"input {name!r}: nested data is {list(arr.shape)}, but shape says {shape}")
    return arr.reshape(shape).astype(np.float64, copy=False)


def _parameter(params: dict, key: str, kind, expected: str):
    value = params.get(key)
    if value is None:
        return None
    if not isinstance(value, kind) or isinstance(value, bool):
        raise V2Error(400, f"parameter {key!r}: expected {expected}; received {value!r}"[:300])
    return value


def decode(request: InferenceRequest) -> InferCall:
    """An :class:`InferCall` from a parsed request; a 400 naming the input, output or parameter."""
    arrays: dict[str, np.ndarray] = {}
    for inp in request.inputs:
        if inp.name not in INPUTS:
            raise V2Error(400, f"unknown input {inp.name!r}; the model takes {', '.join(INPUTS)}")
        if inp.name in arrays:
            raise V2Error(400, f"input {inp.name!r} is given twice")
        arrays[inp.name] = tensor(inp)
    if "features" not in arrays:
        raise V2Error(400, "input 'features' is missing: FP64 [rows, d], one row per query")
    params = request.parameters
    coverage = method = None
    if params:
        coverage = _parameter(params, "coverage", (int, float), "a number in (0, 1)")
        method = _parameter(params, "method", str, "a method name, e.g. \"nle\"")
    points = arrays.get("points")
    if not request.outputs:
        wanted = (OUTPUTS if points is not None else REGION_OUTPUTS + (TYPICALITY,))
    else:
        wanted = []
        for out in request.outputs:
            if out.name not in OUTPUTS:
                raise V2Error(400, f"unknown output {out.name!r}; the model gives {', '.join(OUTPUTS)}")
            if out.name in CONTAINMENT_OUTPUTS and points is None:
                raise V2Error(400, f"output {out.name!r} needs the input 'points' (FP64 [rows, n])")
            if out.name not in wanted:
                wanted.append(out.name)
        wanted = tuple(wanted)
    containment = not CONTAINMENT_OUTPUTS_SET.isdisjoint(wanted)
    return InferCall(features=arrays["features"], points=points, centers=arrays.get("centers"),
                     coverage=None if coverage is None else float(coverage), method=method, id=request.id,
                     outputs=wanted, containment=containment,
                     regions=not REGION_OUTPUTS_SET.isdisjoint(wanted) or (TYPICALITY in wanted and not containment),
                     named=bool(request.outputs))


# ---------------------------------------------------------------------------------------- responses
def output(name: str, values: np.ndarray, datatype: str = "FP64") -> dict:
    """One output tensor, its data flat and row-major (orjson writes the numpy array directly)."""
    return {"name": name, "datatype": datatype, "shape": list(values.shape),
            "data": np.ascontiguousarray(values).reshape(-1)}
