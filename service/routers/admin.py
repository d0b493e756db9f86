"""Admin routes (the API key is always required): ``POST /admin/reload`` and ``POST /admin/recalibrate``.

Both verify the new bundle before it serves; on any error the old one keeps serving and the
answer says why. A bundle that one worker swapped in is published in the shared state, and
every other worker of the host follows within ``LMVE_SYNC_INTERVAL_S`` (``service.sync``).
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path
from typing import Annotated

import anyio
import numpy as np
from fastapi import APIRouter, Body, Depends, Query, Request

from models.exceptions import BundleError
from service.deps import Settings, Store, json_body, json_body_openapi, require_admin_key
from service.errors import APIError
from service.schemas import RecalibrateRequest, RecalibrateResponse, ReloadRequest, ReloadResponse
from service.tabular import read_fresh_csv

router = APIRouter(tags=["admin"], dependencies=[Depends(require_admin_key)])
REQUEST_MODELS = (RecalibrateRequest,)
_parse_recalibrate = json_body(RecalibrateRequest)


@router.post("/admin/reload", response_model=ReloadResponse,
             responses={401: {"description": "bad key"}, 403: {"description": "no key configured"},
                        422: {"description": "bundle refused; the old one keeps serving"}},
             summary="Load and verify a bundle, then swap it in atomically (every worker follows)")
async def reload(request: Request, store: Store, body: Annotated[ReloadRequest | None, Body()] = None):
    path = body.bundle if body is not None else None
    previous = store.current
    try:
        new, _ = await anyio.to_thread.run_sync(request.app.state.follower.swap, path)
    except BundleError as exc:
        serving = previous.version if previous is not None else "nothing"
        raise APIError(422, "Bundle refused", f"{exc}; still serving {serving}", field="bundle",
                       expected="a verified bundle directory", received=str(path or store.path)) from None
    return ReloadResponse(reloaded=True, version=new.version,
                          previous_version=previous.version if previous is not None else None)


CSV_DOC = {"requestBody": {"required": True, "content": {
    **json_body_openapi(RecalibrateRequest)["requestBody"]["content"],
    "text/csv": {"schema": {"type": "string", "description": "a header with the bundle's feature and target "
                                                            "names (and the group and estimate columns), then rows"}}}}}


@router.post("/admin/recalibrate", response_model=RecalibrateResponse, openapi_extra=CSV_DOC,
             responses={401: {"description": "bad key"}, 403: {"description": "no key configured"},
                        422: {"description": "bad rows or too few for the bundle's level; the old bundle keeps serving"},
                        500: {"description": "the new bundle could not be written; the old one keeps serving"}},
             summary="New calibration scores from fresh labelled rows (JSON or text/csv); swapped in on every worker")
async def recalibrate(request: Request, store: Store, settings: Settings,
                      groups: Annotated[str | None, Query(description="text/csv: the group column(s), "
                                                                      "comma-separated")] = None,
                      group_rule: Annotated[str, Query(pattern="^(subsample|pooled)$")] = "subsample",
                      seed: Annotated[int, Query(ge=0, le=2**32 - 1)] = 0):
    loaded = store.current
    if loaded is None:
        raise APIError(503, "Service Unavailable", f"no verified bundle is loaded to recalibrate: {store.error}")
    parent = loaded.model
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if ctype == "text/csv":
        grouping = [g.strip() for g in groups.split(",") if g.strip()] if groups else None
        centre = (parent.manifest.get("training") or {}).get("centre")
        columns = centre.get("columns") if isinstance(centre, dict) and parent.requires_centers else None
        fresh = read_fresh_csv(await request.body(), list(parent.feature_names), list(parent.target_names),
                               groups=grouping, centre_columns=columns)
        X, Y, G, centers, source = fresh.features, fresh.points, fresh.groups, fresh.centers, {"upload": "text/csv"}
    elif ctype in ("application/json", ""):
        body = await _parse_recalibrate(request)
        X, Y, centers, group_rule, seed = body.features, body.points, body.centers, body.group_rule, body.seed
        G = None if body.groups is None else np.asarray([str(g) for g in body.groups])
        grouping, source = (["groups"] if G is not None else None), {"upload": "application/json"}
    else:
        raise APIError(415, "Unsupported Media Type", f"send application/json or text/csv; got {ctype!r}",
                       field="content-type", expected="application/json | text/csv", received=ctype)
    source["rows_sent"] = len(Y)
    out_root = settings.recalibrated_dir or loaded.path.parent
    out = Path(out_root) / (f"{loaded.path.name.split('.recal-')[0]}.recal-"
                            f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{uuid.uuid4().hex[:6]}")

    def work():
        from models.bundle import save_recalibrated
        from models.calibration.recalibration import recalibrate as recal, threshold_changes

        result = recal(parent, X, Y, groups=G, grouping=grouping, centers=centers, group_rule=group_rule, seed=seed,
                       source=source)
        try:
            save_recalibrated(parent, result, out)
        except OSError as exc:
            raise APIError(500, "Recalibration not written", f"could not write the new bundle under {out_root}: "
                           f"{exc}; still serving {loaded.version}") from None
        try:
            new, _ = request.app.state.follower.swap(out)
        except BundleError as exc:  # pragma: no cover - we just wrote it
            raise APIError(500, "Recalibration refused", f"{exc}; still serving {loaded.version}") from None
        return result, new, threshold_changes(parent, result.model)

    result, new, changes = await anyio.to_thread.run_sync(work)
    return RecalibrateResponse(version=new.version, previous_version=loaded.version, path=str(out), rows=result.n_rows,
                               groups=result.n_groups, alpha_q={k: list(v) for k, v in changes.items()},
                               worker_pid=os.getpid())
