"""Typed dependencies of the REST routers: the settings, the named model's snapshot, the parsed body, the
admin-key check.

All are ``async def``: none blocks, and FastAPI would run a plain ``def`` dependency in the
thread pool (a thread hop per dependency per request: most of a small request's cost)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError

from service.auth import key_matches, presented_key
from service.exceptions import APIError
from service.metrics import Metrics
from service.monitor import Monitor
from service.settings import ServiceSettings
from service.radio_follower import RadioFollower
from service.shift import ShiftAlarm
from service.repository import ModelRepository
from service.store import Loaded


async def get_settings(request: Request) -> ServiceSettings:
    return request.app.state.settings


async def get_repository(request: Request) -> ModelRepository:
    return request.app.state.repository


async def get_metrics(request: Request) -> Metrics:
    return request.app.state.metrics


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


async def current_model(request: Request) -> Loaded:
    """The bundle snapshot of the path's (or the default) model for this request, its name recorded for the
    request metrics; 404 or 503 as :meth:`service.dataplane.DataPlane.loaded`."""
    return request.app.state.plane.loaded(model_name(request), labels=request.scope)


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
        if not raw:  # no document at all: a 400 (not JSON), not a 422 about ``null``
            raise RequestValidationError([{"type": "json_invalid", "loc": ("body",), "msg": "the body is empty",
                                           "input": raw, "ctx": {"error": "the body is empty"}}], body=raw)
        try:
            return model.model_validate_json(raw)
        except ValidationError as exc:
            errors = [{**e, "loc": ("body", *e.get("loc", ()))} for e in exc.errors(include_url=False)]
            raise RequestValidationError(errors, body=raw[:200]) from None

    return parse


def json_body_openapi(model: type[BaseModel]) -> dict:
    """``openapi_extra`` declaring ``model`` as the required JSON request body (a ``$ref``; the app
    adds the schema to its components)."""
    return {"requestBody": {"required": True, "content": {"application/json": {
        "schema": {"$ref": f"#/components/schemas/{model.__name__}"}}}}}


async def get_monitor(request: Request) -> Monitor:
    return request.app.state.monitor


async def get_shift(request: Request) -> ShiftAlarm:
    return request.app.state.shift


async def get_radio(request: Request) -> RadioFollower:
    return request.app.state.radio


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
AppRadio = Annotated[RadioFollower, Depends(get_radio)]
