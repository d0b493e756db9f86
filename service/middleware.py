"""The guards in front of the routes, as one pure-ASGI layer.

They run for every HTTP request before any JSON is parsed, so a refused request costs the server
almost nothing. In order, :class:`Guards`:

1. counts every request by route, method, status and model, and observes its latency;
2. answers 401 without the API key, except on :data:`service.auth.PUBLIC_PATHS`;
3. except on :data:`UNLIMITED` paths (probes, metrics): 413 for a body over ``max_bytes`` (a declared
   ``Content-Length`` at once, a streamed body when the route reads past the limit); 503 when the data
   plane's limit of requests in flight is reached, gRPC calls counted too (:class:`service.dataplane.InFlight`:
   no unbounded queue); 504 when a request takes longer than ``seconds``.

One layer instead of five stacked middlewares: each layer costs an ASGI frame, a wrapped ``receive``
or ``send`` and a header scan per request. The timeout is ``asyncio.timeout`` (uvicorn runs
asyncio), cheaper than anyio's ``fail_after``.

One :class:`Guards` (one count of requests in flight) stands in front of two stacks:
:meth:`Guards.around` is the middleware factory ``create_app`` gives FastAPI, and
:class:`service.app.ServiceApp` puts the same guards in front of its short stack for the hot routes.
"""

from __future__ import annotations

import asyncio
import time
from functools import partial

from service.auth import PUBLIC_PATHS, key_matches, presented_key
from service.dataplane import MODEL_LABEL, InFlight
from service.error_handlers import render
from service.exceptions import APIError

UNLIMITED = frozenset({"/livez", "/readyz", "/v2/health/live", "/v2/health/ready", "/metrics"})
_METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"})


class _BodyTooLarge(Exception):
    pass


class Guards:
    """Metrics, API key, body size, concurrency and timeout for every HTTP request (see the module).

    Parameters
    ----------
    metrics : service.metrics.Metrics
    api_key : str or None
        ``None``: no key is required.
    max_bytes : int
        Largest request body (``LMVE_MAX_BODY_BYTES``).
    in_flight : service.dataplane.InFlight
        The data plane's count of requests in flight, shared with gRPC (``LMVE_MAX_CONCURRENCY``).
    seconds : float
        Longest request (``LMVE_REQUEST_TIMEOUT_S``).
    """

    def __init__(self, *, metrics, api_key: str | None, max_bytes: int, in_flight: InFlight, seconds: float):
        self.metrics = metrics
        self.api_key, self.max_bytes, self.in_flight, self.seconds = api_key, max_bytes, in_flight, seconds

    def around(self, app):
        """The ASGI app of these guards in front of ``app`` (a Starlette middleware factory: every app
        it makes shares this instance's limits and count)."""
        return partial(self.guard, app)

    async def guard(self, app, scope, receive, send):
        """Serve one request with ``app`` behind the guards."""
        if scope["type"] != "http":
            return await app(scope, receive, send)
        start = time.perf_counter()
        status = 500

        async def send_status(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self._guarded(app, scope, receive, send_status)
        finally:
            path = scope["path"]
            # a route's template, else the path itself where it is one of a known few (the probes, the docs
            # and /openapi.json, whose Starlette routes set no scope["route"]): a bounded label set
            route = getattr(scope.get("route"), "path", None) or (path if path in PUBLIC_PATHS else "unmatched")
            method = scope.get("method", "")
            method = method if method in _METHODS else "other"  # bounded label set
            model = scope.get(MODEL_LABEL, "")  # set by the data plane once it found a model of that name
            self.metrics.child(self.metrics.requests, route, method, str(status), model).inc()
            self.metrics.child(self.metrics.latency, route, model).observe(time.perf_counter() - start)

    async def _refuse(self, reason: str, status: int, title: str, detail: str, scope, receive, send,
                      headers: dict | None = None):
        self.metrics.rejected.labels(reason).inc()
        await render(scope, APIError(status, title, detail, headers=headers))(scope, receive, send)

    async def _guarded(self, app, scope, receive, send):
        path = scope["path"]
        x_api_key = authorization = declared = None
        for name, value in scope.get("headers") or ():
            if name == b"x-api-key":
                x_api_key = value.decode("latin-1")
            elif name == b"authorization":
                authorization = value.decode("latin-1")
            elif name == b"content-length":
                declared = value
        if (self.api_key is not None and path not in PUBLIC_PATHS
                and not key_matches(presented_key(x_api_key, authorization), self.api_key)):
            return await self._refuse("unauthorised", 401, "Unauthorized", "a valid API key is required in the "
                                      "X-API-Key header (or Authorization: Bearer)", scope, receive, send,
                                      headers={"WWW-Authenticate": "Bearer"})
        if path in UNLIMITED:
            return await app(scope, receive, send)
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            return await self._refuse("body_too_large", 413, "Payload Too Large", f"request body is {int(declared)} "
                                      f"bytes; the limit is {self.max_bytes} (LMVE_MAX_BODY_BYTES)", scope, receive,
                                      send)
        in_flight = self.in_flight
        if not in_flight.enter():
            return await self._refuse("overloaded", 503, "Service Unavailable", in_flight.refusal(), scope, receive,
                                      send, headers={"Retry-After": "1"})
        received = 0

        async def limited_receive():
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise _BodyTooLarge()
            return message

        try:
            async with asyncio.timeout(self.seconds):
                await app(scope, limited_receive, send)
        except _BodyTooLarge:
            await self._refuse("body_too_large", 413, "Payload Too Large", f"request body exceeds {self.max_bytes} "
                               "bytes (LMVE_MAX_BODY_BYTES)", scope, receive, send)
        except TimeoutError:
            await self._refuse("timeout", 504, "Gateway Timeout", f"the request took longer than {self.seconds} s "
                               "(LMVE_REQUEST_TIMEOUT_S)", scope, receive, send)
        finally:
            in_flight.leave()
