"""Typed dependencies: the settings, the model snapshot, the API-key checks.

All are ``async def``: none blocks, and FastAPI would run a plain ``def`` dependency in the
thread pool (a thread hop per dependency per request: most of a small request's cost)."""

from __future__ import annotations

import secrets
from typing import Annotated

from fastapi import Depends, Request

from service.errors import APIError
from service.metrics import Metrics
from service.settings import ServiceSettings
from service.store import Loaded, ModelStore


async def get_settings(request: Request) -> ServiceSettings:
    return request.app.state.settings


async def get_store(request: Request) -> ModelStore:
    return request.app.state.store


async def get_metrics(request: Request) -> Metrics:
    return request.app.state.metrics


async def current_model(store: Annotated[ModelStore, Depends(get_store)]) -> Loaded:
    """The bundle snapshot for this request; 503 while none is verified."""
    loaded = store.current
    if loaded is None:
        raise APIError(503, "Service Unavailable", f"no verified bundle is loaded: {store.error}",
                       headers={"Retry-After": "5"})
    return loaded


def _presented_key(request: Request) -> str | None:
    key = request.headers.get("x-api-key")
    if key is None:
        auth = request.headers.get("authorization", "")
        if auth.lower().startswith("bearer "):
            key = auth[7:].strip()
    return key


def _check(presented: str | None, expected: str) -> bool:
    return presented is not None and secrets.compare_digest(presented.encode(), expected.encode())


async def require_api_key(request: Request, settings: Annotated[ServiceSettings, Depends(get_settings)]) -> None:
    """When ``LMVE_API_KEY`` is set, every non-health route needs it (``X-API-Key`` or Bearer)."""
    if settings.api_key is None:
        return
    if not _check(_presented_key(request), settings.api_key.get_secret_value()):
        raise APIError(401, "Unauthorized", "a valid API key is required in the X-API-Key header "
                       "(or Authorization: Bearer)", headers={"WWW-Authenticate": "Bearer"})


async def require_admin_key(request: Request, settings: Annotated[ServiceSettings, Depends(get_settings)]) -> None:
    """Admin routes always need the key; with none configured they are disabled."""
    if settings.api_key is None:
        raise APIError(403, "Forbidden", "admin routes are disabled: set LMVE_API_KEY to enable them")
    if not _check(_presented_key(request), settings.api_key.get_secret_value()):
        raise APIError(401, "Unauthorized", "a valid API key is required for admin routes",
                       headers={"WWW-Authenticate": "Bearer"})


Settings = Annotated[ServiceSettings, Depends(get_settings)]
Store = Annotated[ModelStore, Depends(get_store)]
CurrentModel = Annotated[Loaded, Depends(current_model)]
AppMetrics = Annotated[Metrics, Depends(get_metrics)]
