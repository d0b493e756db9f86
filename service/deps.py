"""Typed dependencies: the settings, the model snapshot, the parsed body, the admin-key check.

All are ``async def``: none blocks, and FastAPI would run a plain ``def`` dependency in the
thread pool (a thread hop per dependency per request: most of a small request's cost)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError

from service.auth import key_matches, presented_key
from service.errors import APIError
from service.metrics import Metrics
from service.monitor import Monitor
from service.settings import ServiceSettings
from service.store import Loaded, ModelStore


async def get_settings(request: Request) -> ServiceSettings:
    return request.app.state.settings


async def get_store(request: Request) -> ModelStore:
    return request.app.state.store


async def get_metrics(request: Request) -> Metrics:
    return request.app.state.metrics


def loaded_or_503(store: ModelStore) -> Loaded:
    """The store's current bundle snapshot; a 503 (with the load error) while none is verified."""
    loaded = store.current
    if loaded is None:
        raise APIError(503, "Service Unavailable", f"no verified bundle is loaded: {store.error}",
                       headers={"Retry-After": "5"})
    return loaded


async def current_model(store: Annotated[ModelStore, Depends(get_store)]) -> Loaded:
    """The bundle snapshot for this request; 503 while none is verified."""
    return loaded_or_503(store)


@dataclass(frozen=True, slots=True)
class Serving:
    """What a region route needs, gathered by one dependency: the bundle snapshot taken for this
    request (a reload mid-request does not change it), the settings and the metrics."""

    loaded: Loaded
    settings: ServiceSettings
    metrics: Metrics
    monitor: Monitor


async def serving(request: Request) -> Serving:
    """The :class:`Serving` context; 503 while no verified bundle is loaded.

    One call instead of three dependencies: FastAPI's dependency resolution costs tens of
    microseconds per dependency, a large share of a single-row request."""
    state = request.app.state
    return Serving(loaded_or_503(state.store), state.settings, state.metrics, state.monitor)


def json_body(model: type[BaseModel]):
    """An ``async (request) -> model`` parser of the request body, with pydantic-core's JSON parser.

    FastAPI's own body handling decodes with the standard ``json`` module, then validates the
    Python objects; ``model_validate_json`` does both in one pass in Rust (several times faster
    on a batch of feature rows). Errors keep FastAPI's shape (``RequestValidationError`` with
    ``body``-prefixed locations), so they become the same problem+json. Routes that parse their
    bodies this way pass :func:`json_body_openapi` so that the schema still documents them.
    """

    async def parse(request: Request) -> BaseModel:
        raw = await request.body()
        try:
            return model.model_validate_json(raw or b"null")
        except ValidationError as exc:
            errors = [{**e, "loc": ("body", *e.get("loc", ()))} for e in exc.errors(include_url=False)]
            raise RequestValidationError(errors, body=raw[:200]) from None

    return parse


def region_call(model: type[BaseModel]):
    """An ``async (request) -> (body, Serving)``: the parsed body (as :func:`json_body`), then the
    bundle snapshot (as :func:`serving`). The region routes await it themselves instead of
    declaring it with ``Depends`` (see ``service.routers.regions``)."""
    parse = json_body(model)

    async def call(request: Request) -> tuple[BaseModel, Serving]:
        body = await parse(request)
        return body, await serving(request)

    return call


def json_body_openapi(model: type[BaseModel]) -> dict:
    """``openapi_extra`` declaring ``model`` as the required JSON request body (a ``$ref``; the app
    adds the schema to its components)."""
    return {"requestBody": {"required": True, "content": {"application/json": {
        "schema": {"$ref": f"#/components/schemas/{model.__name__}"}}}}}


async def get_monitor(request: Request) -> Monitor:
    return request.app.state.monitor


async def require_admin_key(request: Request, settings: Annotated[ServiceSettings, Depends(get_settings)]) -> None:
    """Admin routes always need the key; with none configured they are disabled."""
    if settings.api_key is None:
        raise APIError(403, "Forbidden", "admin routes are disabled: set LMVE_API_KEY to enable them")
    presented = presented_key(request.headers.get("x-api-key"), request.headers.get("authorization"))
    if not key_matches(presented, settings.api_key.get_secret_value()):
        raise APIError(401, "Unauthorized", "a valid API key is required for admin routes",
                       headers={"WWW-Authenticate": "Bearer"})


Settings = Annotated[ServiceSettings, Depends(get_settings)]
Store = Annotated[ModelStore, Depends(get_store)]
CurrentModel = Annotated[Loaded, Depends(current_model)]
AppMetrics = Annotated[Metrics, Depends(get_metrics)]
AppMonitor = Annotated[Monitor, Depends(get_monitor)]
