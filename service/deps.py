"""Typed dependencies: the settings, the named model's snapshot, the parsed body, the admin-key check.

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
from service.shift import ShiftAlarm
from service.repository import ModelRepository, UnknownModelError
from service.store import Loaded, ModelStore


async def get_settings(request: Request) -> ServiceSettings:
    return request.app.state.settings


async def get_repository(request: Request) -> ModelRepository:
    return request.app.state.repository


async def get_metrics(request: Request) -> Metrics:
    return request.app.state.metrics


def store_for(repository: ModelRepository, name: str | None = None, field: str = "model") -> ModelStore:
    """The store of model ``name`` (``None``: the default model). A 404 naming an unknown model and the
    known ones; a 422 (``field``) when several models serve, none is the default and none was named;
    a 503 when ``LMVE_DEFAULT_MODEL`` names a model the repository lacks."""
    if name is None:
        store = repository.default
        if store is not None:
            return store
        names = ", ".join(sorted(repository.stores)) or "none"
        if repository.default_name is not None or not repository.stores:
            raise APIError(503, "Service Unavailable", f"no default model: {repository.no_default_reason()}",
                           headers={"Retry-After": "5"})
        raise APIError(422, "Model not named", repository.no_default_reason(), field=field,
                       expected=f"one of: {names}", received="null")
    store = repository.stores.get(name)
    if store is None:
        raise APIError(404, "Unknown model", str(UnknownModelError(name, repository.stores)), field=field,
                       expected=f"one of: {', '.join(sorted(repository.stores)) or 'none'}", received=name)
    return store


def loaded_or_503(store: ModelStore) -> Loaded:
    """The store's current bundle snapshot; a 503 (with the reason) while none is verified."""
    loaded = store.current
    if loaded is None:
        raise APIError(503, "Service Unavailable", f"model {store.name!r} is not ready ({store.state}): "
                       f"{store.reason}", headers=None if store.unloaded_at is not None else {"Retry-After": "5"})
    return loaded


def model_name(request: Request, body_name: str | None = None) -> str | None:
    """The model a request names: the path's ``{name}``, else the body's ``model`` field (``None``:
    the default model); a 422 when both name different models."""
    path_name = request.path_params.get("name")
    if path_name is None:
        return body_name
    if body_name is not None and body_name != path_name:
        raise APIError(422, "Invalid input", f"the path names model {path_name!r} and the body's \"model\" "
                       f"{body_name!r}: name it once, or twice the same", field="model",
                       expected=f"null or {path_name!r}", received=body_name)
    return path_name


def loaded_model(request: Request, body_name: str | None = None) -> Loaded:
    """The named (or default) model's bundle snapshot for this request, its name recorded for the request
    metrics (``scope["lmve.model"]``, read by :class:`service.middleware.Guards`)."""
    store = store_for(request.app.state.repository, model_name(request, body_name))
    request.scope["lmve.model"] = store.name
    return loaded_or_503(store)


async def current_model(request: Request) -> Loaded:
    """The bundle snapshot of the path's (or the default) model for this request; 404 or 503 as
    :func:`store_for` and :func:`loaded_or_503`."""
    return loaded_model(request)


@dataclass(frozen=True, slots=True)
class Serving:
    """What a region route needs, gathered by one dependency: the bundle snapshot taken for this
    request (a reload mid-request does not change it), the settings, the metrics, the feedback monitor
    and the shift alarm."""

    loaded: Loaded
    settings: ServiceSettings
    metrics: Metrics
    monitor: Monitor
    shift: ShiftAlarm


async def serving(request: Request, body_name: str | None = None) -> Serving:
    """The :class:`Serving` context of the model the request names (path, else ``body_name``, else the
    default); 404 for an unknown model, 503 while it has no verified bundle.

    One call instead of three dependencies: FastAPI's dependency resolution costs tens of
    microseconds per dependency, a large share of a single-row request."""
    state = request.app.state
    return Serving(loaded_model(request, body_name), state.settings, state.metrics, state.monitor, state.shift)


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
        return body, await serving(request, body.model)

    return call


def json_body_openapi(model: type[BaseModel]) -> dict:
    """``openapi_extra`` declaring ``model`` as the required JSON request body (a ``$ref``; the app
    adds the schema to its components)."""
    return {"requestBody": {"required": True, "content": {"application/json": {
        "schema": {"$ref": f"#/components/schemas/{model.__name__}"}}}}}


async def get_monitor(request: Request) -> Monitor:
    return request.app.state.monitor


async def get_shift(request: Request) -> ShiftAlarm:
    return request.app.state.shift


async def require_admin_key(request: Request, settings: Annotated[ServiceSettings, Depends(get_settings)]) -> None:
    """Admin routes always need the key; with none configured they are disabled."""
    if settings.api_key is None:
        raise APIError(403, "Forbidden", "admin routes are disabled: set LMVE_API_KEY to enable them")
    presented = presented_key(request.headers.get("x-api-key"), request.headers.get("authorization"))
    if not key_matches(presented, settings.api_key.get_secret_value()):
        raise APIError(401, "Unauthorized", "a valid API key is required for admin routes",
                       headers={"WWW-Authenticate": "Bearer"})


Settings = Annotated[ServiceSettings, Depends(get_settings)]
Repository = Annotated[ModelRepository, Depends(get_repository)]
CurrentModel = Annotated[Loaded, Depends(current_model)]
AppMetrics = Annotated[Metrics, Depends(get_metrics)]
AppMonitor = Annotated[Monitor, Depends(get_monitor)]
AppShift = Annotated[ShiftAlarm, Depends(get_shift)]
