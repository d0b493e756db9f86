"""Pure-ASGI guards in front of the routes: API key, body size, concurrency, timeout, metrics.

They run for every request, before any JSON is parsed, so an oversized or excess request
costs the server almost nothing.
"""

from __future__ import annotations

import time

import anyio

from service.auth import PUBLIC_PATHS, key_matches, scope_key
from service.errors import problem

UNLIMITED = {"/livez", "/readyz", "/metrics"}
_METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"})


class GuardMiddleware:
    """401 without the API key (when one is configured; not for :data:`service.auth.PUBLIC_PATHS`);
    413 for bodies over ``max_body_bytes`` (declared or streamed); 503 when ``max_concurrency``
    requests are already in flight (no unbounded queue); 504 past ``timeout_s``; request metrics."""

    def __init__(self, app, *, settings, metrics):
        self.app = app
        self.api_key = None if settings.api_key is None else settings.api_key.get_secret_value()
        self.max_body = settings.max_body_bytes
        self.timeout = settings.request_timeout_s
        self.metrics = metrics
        self.slots = anyio.CapacityLimiter(settings.max_concurrency)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = scope["path"]
        start = time.perf_counter()
        status_holder = {"status": 500}

        async def send_wrapper(message):
            if message["type"] == "http.response.start":
                status_holder["status"] = message["status"]
            await send(message)

        def route_label() -> str:
            route = scope.get("route")
            return getattr(route, "path", None) or ("unmatched" if path not in UNLIMITED else path)

        try:
            if self.api_key is not None and path not in PUBLIC_PATHS and not key_matches(scope_key(scope),
                                                                                         self.api_key):
                self.metrics.rejected.labels("unauthorised").inc()
                await problem(401, "Unauthorized", "a valid API key is required in the X-API-Key header "
                              "(or Authorization: Bearer)",
                              headers={"WWW-Authenticate": "Bearer"})(scope, receive, send_wrapper)
                return
            if path in UNLIMITED:
                await self.app(scope, receive, send_wrapper)
                return
            declared = dict(scope.get("headers") or []).get(b"content-length")
            if declared is not None and declared.isdigit() and int(declared) > self.max_body:
                self.metrics.rejected.labels("body_too_large").inc()
                await problem(413, "Payload Too Large", f"request body is {int(declared)} bytes; the limit is "
                              f"{self.max_body} (LMVE_MAX_BODY_BYTES)")(scope, receive, send_wrapper)
                return
            try:
                self.slots.acquire_nowait()
            except anyio.WouldBlock:
                self.metrics.rejected.labels("overloaded").inc()
                await problem(503, "Service Unavailable", f"{self.slots.total_tokens:.0f} requests are already "
                              "in flight (LMVE_MAX_CONCURRENCY); retry shortly",
                              headers={"Retry-After": "1"})(scope, receive, send_wrapper)
                return
            try:
                received = 0

                async def limited_receive():
                    nonlocal received
                    message = await receive()
                    if message["type"] == "http.request":
                        received += len(message.get("body", b""))
                        if received > self.max_body:
                            raise _BodyTooLarge()
                    return message

                try:
                    with anyio.fail_after(self.timeout):
                        await self.app(scope, limited_receive, send_wrapper)
                except _BodyTooLarge:
                    self.metrics.rejected.labels("body_too_large").inc()
                    await problem(413, "Payload Too Large", f"request body exceeds {self.max_body} bytes "
                                  "(LMVE_MAX_BODY_BYTES)")(scope, receive, send_wrapper)
                except TimeoutError:
                    self.metrics.rejected.labels("timeout").inc()
                    await problem(504, "Gateway Timeout", f"the request took longer than {self.timeout} s "
                                  "(LMVE_REQUEST_TIMEOUT_S)")(scope, receive, send_wrapper)
            finally:
                self.slots.release()
        finally:
            label = route_label()
            method = scope.get("method", "")
            method = method if method in _METHODS else "other"  # bounded label set
            self.metrics.child(self.metrics.requests, label, method, str(status_holder["status"])).inc()
            self.metrics.child(self.metrics.latency, label).observe(time.perf_counter() - start)


class _BodyTooLarge(Exception):
    pass
