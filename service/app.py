"""``create_app(settings)``: the ASGI app. The lifespan loads and verifies every model's bundle once.

The models come from a model repository (``LMVE_MODEL_REPOSITORY``, :mod:`service.repository`) or
one bundle (``LMVE_BUNDLE``, a repository of one). The process stays up when a model cannot load
(``/readyz`` answers 503 naming it and why; the others serve), so an orchestrator can tell
"starting" from "broken" and a reload can bring it to ready. ``SIGHUP`` (when the app runs in the
main thread) reloads every model that is not unloaded from its bundle directory.
"""

from __future__ import annotations

import asyncio
import gc
import inspect
import logging
import signal
import threading
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware
from starlette.middleware.errors import ServerErrorMiddleware
from starlette.middleware.exceptions import ExceptionMiddleware
from starlette.routing import Match

from models.centres import search
from models.exceptions import BundleError
from service import grpc_endpoint
from service.dataplane import DataPlane
from service.error_handlers import install_error_handlers
from service.memory import keep_freed_memory
from service.metrics import Metrics
from service.middleware import Guards
from service.monitor import FeedbackCollector, Monitor
from service.openapi import document
from service.routing import HotRoutes, documented
from service.settings import ServiceSettings
from service.radio_follower import RadioFollower
from service.shift import ShiftAlarm, ShiftCollector
from service.state import open_state
from service.repository import ModelRepository
from service.store import ModelStore
from service.sync import Follower

log = logging.getLogger("lmve.service")

DESCRIPTION = """Calibrated uncertainty ellipses for localisation.

For each feature vector the service returns the centre of the position estimate and the
smallest learned ellipse `{y : (y-c)^T C^-1 (y-c) <= 1}` that holds the true position with
the bundle's guaranteed probability (split-conformal calibration). Errors are
`application/problem+json` and name the field, what was expected and what came."""


def _install_sighup(follower: Follower) -> None:
    if threading.current_thread() is not threading.main_thread():
        return

    def _handler(signum, frame):
        def _reload():
            for name, store in list(follower.repository.stores.items()):
                if store.unloaded_at is not None:
                    continue
                try:
                    follower.swap(name)
                except BundleError as exc:
                    log.error("SIGHUP reload of model %s refused, still serving the previous bundle: %s", name, exc)
        threading.Thread(target=_reload, name="lmve-reload", daemon=True).start()

    try:
        signal.signal(signal.SIGHUP, _handler)
    except (ValueError, AttributeError):  # pragma: no cover - not the main thread / no SIGHUP
        pass


def _telemetry(settings: ServiceSettings) -> dict:
    """FastAPI's ``telemetry`` argument from ``LMVE_OTEL`` (nothing on a FastAPI from before native OpenTelemetry,
    which has no such argument and no per-request check)."""
    if "telemetry" not in inspect.signature(FastAPI.__init__).parameters:
        return {}
    return {"telemetry": {"tracing": settings.otel, "metrics": settings.otel, "logs": settings.otel}}


class ServiceApp(FastAPI):
    """FastAPI, with the hot routes (:class:`service.routing.HotRoutes`) served by a shorter stack of the
    same middleware, and an OpenAPI document that covers them (:mod:`service.openapi`).

    FastAPI's stack runs ten ASGI layers before an endpoint: ``ServerErrorMiddleware``, its telemetry
    and body-limit layers (idle unless configured), the user middleware, ``ExceptionMiddleware``,
    ``AsyncExitStackMiddleware`` (for dependencies with ``yield``, which these routes do not use), the
    router, the route, the request/response wrapper. With ``hot`` set (``create_app`` does, unless
    ``LMVE_OTEL`` asks for FastAPI's telemetry), a matched hot request goes through
    ``ServerErrorMiddleware``, the user middleware (the same :class:`~service.middleware.Guards`,
    CORS), ``ExceptionMiddleware`` with the app's handlers, and the route: the same errors, limits and
    metrics, in fewer frames. Every other request takes
    FastAPI's stack."""

    hot = None  #: the hot routes (a ``HotRoutes``), or None: every request takes FastAPI's stack
    _hot_stack = None
    #: what :meth:`openapi` documents beyond the app's routes: the hot route table's documentation
    #: routes, the self-parsed request models, whether an API key guards the routes, the boundary limit
    documented: tuple = ((), (), False, 512)

    def openapi(self) -> dict:
        if self.openapi_schema is None:
            self.openapi_schema = document(self, *self.documented)
        return self.openapi_schema

    def _build_hot_stack(self):
        handlers = {key: value for key, value in self.exception_handlers.items() if key not in (500, Exception)}
        app = ExceptionMiddleware(self.hot.handle, handlers=handlers, debug=self.debug)
        for middleware in reversed(self.user_middleware):
            app = middleware.cls(app, *middleware.args, **middleware.kwargs)
        return ServerErrorMiddleware(app, handler=self.exception_handlers.get(Exception, self.exception_handlers.get(500)),
                                     debug=self.debug)

    async def __call__(self, scope, receive, send):
        if self.hot is not None and scope["type"] == "http":
            if self.root_path:
                scope["root_path"] = self.root_path
            match, child = self.hot.matches(scope)
            if match is Match.FULL:
                if self._hot_stack is None:
                    self._hot_stack = self._build_hot_stack()
                scope.update(child)
                scope["app"], scope["router"] = self, self.router
                return await self._hot_stack(scope, receive, send)
        await super().__call__(scope, receive, send)


def create_app(settings: ServiceSettings | None = None, store: ModelStore | None = None,
               repository: ModelRepository | None = None) -> FastAPI:
    """The FastAPI application: REST routes, the gRPC endpoint's data plane, metrics and a lifespan that
    loads every model once.

    Parameters
    ----------
    settings : ServiceSettings, default=None
        Limits, keys, ports, the state database; ``None`` reads the environment (``LMVE_*``).
    store : ModelStore, default=None
        Serve this one store (loaded or not) as the whole repository.
    repository : ModelRepository, default=None
        The models to serve; ``None`` is ``store``'s repository, or the settings' repository or bundle.

    Returns
    -------
    FastAPI
        Its lifespan loads the models, starts the follower that keeps workers in step, and stops both.
    """
    settings = settings or ServiceSettings()
    search.set_search_threads(settings.search_threads or search.default_search_threads(settings.workers))
    keep_freed_memory(settings.heap_keep_mb)
    if repository is None:
        repository = (ModelRepository.of(store, default=settings.default_model) if store is not None else
                      ModelRepository(settings.model_repository, bundle=settings.bundle,
                                      default=settings.default_model))
    metrics = Metrics()
    state = open_state(settings.state_url)
    monitor = Monitor(state, settings)
    follower = Follower(repository, state, monitor, metrics)
    metrics.registry.register(FeedbackCollector(monitor, repository))
    shift = ShiftAlarm(state, settings)
    metrics.registry.register(ShiftCollector(shift, repository))
    radio = RadioFollower(state, settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        repository.load_all()
        follower.start()
        # everything alive now (numpy, scikit-learn, the bundles) lives as long as the process: move it
        # out of the cyclic collector's sight, so that a full collection during a request walks
        # only that request's garbage (it otherwise walks a million objects: a p99 spike)
        gc.collect()
        gc.freeze()
        _install_sighup(follower)
        grpc_server = await grpc_endpoint.start(app.state.plane, settings)
        tasks = [asyncio.create_task(shift.run(repository, settings.sync_interval_s)),
                 asyncio.create_task(radio.run(repository, settings.sync_interval_s))]
        if state.shared:
            tasks.append(asyncio.create_task(follower.follow(settings.sync_interval_s)))
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
            radio.close()  # a radio build in a child would otherwise hold the exit until it ends
            if grpc_server is not None:
                await grpc_server.stop(grace=5)
            state.close()

    app = ServiceApp(title="lmve", version="0.1.0", description=DESCRIPTION, lifespan=lifespan,
                     docs_url=None, redoc_url=None,  # service.routers.docs serves them without a CDN
                     **_telemetry(settings))
    app.state.settings, app.state.repository, app.state.metrics = settings, repository, metrics
    app.state.service_state, app.state.monitor, app.state.follower = state, monitor, follower
    app.state.shift, app.state.radio = shift, radio
    install_error_handlers(app)

    app.state.plane = DataPlane(repository, settings, metrics, monitor, shift, follower, radio)

    _include_routers(app, settings)
    if settings.cors_origins:
        app.add_middleware(CORSMiddleware, allow_origins=settings.cors_origins, allow_methods=["GET", "POST"],
                           allow_headers=["Content-Type", "X-API-Key", "Authorization", "X-LMVE-Device"])
    # the last added runs first: the guards before CORS and the routes
    guards = Guards(metrics=metrics, max_bytes=settings.max_body_bytes, in_flight=app.state.plane.in_flight,
                    seconds=settings.request_timeout_s,
                    api_key=None if settings.api_key is None else settings.api_key.get_secret_value())
    app.add_middleware(guards.around)
    return app


def _include_routers(app: ServiceApp, settings: ServiceSettings) -> None:
    """Every router on ``app``, the hot routes' matcher first (on the short stack unless FastAPI's telemetry
    is on), and what the OpenAPI document needs (``app.documented``)."""
    from service.routers import (admin, docs, feedback, health, hot_table, model_info, model_states, regions,
                                 survey_map, v2, viewer)

    # the API key is checked by service.middleware.Guards for every route outside service.auth.PUBLIC_PATHS
    app.include_router(health.router)
    app.include_router(v2.router)
    table = hot_table()
    hot = HotRoutes(table)
    app.router.routes.insert(0, hot)  # it answers the table's routes, on either stack
    if not settings.otel:  # FastAPI's telemetry wraps its own stack: keep every request on it
        app.hot = hot
    app.include_router(model_info.router)
    app.include_router(model_states.router)
    app.include_router(survey_map.router)
    app.include_router(feedback.router)
    app.include_router(admin.router)
    app.include_router(viewer.router)
    app.include_router(docs.router)
    if settings.enable_noop:
        app.include_router(health.noop_router)
    app.documented = (documented(table), (*regions.REQUEST_MODELS, *admin.REQUEST_MODELS, *feedback.REQUEST_MODELS,
                                          *v2.REQUEST_MODELS), settings.api_key is not None,
                    settings.max_boundary_points)
