"""Errors as RFC 9457 ``application/problem+json``.

Every error body is ``{"type", "title", "status", "detail", "errors": [{"field", "expected",
"received"}]}``: the client learns which field was wrong, what was expected and what came.
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from models.exceptions import InputError, UnattainableCoverageError, UnknownMethodError

PROBLEM = "application/problem+json"
log = logging.getLogger("lmve.service")


class APIError(Exception):
    """An error with an HTTP status, reported as problem+json."""

    def __init__(self, status: int, title: str, detail: str, *, field: str | None = None,
                 expected: str | None = None, received: str | None = None, headers: dict | None = None):
        super().__init__(detail)
        self.status, self.title, self.detail, self.headers = status, title, detail, headers
        self.errors = [] if field is None else [{"field": field, "expected": expected, "received": received}]


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


def _short(value, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _loc(loc) -> str:
    parts = [p for p in loc if p != "body"]
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "body"


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def _api_error(request: Request, exc: APIError):
        return problem(exc.status, exc.title, exc.detail, exc.errors, exc.headers)

    @app.exception_handler(InputError)
    async def _input_error(request: Request, exc: InputError):
        status, title = input_error_status(exc)
        errors = [] if exc.field is None else [{"field": exc.field, "expected": exc.expected,
                                                "received": exc.received}]
        return problem(status, title, str(exc), errors)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError):
        errors = []
        for e in exc.errors():
            expected = e.get("msg", "")
            errors.append({"field": _loc(e.get("loc", ())), "expected": expected,
                           "received": _short(e.get("input"))})
        first = errors[0] if errors else {"field": "body", "expected": "a valid JSON body", "received": "?"}
        detail = f"{first['field']}: {first['expected']}; received {first['received']}"
        return problem(422, "Invalid request body", detail, errors)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException):
        return problem(exc.status_code, _title(exc.status_code), str(exc.detail), headers=getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception):  # pragma: no cover - a bug, not bad input
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return problem(500, "Internal Server Error", "an unexpected error occurred; it has been logged")


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
