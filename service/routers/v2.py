"""The Open Inference Protocol ("V2") over REST, over the model repository: server and model metadata,
health, inference, and the model-repository extension (index, load, unload).

The protocol's bodies and tensor codec are :mod:`service.v2`; its errors (``{"error": "..."}``) are
rendered by :mod:`service.errors`. ``POST /v2/models/{name}/infer`` answers from the same computation
as ``POST /models/{name}/predict-region`` and ``/contains`` (same method choice, levels, adaptive mode
and metrics); like them it is a plain Starlette route (:class:`service.routers.dispatch.InferenceRoutes`)
and the FastAPI route below only documents it. The health routes are public; load and unload need
the admin key.
"""

from __future__ import annotations

import time
import anyio
from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse

from service import inference, v2
from service.deps import Repository, require_admin_key, serving, store_for
from service.errors import FastJSONResponse
from service.routers import admin, health
from service.routers.regions import INLINE_ROWS, _effective, _level, _observe
from service.shift import NO_STEP
from service.store import Loaded

router = APIRouter(tags=["v2"])
ERRORS = {400: {"model": v2.ErrorResponse, "description": "bad input, naming the input, output or parameter"},
          404: {"model": v2.ErrorResponse, "description": "unknown model (or version)"},
          503: {"model": v2.ErrorResponse, "description": "the model has no verified bundle"}}
SERVER = {"name": "lmve", "version": "0.1.0", "extensions": ["model_repository"]}


def _loaded(request: Request, repository) -> Loaded:
    """The path's model (404 naming it), loaded (503 with its state and reason), at the path's version
    when one is named (404 naming the version it serves)."""
    name = request.path_params["name"]
    store = store_for(repository, name)
    request.scope["lmve.model"] = store.name
    loaded = store.current
    if loaded is None:
        raise v2.V2Error(503, f"model {name!r} is not ready ({store.state}): {store.reason}")
    _check_version(request, loaded)
    return loaded


def _check_version(request: Request, loaded: Loaded) -> None:
    version = request.path_params.get("version")
    if version is not None and version != loaded.version:
        raise v2.V2Error(404, f"model {loaded.name!r} has no version {version!r}; it serves {loaded.version!r}")


# ------------------------------------------------------------------------------------ server
@router.get("/v2", response_model=v2.MetadataServerResponse, summary="Server metadata: name, version, extensions")
async def server_metadata():
    return SERVER


@router.get("/v2/health/live", summary="The process is up: `{\"live\": true}`")
async def live():
    return {"live": True}


@router.get("/v2/health/ready", responses={503: {"model": v2.ErrorResponse}},
            summary="Every model that should serve has a verified bundle (503 naming the others)")
async def ready(repository: Repository):
    not_ready = health.unready(repository)
    if not_ready:
        listed = "; ".join(f"{name}: {reason}" if name else reason for name, reason in sorted(not_ready.items()))
        return JSONResponse({"ready": False, "error": f"not ready: {listed}"}, status_code=503,
                            headers={"Retry-After": "5"})
    return {"ready": True}


# ------------------------------------------------------------------------------------ models
async def _metadata(request: Request, repository: Repository):
    loaded = _loaded(request, repository)
    model = loaded.model
    return v2.model_metadata(loaded.name, loaded.version, model.n_features, model.n_targets, model.requires_centers,
                             model.primary_method, model.coverage, typicality=model.typicality is not None)


async def _model_ready(request: Request, repository: Repository):
    loaded = _loaded(request, repository)
    return {"name": loaded.name, "ready": True}


for _prefix in ("/v2/models/{name}", "/v2/models/{name}/versions/{version}"):
    router.add_api_route(_prefix, _metadata, methods=["GET"], response_model=v2.MetadataModelResponse,
                         responses=ERRORS, name=f"v2 metadata {_prefix}",
                         summary="A model's metadata: its input tensors (features, points, centers) and outputs "
                                 "(center, shape, volume, inside, distance, p_value, typicality)")
    router.add_api_route(_prefix + "/ready", _model_ready, methods=["GET"], responses=ERRORS,
                         name=f"v2 ready {_prefix}", summary="200 `{\"ready\": true}` when the model serves; 503 "
                                                             "with its state and reason when not")


# ------------------------------------------------------------------------------------ inference
def _infer(call: v2.InferCall, ctx) -> FastJSONResponse:
    """The V2 answer of ``call``: the regions (``predict_region``) and, with points, the containment
    (``assess``), from the method and level ``/predict-region`` would use."""
    loaded, want = ctx.loaded, call.outputs
    model = loaded.model
    inference.check_row_limit(call.features, "features", ctx.settings.max_rows)
    if v2.TYPICALITY in want and model.typicality is None:
        if call.named:
            raise v2.V2Error(400, f"output 'typicality' is not available: {NO_STEP}")
        want = tuple(name for name in want if name != v2.TYPICALITY)
    t0 = time.perf_counter()
    level, adaptive, thresholds = _level(call.coverage, ctx, call.method)
    values, answer = {}, None
    if call.regions:
        answer = model.predict_region(call.features, call.method, level, kind="ellipsoid", centers=call.centers,
                                      thresholds=thresholds)
        region = answer.regions
        # the closed form's areas, equal to region_rows' to the bit (tests/service/test_v2.py)
        values.update(center=region.centers, shape=region.shapes, volume=region.volume("lebesgue"))
    if call.containment:
        assessed = model.assess(call.features, call.points, call.method, level, kind="ellipsoid",
                                centers=call.centers, thresholds=thresholds)
        values.update(inside=assessed.inside, distance=assessed.distance, p_value=assessed.p_value)
        answer = answer or assessed
    values[v2.TYPICALITY] = answer.typicality
    ctx.shift.observe(loaded, answer.typicality_scores)
    _observe(ctx.metrics, "infer", loaded.name, answer, call.rows, t0)
    parameters = {"method": answer.method, "fallback": answer.fallback,
                  "coverage": call.coverage if call.coverage is not None else model.coverage,
                  "effective_coverage": _effective(level, answer, ctx, thresholds), "adaptive": adaptive,
                  "bundle_id": loaded.version}
    if answer.fallback_reason is not None:
        parameters["fallback_reason"] = answer.fallback_reason
    body = {"model_name": loaded.name, "model_version": loaded.version, "parameters": parameters,
            "outputs": [v2.output(name, values[name], "BOOL" if name == "inside" else "FP64") for name in want]}
    if call.id is not None:
        body["id"] = call.id
    return FastJSONResponse(body)


async def infer(request: Request):
    """``POST /v2/models/{name}[/versions/{version}]/infer`` (answered by the plain route): the model
    first (404, 503), then the body (400 naming the input); batches over ``INLINE_ROWS`` rows run in
    the thread pool, as the region routes'."""
    ctx = await serving(request)
    _check_version(request, ctx.loaded)
    try:
        call = v2.decode(v2.parse_request(await request.body()))
    except v2.V2Error:
        # Triton's binary extension (JSON, then raw tensors) fails to parse or decode: say why
        if any(key == b"inference-header-content-length" for key, _ in request.scope["headers"]):
            raise v2.V2Error(400, v2.BINARY_HINT) from None
        raise
    if call.rows <= INLINE_ROWS:
        return _infer(call, ctx)
    return await anyio.to_thread.run_sync(_infer, call, ctx, abandon_on_cancel=True)


INFER_BODY = {"requestBody": {"required": True, "content": {"application/json": {
    "schema": {"$ref": "#/components/schemas/InferenceRequest"}}}}}
REQUEST_MODELS = (v2.InferenceRequest, v2.RepositoryIndexRequest, v2.LoadRequest)

for _prefix in ("/v2/models/{name}", "/v2/models/{name}/versions/{version}"):
    router.add_api_route(_prefix + "/infer", infer, methods=["POST"], response_model=v2.InferenceResponse,
                         responses={**ERRORS, 413: {"model": v2.ErrorResponse, "description": "too many rows"}},
                         openapi_extra=INFER_BODY, name=f"v2 infer {_prefix}",
                         summary="Calibrated ellipses (center, shape, volume) and, with `points`, containment "
                                 "(inside, distance, p_value), with each row's typicality, for a batch of feature rows")


# ------------------------------------------------------------------------------------ repository
def _optional_body(model) -> dict:
    """``openapi_extra`` declaring ``model`` as an optional JSON body (the routes parse it themselves,
    :func:`service.v2.parse`: clients send it with or without a content type, or none at all)."""
    return {"requestBody": {"required": False, "content": {"application/json": {
        "schema": {"$ref": f"#/components/schemas/{model.__name__}"}}}}}


@router.post("/v2/repository/index", response_model=list[v2.RepositoryModel], response_model_exclude_none=True,
             openapi_extra=_optional_body(v2.RepositoryIndexRequest), responses={400: {"model": v2.ErrorResponse}},
             summary="Every model of the repository: name, version (its bundle id), state and reason")
async def repository_index(request: Request, repository: Repository):
    body = v2.parse(await request.body(), v2.RepositoryIndexRequest, "repository index request", optional=True)
    only_ready = body is not None and body.ready is True
    index = []
    for name, store in sorted(repository.stores.items()):
        cur = store.current
        if only_ready and cur is None:
            continue
        entry = {"name": name, "state": store.state}
        if cur is not None:
            entry["version"] = cur.version
        if store.reason is not None:
            entry["reason"] = store.reason
        index.append(entry)
    return index


ADMIN = {401: {"model": v2.ErrorResponse, "description": "bad key"},
         403: {"model": v2.ErrorResponse, "description": "no key configured"},
         404: {"model": v2.ErrorResponse, "description": "no model of that name in the repository"}}


@router.post("/v2/repository/models/{name}/load", dependencies=[Depends(require_admin_key)],
             openapi_extra=_optional_body(v2.LoadRequest),
             responses={**ADMIN, 400: {"model": v2.ErrorResponse, "description": "the bundle was refused; the "
                                                                                 "previous one keeps serving"}},
             summary="Load (or reload) the model `name` from its directory, verified, on every worker (admin key)")
async def load(name: str, request: Request):
    v2.parse(await request.body(), v2.LoadRequest, "load request", optional=True)  # its parameters: none used
    done = await admin.swap(request, name, None)
    return {"name": done.model, "load": True, "version": done.version}


@router.post("/v2/repository/models/{name}/unload", dependencies=[Depends(require_admin_key)],
             openapi_extra=_optional_body(v2.LoadRequest), responses={**ADMIN, 400: {"model": v2.ErrorResponse}},
             summary="Stop serving the model `name` on every worker (admin key)")
async def unload(name: str, request: Request):
    v2.parse(await request.body(), v2.LoadRequest, "unload request", optional=True)  # unload_dependents: none
    await admin.unload(request, name)
    return {"name": name, "unload": True}
