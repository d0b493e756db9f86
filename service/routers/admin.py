"""``POST /admin/reload``: verify a bundle, then swap it in; a bad one leaves the old serving."""

from __future__ import annotations

from typing import Annotated

import anyio
from fastapi import APIRouter, Body, Depends

from models.exceptions import BundleError
from service.deps import AppMetrics, Store, require_admin_key
from service.errors import APIError
from service.schemas import ReloadRequest, ReloadResponse

router = APIRouter(tags=["admin"], dependencies=[Depends(require_admin_key)])


@router.post("/admin/reload", response_model=ReloadResponse,
             responses={401: {"description": "bad key"}, 403: {"description": "no key configured"},
                        422: {"description": "bundle refused; the old one keeps serving"}},
             summary="Load and verify a bundle, then swap it in atomically")
async def reload(store: Store, metrics: AppMetrics, body: Annotated[ReloadRequest | None, Body()] = None):
    path = body.bundle if body is not None else None
    previous = store.current
    try:
        new, _ = await anyio.to_thread.run_sync(store.reload, path)
    except BundleError as exc:
        metrics.reloads.labels("refused").inc()
        serving = previous.version if previous is not None else "nothing"
        raise APIError(422, "Bundle refused", f"{exc}; still serving {serving}", field="bundle",
                       expected="a verified bundle directory", received=str(path or store.path)) from None
    metrics.reloads.labels("ok").inc()
    metrics.set_model(new)
    return ReloadResponse(reloaded=True, version=new.version,
                          previous_version=previous.version if previous is not None else None)
