"""Admin routes (the API key is always required): ``POST /admin/reload``, ``POST /admin/recalibrate`` and
``POST /admin/radio/reset`` for the default model, and per model ``POST /admin/models/{name}/load``,
``.../unload``, ``.../recalibrate`` and ``.../radio/reset``.

Both verify the new bundle before it serves; on any error the old one keeps serving and the
answer says why. A bundle that one worker swapped in is published in the shared state, and
every other worker of the host follows within ``LMVE_SYNC_INTERVAL_S`` (``service.sync``).
"""

from __future__ import annotations

import os
import shutil
import time
import uuid
from pathlib import Path
from typing import Annotated

import anyio
import numpy as np
from fastapi import APIRouter, Body, Depends, Query, Request

from models.calibration.grouping import AUTO, parse_groups
from models.exceptions import BundleError
from service.deps import Settings, json_body, json_body_openapi, require_admin_key
from service.exceptions import APIError
from service.state import PublishConflict, StateUnavailable
from service.schemas import (ModelAction, RadioReset, RecalibrateRequest, RecalibrateResponse, ReloadRequest,
                             ReloadResponse)
from service.tabular import read_fresh_csv

router = APIRouter(tags=["admin"], dependencies=[Depends(require_admin_key)])
REQUEST_MODELS = (RecalibrateRequest,)
_parse_recalibrate = json_body(RecalibrateRequest)


BUNDLE_REFUSED = {401: {"description": "bad key"}, 403: {"description": "no key configured"},
                  404: {"description": "no model of that name in the repository"},
                  422: {"description": "bundle refused; the old one keeps serving"}}


async def swap(request: Request, name: str | None, path) -> ReloadResponse:
    """Load and verify ``path`` (default: the model's directory) for model ``name`` on every worker
    (:meth:`service.dataplane.DataPlane.load`)."""
    plane = request.app.state.plane
    repository = plane.repository
    store = plane.store(name) if name is None or name in repository.stores else None
    previous = None if store is None else store.current
    new, _ = await plane.load(name, path)
    return ReloadResponse(reloaded=True, version=new.version, model=new.name,
                          previous_version=previous.version if previous is not None else None)


@router.post("/admin/reload", response_model=ReloadResponse, responses=BUNDLE_REFUSED,
             summary="Load and verify a bundle for the default model (or the body's `model`), then swap it in "
                     "atomically (every worker follows)")
async def reload(request: Request, body: Annotated[ReloadRequest | None, Body()] = None):
    return await swap(request, body.model if body is not None else None, body.bundle if body is not None else None)


@router.post("/admin/models/{name}/load", response_model=ReloadResponse, responses=BUNDLE_REFUSED,
             summary="Load (or reload) the model `name` from its directory (or the body's `bundle`), verified, "
                     "swapped in atomically; a model new in the repository is added (every worker follows)")
async def load_model(name: str, request: Request, body: Annotated[ReloadRequest | None, Body()] = None):
    if body is not None and body.model is not None and body.model != name:
        raise APIError(422, "Invalid input", f"the path names model {name!r} and the body {body.model!r}",
                       field="model", expected=f"null or {name!r}", received=body.model)
    return await swap(request, name, body.bundle if body is not None else None)


@router.post("/admin/models/{name}/unload", response_model=ModelAction,
             responses={401: {"description": "bad key"}, 403: {"description": "no key configured"},
                        404: {"description": "no model of that name"}},
             summary="Stop serving the model `name` (requests in flight finish; every worker follows); the "
                     "others keep serving")
async def unload_model(name: str, request: Request):
    return await unload(request, name)


async def unload(request: Request, name: str) -> ModelAction:
    """Unload the model ``name`` on every worker (404 for an unknown one); what it served before."""
    store, previous = await request.app.state.plane.unload(name)
    return ModelAction(name=name, state=store.state, bundle_id=None,
                       previous_bundle_id=None if previous is None else previous.version, reason=store.reason)


RADIO_RESET = {"response_model": RadioReset, "responses": {
    401: {"description": "bad key"}, 403: {"description": "no key configured"},
    404: {"description": "no model of that name"}, 503: {"description": "the state cannot be reached; nothing reset"}}}


@router.post("/admin/radio/reset", **RADIO_RESET,
             summary="Forget the default model's radio watch: every worker serves the bundle as trained until the "
                     "queries decide again")
async def radio_reset(request: Request):
    return await reset_radio(request, None)


@router.post("/admin/models/{name}/radio/reset", **RADIO_RESET,
             summary="Forget the model `name`'s radio watch (as POST /admin/radio/reset)")
async def radio_reset_model(name: str, request: Request):
    return await reset_radio(request, name)


async def reset_radio(request: Request, name: str | None) -> RadioReset:
    """Forget model ``name``'s radio watch on every worker (:meth:`service.radio_follower.RadioFollower.reset`)."""
    plane = request.app.state.plane
    loaded = plane.current(plane.store(name))
    radio = request.app.state.radio

    def work():
        existed = radio.reset(loaded.name)
        return existed, radio.summary(loaded)

    try:
        existed, summary = await anyio.to_thread.run_sync(work)
    except StateUnavailable as exc:
        raise APIError(503, "Service Unavailable", f"the state is unreachable: {exc.reason}; nothing was reset",
                       headers={"Retry-After": "5"}) from None
    return RadioReset(name=loaded.name, reset=existed, radio=summary)


CSV_DOC = {"requestBody": {"required": True, "content": {
    **json_body_openapi(RecalibrateRequest)["requestBody"]["content"],
    "text/csv": {"schema": {"type": "string", "description": "a header with the bundle's feature and target "
                                                            "names (and the group and estimate columns), then rows"}}}}}


RECALIBRATE = {"response_model": RecalibrateResponse, "openapi_extra": CSV_DOC, "responses": {
    401: {"description": "bad key"}, 403: {"description": "no key configured"},
    404: {"description": "no model of that name"},
    409: {"description": "another recalibration of the model was published while this one ran; nothing was "
                         "published from these rows (send them again)"},
    422: {"description": "bad rows or too few for the bundle's level; the old bundle keeps serving"},
    500: {"description": "the new bundle could not be written; the old one keeps serving"}}}
Groups = Annotated[str | None, Query(description="text/csv: the group column(s), comma-separated; `none` (either "
                                                "body) counts every row as its own draw. Default: each position a "
                                                "group when most rows repeat a position, as lmve-train groups a "
                                                "survey")]
GroupRule = Annotated[str, Query(pattern="^(subsample|pooled)$")]
Seed = Annotated[int, Query(ge=0, le=2**32 - 1)]


@router.post("/admin/recalibrate", **RECALIBRATE,
             summary="New calibration scores for the default model from fresh labelled rows (JSON or text/csv); "
                     "swapped in on every worker")
async def recalibrate(request: Request, settings: Settings, groups: Groups = None, group_rule: GroupRule = "subsample",
                      seed: Seed = 0):
    return await _recalibrate(request, settings, None, groups, group_rule, seed)


@router.post("/admin/models/{name}/recalibrate", **RECALIBRATE,
             summary="New calibration scores for the model `name` (as /admin/recalibrate); the others are untouched")
async def recalibrate_model(name: str, request: Request, settings: Settings, groups: Groups = None,
                            group_rule: GroupRule = "subsample", seed: Seed = 0):
    return await _recalibrate(request, settings, name, groups, group_rule, seed)


async def _recalibrate(request: Request, settings, name: str | None, groups, group_rule, seed):
    repository = request.app.state.repository
    store = request.app.state.plane.store(name)
    loaded = store.current
    if loaded is None:
        raise APIError(503, "Service Unavailable", f"model {store.name!r} has no verified bundle to recalibrate: "
                       f"{store.reason}")
    parent = loaded.model
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    setting = parse_groups(groups)
    none = setting is None
    if ctype == "text/csv":
        grouping = setting if isinstance(setting, list) else None
        centre = (parent.manifest.get("training") or {}).get("centre")
        columns = centre.get("columns") if isinstance(centre, dict) and parent.requires_centers else None
        fresh = read_fresh_csv(await request.body(), list(parent.feature_names), list(parent.target_names),
                               groups=grouping, centre_columns=columns)
        X, Y, G, centers, source = fresh.features, fresh.points, fresh.groups, fresh.centers, {"upload": "text/csv"}
        G = G if grouping else None if none else AUTO
    elif ctype in ("application/json", ""):
        body = await _parse_recalibrate(request)
        X, Y, centers, group_rule, seed = body.features, body.points, body.centers, body.group_rule, body.seed
        G = np.asarray([str(g) for g in body.groups]) if body.groups is not None else None if none else AUTO
        grouping, source = (["groups"] if G is not None else None), {"upload": "application/json"}
    else:
        raise APIError(415, "Unsupported Media Type", f"send application/json or text/csv; got {ctype!r}",
                       field="content-type", expected="application/json | text/csv", received=ctype)
    source["rows_sent"] = len(Y)
    # in a repository, beside the models in a hidden directory (never a model itself)
    out_root = settings.recalibrated_dir or (repository.root / ".recalibrated" if repository.root is not None
                                             else loaded.path.parent)
    out = Path(out_root) / (f"{loaded.path.name.split('.recal-')[0]}.recal-"
                            f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{uuid.uuid4().hex[:6]}")

    def work():
        from models.bundle import save_recalibrated
        from models.recalibration import recalibrate as recal, threshold_changes

        result = recal(parent, X, Y, groups=G, grouping=grouping, centers=centers, group_rule=group_rule, seed=seed,
                       source=source)
        try:
            save_recalibrated(parent, result, out)
        except OSError as exc:
            raise APIError(500, "Recalibration not written", f"could not write the new bundle under {out_root}: "
                           f"{exc}; still serving {loaded.version}") from None
        try:
            # compare-and-set: published only while its parent still is (no concurrent recalibration won)
            new, _ = request.app.state.follower.swap(store.name, out, expect=loaded.version)
        except BundleError as exc:  # pragma: no cover - we just wrote it
            raise APIError(500, "Recalibration refused", f"{exc}; still serving {loaded.version}") from None
        except PublishConflict as exc:
            shutil.rmtree(out, ignore_errors=True)  # never published: no worker reads it
            request.app.state.follower.catch_up(store.name)  # serve the winner now: a resend recalibrates it
            raise APIError(409, "Recalibration conflict",
                           f"model {store.name!r} changed while these rows were calibrated: bundle {exc.published} is "
                           f"published now, not {loaded.version} they were calibrated against; nothing was "
                           f"published from them (send them again to recalibrate {exc.published})",
                           field="model", expected=f"bundle {loaded.version} published",
                           received=f"bundle {exc.published} published") from None
        except BaseException as exc:
            if not getattr(exc, "outcome_unknown", False):  # a commit that may have landed keeps its bundle
                shutil.rmtree(out, ignore_errors=True)  # the state refused it (StateUnavailable): never published
            raise
        return result, new, threshold_changes(parent, result.model)

    result, new, changes = await anyio.to_thread.run_sync(work)
    return RecalibrateResponse(model=store.name, version=new.version, previous_version=loaded.version, path=str(out),
                               rows=result.n_rows, groups=result.n_groups, grouped_by=result.grouped_by,
                               guarantee=result.guarantee, alpha_q={k: list(v) for k, v in changes.items()},
                               worker_pid=os.getpid())
