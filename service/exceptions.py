"""The service's exceptions, free of any protocol: each carries a status and the words a client reads.

The status is HTTP's (400, 401, 404, 413, 422, 503, ...); :mod:`service.error_handlers` renders it for REST
(problem+json, or the Open Inference Protocol's ``{"error"}`` under ``/v2``) and
:mod:`service.grpc_endpoint` as the gRPC status code of the same meaning (:data:`GRPC_CODES`).
"""

from __future__ import annotations

import json


class APIError(Exception):
    """A refused request: ``status``, a short ``title``, a ``detail`` naming what was wrong, and for a field
    the ``errors`` entry ``{"field", "expected", "received"}``; ``headers`` go with an HTTP answer."""

    def __init__(self, status: int, title: str, detail: str, *, field: str | None = None,
                 expected: str | None = None, received: str | None = None, headers: dict | None = None):
        super().__init__(detail)
        self.status, self.title, self.detail, self.headers = status, title, detail, headers
        self.errors = [] if field is None else [{"field": field, "expected": expected, "received": received}]


class V2Error(Exception):
    """An Open Inference Protocol request refused: ``status`` (400 bad input, 404 unknown model or version,
    503 not ready) and a message that names the input, output, parameter or model."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


#: HTTP status -> the gRPC status code name of the same meaning (grpc.StatusCode's member names)
GRPC_CODES = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
              409: "ABORTED", 413: "RESOURCE_EXHAUSTED", 422: "INVALID_ARGUMENT", 500: "INTERNAL",
              503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED"}


def shown(value, limit: int = 80) -> str:
    """``value`` as an error message quotes it, in at most ``limit`` characters: as JSON writes it (``null``,
    ``"a"``, ``[1.0]``), bytes as the text they hold; never a Python literal (``None``, ``b'...'``)."""
    if isinstance(value, (bytes, bytearray)):
        text = bytes(value).decode("utf-8", errors="replace")
    else:
        try:
            text = json.dumps(value)
        except (TypeError, ValueError):
            text = str(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
