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


def document(app, extra_routes, request_models, api_key: bool) -> dict:
    """The app's OpenAPI document: its routes and ``extra_routes`` (documentation-only ``APIRoute``s), the
    self-parsed ``request_models`` as components, every operation made exact (see the module)."""
    spec = get_openapi(title=app.title, version=app.version, openapi_version=app.openapi_version,
                       description=app.description, routes=[*extra_routes, *app.routes], tags=app.openapi_tags,
                       servers=app.servers)
    _components(spec, request_models)
    spec["components"]["schemas"].pop("HTTPValidationError", None)  # 422s are problem+json here
    spec["components"]["schemas"].pop("ValidationError", None)
    for path, item in spec.get("paths", {}).items():
        for method, operation in item.items():
            _exact(path, method, operation, api_key)
    return spec

