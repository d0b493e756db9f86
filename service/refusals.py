"""Every exception a request can end in, as the one :class:`~service.exceptions.APIError`.

:func:`refusal` is where a model's :class:`~models.exceptions.InputError`, an unreachable state, a timeout and a
bug become a status, a code and words, for every protocol: the REST handlers (:mod:`service.error_handlers`)
and the gRPC endpoint (:mod:`service.grpc_endpoint`) call it and render what it returns, nothing else. The
Open Inference Protocol (``/v2``, gRPC) names the input or parameter an input error concerns and answers 400
for it; the other routes answer 422 (404 for an unknown method) with the field in ``errors``.
"""

from __future__ import annotations

import logging

from models.exceptions import InputError, UnattainableCoverageError, UnknownMethodError
from service.exceptions import APIError
from service.open_inference.tensors import input_error_message
from service.state import StateUnavailable

log = logging.getLogger("lmve.service")
#: what a client reads for a bug (the exception itself is logged)
UNEXPECTED = "an unexpected error occurred; it has been logged"


def input_error_status(exc: InputError) -> tuple[int, str]:
    """The HTTP status and title of a model's :class:`InputError` outside ``/v2``.

    Parameters
    ----------
    exc : InputError
        The model's refusal.

    Returns
    -------
    (int, str)
        404 "Unknown method", 422 "Coverage not attainable", else 422 "Invalid input".
    """
    if isinstance(exc, UnknownMethodError):
        return 404, "Unknown method"
    if isinstance(exc, UnattainableCoverageError):
        return 422, "Coverage not attainable"
    return 422, "Invalid input"


def refusal(exc: BaseException, v2: bool = False, where: str = "a request") -> APIError:
    """``exc`` as the error a client is answered with.

    Parameters
    ----------
    exc : BaseException
        What the request ended in.
    v2 : bool, default=False
        The request is the Open Inference Protocol's (``/v2`` or gRPC): an input error names its input or
        parameter and is a 400.
    where : str, default="a request"
        The request, for the log line of a bug.

    Returns
    -------
    APIError
        ``exc`` itself when it is one; a 503 with ``Retry-After`` for an unreachable state (saying whether the
        outcome is known); a 504 for a timeout; a logged 500 for anything else.
    """
    if isinstance(exc, APIError):
        return exc
    if isinstance(exc, InputError):
        if v2:
            return APIError(400, "Invalid input", input_error_message(exc))
        status, title = input_error_status(exc)
        return APIError(status, title, str(exc), field=exc.field, expected=exc.expected, received=exc.received)
    if isinstance(exc, StateUnavailable):
        # feedback, a publish: nothing was stored (the client may send it again), or the server went away
        # while committing, when it may have been (a resend may count it twice)
        log.warning("state unavailable on %s: %s", where, exc.reason)
        detail = (f"the outcome is unknown (it may have been recorded; check before sending it again): {exc.reason}"
                  if exc.outcome_unknown else f"nothing was recorded: {exc.reason}")
        return APIError(503, "State unavailable", detail, headers={"Retry-After": "5"})
    if isinstance(exc, TimeoutError):
        return APIError(504, "Gateway Timeout", "the request took longer than the limit (LMVE_REQUEST_TIMEOUT_S)")
    log.error("unhandled error on %s", where, exc_info=exc)
    return APIError(500, "Internal Server Error", UNEXPECTED)
