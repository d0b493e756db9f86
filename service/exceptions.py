"""The service's one error type, free of any protocol: a status, a code and the words a client reads.

:class:`APIError` is every refusal: its ``status`` is HTTP's (400, 401, 404, 413, 422, 503, ...), its ``code``
the canonical code of the same meaning (``INVALID_ARGUMENT``, ``NOT_FOUND``: :data:`GRPC_CODES`, gRPC's status
names). :mod:`service.refusals` turns the other exceptions a request can end in (a model's input error, an
unreachable state, a timeout) into one; each protocol then renders it once: :mod:`service.error_handlers` as
problem+json, or the Open Inference Protocol's ``{"error"}`` under ``/v2``, and :mod:`service.grpc_endpoint`
as a gRPC status.
"""

from __future__ import annotations

import json
from http import HTTPStatus

#: HTTP status -> the canonical code of the same meaning (grpc.StatusCode's member names)
GRPC_CODES = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
              409: "ABORTED", 413: "RESOURCE_EXHAUSTED", 415: "INVALID_ARGUMENT", 422: "INVALID_ARGUMENT",
              500: "INTERNAL", 503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED"}


class APIError(Exception):
    """A refused request.

    Parameters
    ----------
    status : int
        The HTTP status.
    title : str
        A short summary (problem+json's ``title``).
    detail : str
        What was wrong, naming the field, input or model.
    field, expected, received : str, default=None
        For a field: the ``errors`` entry ``{"field", "expected", "received"}``.
    errors : list of dict, default=None
        Several such entries at once (a body with several bad fields), instead of ``field``.
    headers : dict, default=None
        Headers that go with an HTTP answer (``Retry-After``).
    code : str, default=None
        The canonical code; ``None``: the status's (:data:`GRPC_CODES`, ``UNKNOWN`` for others).
    """

    def __init__(self, status: int, title: str, detail: str, *, field: str | None = None,
                 expected: str | None = None, received: str | None = None, headers: dict | None = None,
                 code: str | None = None, errors: list[dict] | None = None):
        super().__init__(detail)
        self.status, self.title, self.detail, self.headers = status, title, detail, headers
        self.code = code if code is not None else GRPC_CODES.get(status, "UNKNOWN")
        self.errors = errors if errors is not None else [] if field is None else [
            {"field": field, "expected": expected, "received": received}]


class V2Error(APIError):
    """An :class:`APIError` in the Open Inference Protocol's words: a status (400 bad input, 404 unknown model or
    version) and a message naming the input, output, parameter or model; the title is the status's phrase.

    Parameters
    ----------
    status : int
        The HTTP status.
    message : str
        The detail.
    """

    def __init__(self, status: int, message: str):
        super().__init__(status, HTTPStatus(status).phrase, message)


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
