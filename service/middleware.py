"""Pure-ASGI guards in front of the routes, one job each.

They run for every HTTP request before any JSON is parsed, so a refused request costs the
server almost nothing. ``create_app`` stacks them, outermost first: :class:`RequestMetrics`,
:class:`RequireAPIKey`, :class:`LimitBodySize`, :class:`LimitConcurrency`, :class:`Timeout`.
The probes and the metrics scrape (:data:`UNLIMITED`) skip the last three.
"""

from __future__ import annotations

import time

import anyio

from service.auth import PUBLIC_PATHS, key_matches, scope_key
from service.errors import problem

UNLIMITED = frozenset({"/livez", "/readyz", "/metrics"})
_METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"})


class _Guard:
    """Base: passes non-HTTP traffic (and, with ``skip``, those paths) straight through."""

    skip: frozenset = frozenset()

    def __init__(self, app, *, metrics, **settings):
        self.app, self.metrics = app, metrics
        for name, value in settings.items():  # the guard's own setting (a limit, a key)
            setattr(self, name, value)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["path"] in self.skip:
            return await self.app(scope, receive, send)
        return await self.handle(scope, receive, send)

    async def handle(self, scope, receive, send):  # pragma: no cover - abstract
        raise NotImplementedError


class RequestMetrics(_Guard):
    """Counts every request by route, method and status, and observes its latency."""

    async def handle(self, scope, receive, send):
        start = time.perf_counter()
        status = 500

        async def send_status(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            path = scope["path"]
            route = getattr(scope.get("route"), "path", None) or (path if path in UNLIMITED else "unmatched")
            method = scope.get("method", "")
            method = method if method in _METHODS else "other"  # bounded label set
            self.metrics.child(self.metrics.requests, route, method, str(status)).inc()
            self.metrics.child(self.metrics.latency, route).observe(time.perf_counter() - start)


class RequireAPIKey(_Guard):
    """401 without the API key ``api_key``, except on :data:`service.auth.PUBLIC_PATHS`."""

    skip = PUBLIC_PATHS

    async def handle(self, scope, receive, send):
        if key_matches(scope_key(scope), self.api_key):
            return await self.app(scope, receive, send)
        self.metrics.rejected.labels("unauthorised").inc()
        await problem(401, "Unauthorized", "a valid API key is required in the X-API-Key header "
                      "(or Authorization: Bearer)", headers={"WWW-Authenticate": "Bearer"})(scope, receive, send)


class _BodyTooLarge(Exception):
    pass


class LimitBodySize(_Guard):
    """413 for a body over ``max_bytes``: a declared ``Content-Length`` at once, a streamed one when
    the route reads past the limit."""

    skip = UNLIMITED

    async def _refuse(self, scope, receive, send, detail: str):
        self.metrics.rejected.labels("body_too_large").inc()
        await problem(413, "Payload Too Large", detail)(scope, receive, send)

    async def handle(self, scope, receive, send):
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            return await self._refuse(scope, receive, send, f"request body is {int(declared)} bytes; the limit is "
                                      f"{self.max_bytes} (LMVE_MAX_BODY_BYTES)")
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
            await self.app(scope, limited_receive, send)
        except _BodyTooLarge:
            await self._refuse(scope, receive, send, f"request body exceeds {self.max_bytes} bytes "
                               "(LMVE_MAX_BODY_BYTES)")


class LimitConcurrency(_Guard):
    """503 when ``limit`` requests are already in flight: no unbounded queue."""

    skip = UNLIMITED

    def __init__(self, app, *, limit: int, metrics):
        super().__init__(app, metrics=metrics, slots=anyio.CapacityLimiter(limit))

    async def handle(self, scope, receive, send):
        try:
            self.slots.acquire_nowait()
        except anyio.WouldBlock:
            self.metrics.rejected.labels("overloaded").inc()
            return await problem(503, "Service Unavailable", f"{self.slots.total_tokens:.0f} requests are already "
                                 "in flight (LMVE_MAX_CONCURRENCY); retry shortly",
                                 headers={"Retry-After": "1"})(scope, receive, send)
        try:
            await self.app(scope, receive, send)
        finally:
            self.slots.release()


class Timeout(_Guard):
    """504 when a request takes longer than ``seconds``."""

    skip = UNLIMITED

    async def handle(self, scope, receive, send):
        try:
            with anyio.fail_after(self.seconds):
                await self.app(scope, receive, send)
        except TimeoutError:
            self.metrics.rejected.labels("timeout").inc()
            await problem(504, "Gateway Timeout", f"the request took longer than {self.seconds} s "
                          "(LMVE_REQUEST_TIMEOUT_S)")(scope, receive, send)
