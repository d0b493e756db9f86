"""``/predict-region`` and ``/contains``, the per-method twins ``/{method}/...``, and the same four for a
named model under ``/models/{name}/`` (the plain ones answer for the body's ``model``, else the default).

The FastAPI routes below document them (OpenAPI); :class:`service.routers.dispatch.InferenceRoutes`
answers them."""

from __future__ import annotations

import time

import anyio
from fastapi import APIRouter, Request

from service import geojson, inference
from service.deps import Serving, json_body_openapi, region_call
from service.errors import APIError, FastJSONResponse
from service.schemas import ContainsRequest, ContainsResponse, PredictRegionRequest, PredictRegionResponse

router = APIRouter(tags=["regions"])

#: the parsed body and the bundle snapshot (see service.deps.region_call). The region routes call
#: these themselves rather than through ``Depends``: FastAPI's dependency resolution costs tens of
#: microseconds per level, 10 % of a single-row request, and these routes are the hot path
_predict_call = region_call(PredictRegionRequest)
_contains_call = region_call(ContainsRequest)
REQUEST_MODELS = (PredictRegionRequest, ContainsRequest)
PREDICT_BODY = json_body_openapi(PredictRegionRequest)
CONTAINS_BODY = json_body_openapi(ContainsRequest)

PROBLEMS = {413: {"description": "too many rows or body too large"},
            422: {"description": "invalid input (problem+json naming the field)"},
            503: {"description": "no verified bundle, or too many requests in flight"}}


def _predict(body: PredictRegionRequest, ctx: Serving, method: str | None, geo: bool = False):
    settings, model = ctx.settings, ctx.loaded.model
    if geo:
        geojson.check(model)
    inference.check_row_limit(body.features, "features", settings.max_rows)
    k = body.boundary_points
    if k is not None and not (3 <= k <= settings.max_boundary_points):
        raise APIError(422, "Invalid input", f"boundary_points must lie in [3, {settings.max_boundary_points}]; "
                       f"got {k}", field="boundary_points", expected=f"an integer in [3, {settings.max_boundary_points}]",
                       received=str(k))
    if k is not None and model.n_targets not in (2, 3):
        raise APIError(422, "Invalid input", "boundary points are available for 2-D or 3-D targets only",
                       field="boundary_points", expected="null", received=str(k))
    t0 = time.perf_counter()
    level, adaptive, thresholds = _level(body.coverage, ctx, method)
    answer = model.predict_region(body.features, method, level, kind="ellipsoid", centers=body.centers,
                                  thresholds=thresholds, strict=settings.strict_inputs)
    ctx.shift.observe(ctx.loaded, answer.typicality_scores)
    if geo:
        meta = _meta("predict-region", answer, body, ctx, t0, len(body.features), level, adaptive, thresholds)
        return FastJSONResponse(geojson.feature_collection(answer, model, k, meta), media_type=geojson.MEDIA_TYPE)
    return _respond("predict-region", "regions", inference.region_rows(answer, k), answer, body, ctx, t0, level,
                    adaptive, thresholds)


def _contains(body: ContainsRequest, ctx: Serving, method: str | None):
    settings, model = ctx.settings, ctx.loaded.model
    inference.check_row_limit(body.features, "features", settings.max_rows)
    t0 = time.perf_counter()
    level, adaptive, thresholds = _level(body.coverage, ctx, method)
    answer = model.assess(body.features, body.points, method, level, kind="ellipsoid", centers=body.centers,
                          thresholds=thresholds, floors=body.floors, buildings=body.buildings,
                          strict=settings.strict_inputs)
    ctx.shift.observe(ctx.loaded, answer.typicality_scores)
    results = [{"inside": i, "distance": d, "p_value": p, "typicality": t} for i, d, p, t in
               zip(answer.inside.tolist(), answer.distance.tolist(), answer.p_value.tolist(),
                   inference.typicality_list(answer, len(answer.inside)))]  # plain floats: cheap
    if answer.floor_inside is not None:
        for row, floor_inside in zip(results, answer.floor_inside.tolist()):
            row["floor_inside"] = floor_inside
    return _respond("contains", "results", results, answer, body, ctx, t0, level, adaptive, thresholds)


def _respond(route: str, key: str, rows: list, answer, body, ctx: Serving, t0: float, level, adaptive,
             thresholds) -> FastJSONResponse:
    """The response of both region routes: ``rows`` under ``key`` beside :func:`_meta`."""
    return FastJSONResponse({key: rows, **_meta(route, answer, body, ctx, t0, len(rows), level, adaptive, thresholds)})


def _meta(route: str, answer, body, ctx: Serving, t0: float, rows: int, level, adaptive, thresholds) -> dict:
    """A region answer's members beside its rows: the method that answered (and why it fell back), the
    levels asked for and served, the bundle, and a floor bundle's joint guarantee; the request observed
    in the metrics."""
    _observe(ctx.metrics, route, ctx.loaded.name, answer, rows, t0)
    out = {"method": answer.method, "fallback": answer.fallback, "fallback_reason": answer.fallback_reason,
           "coverage": body.coverage if body.coverage is not None else ctx.loaded.model.coverage,
           "effective_coverage": _effective(level, answer, ctx, thresholds),
           "adaptive": adaptive, "bundle_id": ctx.loaded.version, "model": ctx.loaded.name,
           "warnings": list(answer.warnings)}
    if ctx.loaded.model.floors is not None:  # a floor bundle states its joint guarantee
        out["guarantee"] = ctx.loaded.model.manifest["floors"]["guarantee"]
    return out


def _effective(level, answer, ctx: Serving, thresholds) -> float:
    """The level the answer was computed at (quantile tracking: the calibration's level of its threshold)."""
    if thresholds is not None and answer.method in thresholds:
        return thresholds[answer.method][1]
    return level if level is not None else ctx.loaded.model.coverage


def _level(asked: float | None, ctx: Serving, method: str | None) -> tuple[float | None, bool, dict | None]:
    """The level to compute at, whether the adaptive mode chose it, and the thresholds it serves
    instead of the calibrated ones (quantile tracking): a level the request names is served as
    asked; otherwise the adaptive mode's (when on), else the bundle's."""
    if asked is not None or not ctx.monitor.adaptive:
        return asked, False, None
    model = ctx.loaded.model
    name = method if method is not None and method in model.methods else model.primary_method
    thresholds = ctx.monitor.thresholds(ctx.loaded)
    if thresholds is not None:
        return None, True, thresholds
    return ctx.monitor.level(ctx.loaded, name), True, None


def _observe(metrics, route: str, model: str, answer, rows: int, t0: float) -> None:
    metrics.child(metrics.inference, model, answer.method).observe(time.perf_counter() - t0)
    metrics.child(metrics.batch_rows, route, model).observe(rows)
    if answer.fallback:
        metrics.child(metrics.fallbacks, model, answer.method).inc()


#: batches up to this many rows are computed on the event loop (well under a millisecond: a
#: thread hop would cost more than the work); larger ones go to the thread pool so that one
#: big batch never stalls health checks and small requests
INLINE_ROWS = 32


async def _run(fn, body, *args):
    if len(body.features) <= INLINE_ROWS:
        return fn(body, *args)
    # abandon_on_cancel: at the request timeout the route answers 504 at once; the abandoned
    # thread finishes its (row-bounded) batch and its result is dropped
    return await anyio.to_thread.run_sync(fn, body, *args, abandon_on_cancel=True)


@router.post("/predict-region", response_model=PredictRegionResponse, responses=PROBLEMS, openapi_extra=PREDICT_BODY,
             summary="Calibrated uncertainty ellipses (LMVE; falls back to NLE, then GE)")
async def predict_region(request: Request):
    body, ctx = await _predict_call(request)
    return await _run(_predict, body, ctx, None, geojson.wants_geojson(request, body))


@router.post("/contains", response_model=ContainsResponse, responses=PROBLEMS, openapi_extra=CONTAINS_BODY,
             summary="Is each point inside its row's calibrated ellipse? With distance and p-value")
async def contains(request: Request):
    return await _run(_contains, *await _contains_call(request), None)


@router.post("/{method}/predict-region", response_model=PredictRegionResponse, openapi_extra=PREDICT_BODY,
             responses={**PROBLEMS, 404: {"description": "unknown method"}},
             summary="Regions from one named method (nle and ge are the fallbacks)")
async def predict_region_with(method: str, request: Request):
    body, ctx = await _predict_call(request)
    return await _run(_predict, body, ctx, method, geojson.wants_geojson(request, body))


@router.post("/{method}/contains", response_model=ContainsResponse, openapi_extra=CONTAINS_BODY,
             responses={**PROBLEMS, 404: {"description": "unknown method"}},
             summary="Containment from one named method")
async def contains_with(method: str, request: Request):
    return await _run(_contains, *await _contains_call(request), method)


MODEL_PROBLEMS = {**PROBLEMS, 404: {"description": "unknown model or method (problem+json naming it)"}}


@router.post("/models/{name}/predict-region", response_model=PredictRegionResponse, openapi_extra=PREDICT_BODY,
             responses=MODEL_PROBLEMS, summary="Calibrated uncertainty ellipses from the model `name`")
async def model_predict_region(name: str, request: Request):
    return await predict_region(request)


@router.post("/models/{name}/contains", response_model=ContainsResponse, openapi_extra=CONTAINS_BODY,
             responses=MODEL_PROBLEMS, summary="Containment from the model `name`")
async def model_contains(name: str, request: Request):
    return await _run(_contains, *await _contains_call(request), None)


@router.post("/models/{name}/{method}/predict-region", response_model=PredictRegionResponse,
             openapi_extra=PREDICT_BODY, responses=MODEL_PROBLEMS,
             summary="Regions from one named method of the model `name`")
async def model_predict_region_with(name: str, method: str, request: Request):
    return await predict_region_with(method, request)


@router.post("/models/{name}/{method}/contains", response_model=ContainsResponse, openapi_extra=CONTAINS_BODY,
             responses=MODEL_PROBLEMS, summary="Containment from one named method of the model `name`")
async def model_contains_with(name: str, method: str, request: Request):
    return await _run(_contains, *await _contains_call(request), method)
