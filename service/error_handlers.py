"""Errors over REST: RFC 9457 ``application/problem+json``, and the Open Inference Protocol's ``{"error"}``.

Every error body is ``{"type", "title", "status", "code", "detail", "errors": [{"field", "expected",
"received"}]}``: the client learns which field was wrong, what was expected and what came. Under
``/v2`` (:mod:`service.open_inference`) the same errors are ``{"error": "..."}`` naming the input, parameter or
model, and the protocol's 400 stands for bad input where the other routes answer 422. Every exception becomes
one :class:`~service.exceptions.APIError` (:func:`service.refusals.refusal`; FastAPI's validation errors and
Starlette's HTTP errors here) and :func:`render` writes it, the one place the two dialects differ.
"""

from __future__ import annotations

from http import HTTPStatus

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from models.exceptions import InputError
from service.exceptions import GRPC_CODES, APIError, shown
from service.refusals import refusal
from service.state import StateUnavailable

PROBLEM = "application/problem+json"


class FastJSONResponse(JSONResponse):
    """JSON via orjson, which also writes numpy arrays and scalars directly (10x faster than json)."""

    def render(self, content) -> bytes:
        import orjson

        return orjson.dumps(content, option=orjson.OPT_SERIALIZE_NUMPY)


def problem(status: int, title: str, detail: str, errors: list | None = None, headers: dict | None = None,
            extra: dict | None = None, code: str | None = None):
    """An RFC 9457 problem response; ``code``: the canonical code (``None``: the status's, as
    :class:`~service.exceptions.APIError` gives it); ``extra``: extension members beside the standard ones."""
    body = {"type": "about:blank", "title": title, "status": status,
            "code": code if code is not None else GRPC_CODES.get(status, "UNKNOWN"), "detail": detail,
            "errors": errors or [], **(extra or {})}
    return JSONResponse(body, status_code=status, media_type=PROBLEM, headers=headers)


def is_v2(scope) -> bool:
    """Whether a request is the Open Inference Protocol's (its path, below any root path, is under ``/v2``)."""
    path, root = scope.get("path", ""), scope.get("root_path", "")
    if root and path.startswith(root + "/"):
        path = path[len(root):]
    return path == "/v2" or path.startswith("/v2/")


def render(scope, err: APIError, v2: bool | None = None) -> JSONResponse:
    """``err`` in the request's dialect: ``{"error": detail}`` under ``/v2`` (a 422 is the protocol's 400),
    problem+json elsewhere.

    Parameters
    ----------
    scope : dict
        The request's ASGI scope.
    err : APIError
        The refusal.
    v2 : bool, default=None
        The dialect; ``None``: :func:`is_v2` of ``scope``.

    Returns
    -------
    JSONResponse
    """
    if is_v2(scope) if v2 is None else v2:
        return JSONResponse({"error": err.detail}, status_code=400 if err.status == 422 else err.status,
                            headers=err.headers)
    return problem(err.status, err.title, err.detail, err.errors, err.headers, code=err.code)


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


def _validation_refusal(exc: RequestValidationError, v2: bool) -> APIError:
    """A body FastAPI refused: not JSON (400 "Malformed JSON"), or fields that do not match the schema (422, each
    field in ``errors``; the Open Inference Protocol's words say "invalid request body")."""
    came = _not_json(exc)
    if came is not None:  # not a document at all: the client's bytes, not its fields, are wrong
        detail = f"body: a JSON document; received {came}"
        return APIError(400, "Malformed JSON", f"invalid request body: {detail}" if v2 else detail, field="body",
                        expected="a JSON document", received=came)
    errors = []
    for e in _flat_rows(list(exc.errors())):
        expected = "a finite number" if e.get("type") == "finite_number" else e.get("msg", "")
        errors.append({"field": _loc(e.get("loc", ())), "expected": expected,
                       "received": e.get("received") or shown(e.get("input"))})
    first = errors[0] if errors else {"field": "body", "expected": "a valid JSON body", "received": "?"}
    detail = f"{first['field']}: {first['expected']}; received {first['received']}"
    return APIError(422, "Invalid request body", f"invalid request body: {detail}" if v2 else detail, errors=errors)


def _http_refusal(request: Request, exc: StarletteHTTPException, v2: bool) -> APIError:
    """Starlette's 404 (no route) and 405 (method not allowed), the Open Inference Protocol's naming the route."""
    status, detail = exc.status_code, str(exc.detail)
    if v2 and status in (404, 405):
        detail = (f"no V2 route {request.method} {request.url.path}" if status == 404 else
                  f"{request.method} is not allowed on {request.url.path}")
    try:
        title = HTTPStatus(status).phrase
    except ValueError:  # pragma: no cover - Starlette raises HTTP statuses only
        title = "Error"
    return APIError(status, title, detail, headers=getattr(exc, "headers", None))


def install_error_handlers(app: FastAPI) -> None:
    """Answer every exception a route raises with :func:`render` of its :class:`APIError`.

    Parameters
    ----------
    app : FastAPI
        The app whose routes' exceptions are answered.
    """

    async def _refused(request: Request, exc: Exception):
        v2 = is_v2(request.scope)
        if isinstance(exc, RequestValidationError):
            err = _validation_refusal(exc, v2)
        elif isinstance(exc, StarletteHTTPException):
            err = _http_refusal(request, exc, v2)
        else:
            err = refusal(exc, v2, f"{request.method} {request.url.path}")
        return render(request.scope, err, v2)

    for kind in (APIError, InputError, StateUnavailable, RequestValidationError, StarletteHTTPException, Exception):
        app.add_exception_handler(kind, _refused)
