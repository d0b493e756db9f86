"""The OpenAPI document: FastAPI's routes and the hot route table (:mod:`service.routing`), with every status
and content type a request can meet.

Beyond what the routes declare, each operation documents what the layers in front of it answer:
``401`` without the API key (every path outside :data:`service.auth.PUBLIC_PATHS`, when a key is set),
``413`` for a body over the limit, ``503`` when too many requests are in flight and ``504`` past the
request timeout (every path outside :data:`service.middleware.UNLIMITED`), ``400``/``422`` for an
unparsable body. Every error is documented in its dialect: ``application/problem+json`` (the
``Problem`` schema) outside ``/v2``, the Open Inference Protocol's ``{"error"}`` as ``application/json``
under it.
"""

from __future__ import annotations

import copy

from fastapi.openapi.utils import get_openapi

from service.auth import PUBLIC_PATHS
from service.middleware import UNLIMITED
from service.schemas import Problem

PROBLEM = "application/problem+json"
GUARDS = {401: "no valid API key (X-API-Key, or Authorization: Bearer)",
          413: "the body is larger than LMVE_MAX_BODY_BYTES",
          503: "too many requests in flight (LMVE_MAX_CONCURRENCY); retry shortly",
          504: "the request took longer than LMVE_REQUEST_TIMEOUT_S"}
BODY_ERRORS = {400: "the body could not be read (not JSON, not UTF-8)",
               422: "the body does not match its schema (problem+json naming the field)"}


def _components(spec: dict, models) -> None:
    """Add the request models that routes parse themselves (their ``openapi_extra`` ``$ref`` points here)."""
    schemas = spec.setdefault("components", {}).setdefault("schemas", {})
    for m in (*models, Problem):
        schema = m.model_json_schema(ref_template="#/components/schemas/{model}")
        schemas.update(schema.pop("$defs", {}))  # nested models: components of their own
        schemas[m.__name__] = schema


def _body_ref(operation: dict) -> str | None:
    content = operation.get("requestBody", {}).get("content", {}).get("application/json", {})
    return content.get("schema", {}).get("$ref")


def _path_names_the_model(spec: dict) -> None:
    """Where the path names the model (``/models/{name}/...``), the body's ``model`` must be left out (or name
    the same one): such operations get a variant of their body schema whose ``model`` is null only."""
    schemas = spec["components"]["schemas"]
    for path, item in spec.get("paths", {}).items():
        if "{name}" not in path or path.startswith("/v2/"):
            continue
        for operation in item.values():
            ref = _body_ref(operation)
            name = ref.rsplit("/", 1)[1] if ref else None
            if name is None or "model" not in schemas.get(name, {}).get("properties", {}):
                continue
            variant = f"{name}ForModel"
            if variant not in schemas:
                schema = copy.deepcopy(schemas[name])
                schema["title"] = variant
                schema["properties"]["model"] = {"type": "null", "description": "the path names the model: leave "
                                                 "`model` out (or name the same model)"}
                schemas[variant] = schema
            operation["requestBody"]["content"]["application/json"]["schema"] = {
                "$ref": f"#/components/schemas/{variant}"}


def _error_content(v2: bool) -> dict:
    ref = "#/components/schemas/ErrorResponse" if v2 else "#/components/schemas/Problem"
    return {("application/json" if v2 else PROBLEM): {"schema": {"$ref": ref}}}


def _exact(path: str, method: str, operation: dict, api_key: bool) -> None:
    """One operation's error responses in its dialect, and the guards' and body parsers' statuses added."""
    v2 = path == "/v2" or path.startswith("/v2/")
    responses = operation.setdefault("responses", {})
    extra = {}
    if api_key and path not in PUBLIC_PATHS:
        extra[401] = GUARDS[401]
    if path not in UNLIMITED:
        extra.update({503: GUARDS[503], 504: GUARDS[504]})
        if "requestBody" in operation:
            extra[413] = GUARDS[413]
    if "requestBody" in operation or method == "post":
        extra.update({400: BODY_ERRORS[400]} if v2 else BODY_ERRORS)
    for status, description in extra.items():
        responses.setdefault(str(status), {"description": description})
    if v2:
        responses.pop("422", None)  # the protocol's bad input is a 400
    for status, response in responses.items():
        if status[0] in "45":
            response["content"] = _error_content(v2)


def _limits(spec: dict, max_boundary_points: int) -> None:
    """The configured limits where a body's schema can state them."""
    for name in ("PredictRegionRequest", "PredictRegionRequestForModel"):
        schema = spec["components"]["schemas"].get(name)
        if schema is not None:
            schema["properties"]["boundary_points"] = {
                "anyOf": [{"type": "integer", "minimum": 3, "maximum": max_boundary_points}, {"type": "null"}],
                "description": schema["properties"]["boundary_points"].get("description", "")}


def document(app, extra_routes, request_models, api_key: bool, max_boundary_points: int = 512) -> dict:
    """The app's OpenAPI document: its routes and ``extra_routes`` (documentation-only ``APIRoute``s), the
    self-parsed ``request_models`` as components, every operation made exact (see the module), and the limits
    of this service's settings (``LMVE_MAX_BOUNDARY_POINTS``)."""
    spec = get_openapi(title=app.title, version=app.version, openapi_version=app.openapi_version,
                       description=app.description, routes=[*extra_routes, *app.routes], tags=app.openapi_tags,
                       servers=app.servers)
    _components(spec, request_models)
    spec["components"]["schemas"].pop("HTTPValidationError", None)  # 422s are problem+json here
    spec["components"]["schemas"].pop("ValidationError", None)
    _path_names_the_model(spec)
    _limits(spec, max_boundary_points)
    for path, item in spec.get("paths", {}).items():
        for method, operation in item.items():
            _exact(path, method, operation, api_key)
    return spec

