"""The Open Inference Protocol's REST bodies as pydantic models, and the body parser that names the
first bad member (:func:`parse`).

The models document the routes (OpenAPI) and read the small bodies (repository index, load);
``infer`` bodies are read by :func:`parse_request` and decoded by :mod:`service.open_inference.tensors`.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from service.exceptions import V2Error, shown
from service.open_inference.tensors import INPUTS, NUMERIC, OUTPUTS
from service.schemas import DEVICE_CHARS


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")  # the protocol lets implementations add members


#: what JSON Schema cannot say of a request, and the service checks: ``data`` holds rows x columns values,
#: an input comes once, every input has as many rows as ``features``, and the bundle decides the columns
#: (``GET /v2/models/{name}``: the metadata's shapes) and whether it takes ``centers``
CHECKED = (" The service also checks what a schema cannot say: `data` holds rows x columns values, each input "
           "comes once with as many rows as `features`, and the model's metadata decides the columns and whether "
           "it takes `centers` (a 400 names the input otherwise).")
_NUMBERS = {"type": "array", "items": {"anyOf": [{"type": "number"}, {"type": "array", "items": {"type": "number"}}]}}
_DATA_OR_BYTES = {"anyOf": [{"required": ["data"]},
                            {"required": ["parameters"], "properties": {"parameters": {
                                "type": "object", "required": ["binary_data_size"]}}}]}


class RequestInput(_Open):
    model_config = ConfigDict(extra="allow", json_schema_extra=_DATA_OR_BYTES)

    name: str = Field(description="`features`, `points` or `centers`", json_schema_extra={"enum": list(INPUTS)})
    shape: list[int] = Field(description="`[rows, columns]`, e.g. `[1, d]` for one row of features",
                             json_schema_extra={"minItems": 2, "maxItems": 2, "items": {"type": "integer",
                                                                                        "minimum": 1}})
    datatype: str = Field(description="FP64 (any numeric datatype is read as float64)",
                          json_schema_extra={"enum": sorted(NUMERIC)})
    parameters: dict[str, Any] | None = Field(default=None, description="`binary_data_size`: the input's "
                                              "bytes follow the JSON header (the binary extension) instead of `data`",
                                              json_schema_extra={"properties": {"binary_data_size": {
                                                  "type": "integer", "minimum": 0}}})
    data: list[Any] | None = Field(default=None, description="the values, row-major: flat or nested (absent "
                                   "when `parameters.binary_data_size` is given)", json_schema_extra=_NUMBERS)


class RequestOutput(_Open):
    name: str = Field(description="one of center, shape, volume, inside, distance, p_value, typicality",
                      json_schema_extra={"enum": list(OUTPUTS)})
    parameters: dict[str, Any] | None = Field(default=None, description="`binary_data`: true sends this output "
                                              "as raw bytes after the JSON header (the binary extension)")


class InferenceRequest(_Open):
    model_config = ConfigDict(extra="allow", json_schema_extra={"examples": [
        {"id": "q-1", "parameters": {"coverage": 0.9},
         "inputs": [{"name": "features", "shape": [1, 16], "datatype": "FP64",
                     "data": [-62.0, -71.5, -80.2, -66.0, -90.1, -75.3, -58.9, -84.0,
                              -77.7, -69.2, -92.4, -81.3, -73.8, -88.6, -64.1, -70.0]}]}]})

    id: str | None = Field(default=None, description="echoed in the response")
    parameters: dict[str, Any] | None = Field(default=None, description="`coverage` (in (0, 1)), `method` "
                                              "(a method of the bundle) and `device` (the device that read "
                                              "the rows, for the radio watch's per-device offset); "
                                              "`binary_data_output`: true sends every output as raw bytes; "
                                              "others are ignored",
                                              json_schema_extra={"properties": {
                                                  "coverage": {"type": "number", "exclusiveMinimum": 0,
                                                               "exclusiveMaximum": 1},
                                                  "method": {"type": "string"},
                                                  "device": {"type": "string", "maxLength": DEVICE_CHARS},
                                                  "binary_data_output": {"type": "boolean"}}})
    inputs: list[RequestInput] = Field(description="`features`, and `points` for containment" + CHECKED,
                                       json_schema_extra={"contains": {"type": "object", "required": ["name"],
                                                                       "properties": {"name": {"const": "features"}}}})
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
    model_config = ConfigDict(extra="allow", strict=True)  # `ready` a JSON boolean, as the schema says

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


# ---------------------------------------------------------------------------------------- parsing
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
    if not raw.strip():
        raise V2Error(400, f"invalid {what}: body: a JSON document; received an empty body")
    try:
        return model.model_validate_json(raw)
    except ValidationError as exc:
        e = exc.errors(include_url=False)[0]
        where = _where(e.get("loc", ()))
        if e.get("type") == "json_invalid":
            reason = (e.get("ctx") or {}).get("error") or e.get("msg", "")
            raise V2Error(400, f"invalid {what}: body: a JSON document; received `{shown(raw, 60)}`, not JSON "
                               f"({reason})") from None
        raise V2Error(400, f"invalid {what}: {where}: {e.get('msg', '')}; received {shown(e.get('input'))}") from None


def parse_request(raw: bytes) -> InferenceRequest:
    """The ``infer`` body as an :class:`InferenceRequest`; a 400 naming the first bad member."""
    return parse(raw, InferenceRequest, "inference request")


