"""Errors over REST: RFC 9457 ``application/problem+json``, and the Open Inference Protocol's ``{"error"}``.

Every error body is ``{"type", "title", "status", "detail", "errors": [{"field", "expected",
"received"}]}``: the client learns which field was wrong, what was expected and what came. Under
``/v2`` (:mod:`service.open_inference`) the same errors are ``{"error": "..."}`` naming the input, parameter or
model, and the protocol's 400 stands for bad input where the other routes answer 422. Every
exception (:mod:`service.exceptions`, the models' input errors) is translated here, for both.
"""

from __future__ import annotations

import json

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from models.exceptions import InputError, UnattainableCoverageError, UnknownMethodError
from service.exceptions import APIError, V2Error, shown
from service.open_inference.tensors import input_error_message
from service.state import StateUnavailable

PROBLEM = "application/problem+json"
log = logging.getLogger("lmve.service")


class FastJSONResponse(JSONResponse):
    """JSON via orjson, which also writes numpy arrays and scalars directly (10x faster than json)."""

    def render(self, content) -> bytes:
        import orjson

        return orjson.dumps(content, option=orjson.OPT_SERIALIZE_NUMPY)


def problem(status: int, title: str, detail: str, errors: list | None = None, headers: dict | None = None,
            extra: dict | None = None):
    """An RFC 9457 problem response; ``extra``: extension members beside the standard ones."""
    body = {"type": "about:blank", "title": title, "status": status, "detail": detail, "errors": errors or [],
            **(extra or {})}
    return JSONResponse(body, status_code=status, media_type=PROBLEM, headers=headers)


def is_v2(scope) -> bool:
    """Whether a request is the Open Inference Protocol's (its path, below any root path, is under ``/v2``)."""
    path, root = scope.get("path", ""), scope.get("root_path", "")
    if root and path.startswith(root + "/"):
        path = path[len(root):]
    return path == "/v2" or path.startswith("/v2/")


def v2_error(status: int, message: str, headers: dict | None = None) -> JSONResponse:
    """The protocol's error body, ``{"error": message}``; a 422 (the other routes' bad input) is its 400."""
    return JSONResponse({"error": message}, status_code=400 if status == 422 else status, headers=headers)


def error_response(scope, status: int, title: str, detail: str, headers: dict | None = None) -> JSONResponse:
    """An error in the request's own dialect: ``{"error"}`` under ``/v2``, problem+json elsewhere."""
    return v2_error(status, detail, headers) if is_v2(scope) else problem(status, title, detail, headers=headers)


def _not_json(exc: RequestValidationError) -> str | None:
    """What came, for a body that is not JSON (pydantic's or FastAPI's ``json_invalid``: the body's first
    characters as text, and where the parser stopped), or ``None``."""
    bad = next((e for e in exc.errors() if e.get("type") == "json_invalid"), None)
    if bad is None:
        return None
    raw = exc.body if isinstance(exc.body, (bytes, bytearray, str)) else bad.get("input")
    raw = raw.encode() if isinstance(raw, str) else raw
    reason = (bad.get("ctx") or {}).get("error") or bad.get("msg", "")
    return f"`{shown(raw, 60)}`, not JSON ({reason})" if raw else "an empty body"


def _loc(loc) -> str:
    parts = [p for p in loc if p != "body"]
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "body"


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _body_field(error: dict) -> str | None:
    loc = tuple(error.get("loc", ()))
    return loc[1] if len(loc) >= 2 and loc[0] == "body" and isinstance(loc[1], str) else None


def _flat_rows(errors: list[dict]) -> list[dict]:
    """``errors`` with each matrix field sent as one flat row (``"features": [x1, ..., xd]``, which pydantic
    reports as d errors "Input should be a valid array", one per number) told as one error that says to wrap
    the row. A field is folded when its every error is that one, on a number, at indices 0, 1, ..."""
    by_field: dict[str, list[dict]] = {}
    for e in errors:
        if (name := _body_field(e)) is not None:
            by_field.setdefault(name, []).append(e)
    flat = {name for name, es in by_field.items()
            if all(e.get("type") == "list_type" and len(e["loc"]) == 3 and e["loc"][2] == i and _is_number(e.get("input"))
                   for i, e in enumerate(es))}
    out, told = [], set()
    for e in errors:
        name = _body_field(e)
        if name not in flat:
            out.append(e)
        elif name not in told:
            told.add(name)
            numbers = [x.get("input") for x in by_field[name]]
            out.append({"loc": ("body", name), "type": "flat_rows", "input": numbers,
                        "msg": f"a list of rows ([[x1, ..., xd], ...]): wrap a single row in brackets, "
                               f"{{\"{name}\": [[...]]}}",
                        "received": f"{len(numbers)} number{'s' * (len(numbers) != 1)} where rows belong, "
                                    f"{shown(numbers, 60)}"})
    return out


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(V2Error)
    async def _v2(request: Request, exc: V2Error):
        return v2_error(exc.status, exc.message)

    @app.exception_handler(APIError)
    async def _api_error(request: Request, exc: APIError):
        if is_v2(request.scope):
            return v2_error(exc.status, exc.detail, exc.headers)
        return problem(exc.status, exc.title, exc.detail, exc.errors, exc.headers)

    @app.exception_handler(StateUnavailable)
    async def _state_unavailable(request: Request, exc: StateUnavailable):
        # feedback, a publish: nothing was stored (the client may send it again), or the server went away
        # while committing, when it may have been (a resend may count it twice)
        log.warning("state unavailable on %s %s: %s", request.method, request.url.path, exc.reason)
        detail = (f"the outcome is unknown (it may have been recorded; check before sending it again): {exc.reason}"
                  if exc.outcome_unknown else f"nothing was recorded: {exc.reason}")
        return error_response(request.scope, 503, "State unavailable", detail, headers={"Retry-After": "5"})

    @app.exception_handler(InputError)
    async def _input_error(request: Request, exc: InputError):
        if is_v2(request.scope):
            return v2_error(400, input_error_message(exc))
        status, title = input_error_status(exc)
        errors = [] if exc.field is None else [{"field": exc.field, "expected": exc.expected,
                                                "received": exc.received}]
        return problem(status, title, str(exc), errors)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError):
        came = _not_json(exc)
        if came is not None:  # not a document at all: the client's bytes, not its fields, are wrong
            detail = f"body: a JSON document; received {came}"
            if is_v2(request.scope):
                return v2_error(400, f"invalid request body: {detail}")
            return problem(400, "Malformed JSON", detail, [{"field": "body", "expected": "a JSON document",
                                                             "received": came}])
        errors = []
        for e in _flat_rows(list(exc.errors())):
            expected = "a finite number" if e.get("type") == "finite_number" else e.get("msg", "")
            errors.append({"field": _loc(e.get("loc", ())), "expected": expected,
                           "received": e.get("received") or shown(e.get("input"))})
        first = errors[0] if errors else {"field": "body", "expected": "a valid JSON body", "received": "?"}
        detail = f"{first['field']}: {first['expected']}; received {first['received']}"
        if is_v2(request.scope):
            return v2_error(400, f"invalid request body: {detail}")
        return problem(422, "Invalid request body", detail, errors)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException):
        headers = getattr(exc, "headers", None)
        if is_v2(request.scope):
            detail = (f"no V2 route {request.method} {request.url.path}" if exc.status_code == 404 else
                      f"{request.method} is not allowed on {request.url.path}" if exc.status_code == 405 else
                      str(exc.detail))
            return v2_error(exc.status_code, detail, headers)
        return problem(exc.status_code, _title(exc.status_code), str(exc.detail), headers=headers)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception):  # pragma: no cover - a bug, not bad input
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return error_response(request.scope, 500, "Internal Server Error",
                              "an unexpected error occurred; it has been logged")


def input_error_status(exc: InputError) -> tuple[int, str]:
    """The HTTP status and title of a model's :class:`InputError`: the one place they are chosen."""
    if isinstance(exc, UnknownMethodError):
        return 404, "Unknown method"
    if isinstance(exc, UnattainableCoverageError):
        return 422, "Coverage not attainable"
    return 422, "Invalid input"


def _title(status: int) -> str:
    from http import HTTPStatus

    try:
        return HTTPStatus(status).phrase
    except ValueError:  # pragma: no cover
        return "Error"
