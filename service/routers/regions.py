"""``/predict-region`` and ``/contains`` over JSON: the per-method twins ``/{method}/...``, and the same four
for a named model under ``/models/{name}/`` (the plain ones answer for the body's ``model``, else the
default).

A thin adapter: parse the body, call :class:`service.dataplane.DataPlane` with the model's name, write the
rows (through :meth:`~service.dataplane.DataPlane.run`: a large batch's JSON is written in the thread pool).
:data:`HOT` declares the eight routes once (:mod:`service.routing`): it answers them and documents them.
"""

from __future__ import annotations

from starlette.requests import Request

from models import answers
from service import geojson, inference
from service.deps import json_body, json_body_openapi, model_name
from service.error_handlers import FastJSONResponse
from service.exceptions import APIError
from service.routing import HotRoute
from service.schemas import (DEVICE_CHARS, ContainsRequest, ContainsResponse, PredictRegionRequest,
                             PredictRegionResponse)

REQUEST_MODELS = (PredictRegionRequest, ContainsRequest)
_parse_predict = json_body(PredictRegionRequest)
_parse_contains = json_body(ContainsRequest)


def _regions(reply, body):
    return FastJSONResponse({"regions": inference.region_rows(reply.answer, body.boundary_points), **reply.meta})


def _features(reply, body):
    return FastJSONResponse(geojson.feature_collection(reply.answer, reply.loaded.model, body.boundary_points,
                                                       reply.meta), media_type=geojson.MEDIA_TYPE)


def _results(reply, body):
    return FastJSONResponse({"results": inference.result_rows(reply.answer), **reply.meta})


#: the header that names the device, where the body does not (``device``)
DEVICE_HEADER = "x-lmve-device"


def _device(request: Request, body):
    """The body's ``device``, else the :data:`DEVICE_HEADER` header's (at most ``DEVICE_CHARS``: 422 beyond)."""
    if body.device is None:
        named = request.headers.get(DEVICE_HEADER)
        if named is not None:
            if len(named) > DEVICE_CHARS:
                raise APIError(422, "Invalid input", f"the header X-LMVE-Device has {len(named)} characters; at most "
                               f"{DEVICE_CHARS}", field="X-LMVE-Device", expected=f"at most {DEVICE_CHARS} characters",
                               received=f"{len(named)} characters")
            body.device = named
    return body


async def predict_region(request: Request):
    body = _device(request, await _parse_predict(request))
    geo, plane = geojson.wants_geojson(request, body), request.app.state.plane
    reply = await plane.predict_region(model_name(request, body.model), body, request.path_params.get("method"), geo,
                                       labels=request.scope)
    return await plane.run(len(body.features), _features if geo else _regions, reply, body)


async def contains(request: Request):
    body, plane = _device(request, await _parse_contains(request)), request.app.state.plane
    reply = await plane.contains(model_name(request, body.model), body, request.path_params.get("method"),
                                 labels=request.scope)
    return await plane.run(len(body.features), _results, reply, body)


PREDICT_BODY = json_body_openapi(PredictRegionRequest)
CONTAINS_BODY = json_body_openapi(ContainsRequest)
PROBLEMS = {404: {"description": "the body's `model` is not in the repository"},
            413: {"description": "too many rows or body too large"},
            422: {"description": "invalid input (problem+json naming the field); the feature count is the bundle's "
                                 "(`GET /model`: `d`), so a body the schema allows can still be refused here"},
            503: {"description": "no verified bundle, or too many requests in flight"}}
METHOD = {**PROBLEMS, 404: {"description": "unknown method, or the body's `model` is not in the repository"}}
NAMED = {**PROBLEMS, 404: {"description": "unknown model or method (problem+json naming it)"}}
#: /predict-region answers GeoJSON when asked (`format`, or `Accept: application/geo+json`)
GEOJSON = {200: {"description": "the regions: JSON, or an RFC 7946 FeatureCollection when asked", "content": {
    geojson.MEDIA_TYPE: {"schema": {"type": "object", "description": "a FeatureCollection, one Feature per row, its "
                                    "properties " + ", ".join(f"`{f.name}`" for f in answers.fields(answers.REGION,
                                                                                                    "geo"))}}}}}


def _routes(prefix: str, responses: dict, whose: str) -> list[HotRoute]:
    return [HotRoute(f"{prefix}/predict-region", predict_region, f"Calibrated uncertainty ellipses{whose}",
                     PredictRegionResponse, PREDICT_BODY, {**GEOJSON, **responses}, ("regions",)),
            HotRoute(f"{prefix}/contains", contains, f"Is each point inside its row's calibrated ellipse?{whose}",
                     ContainsResponse, CONTAINS_BODY, responses, ("regions",))]


#: the region routes, declared once (service.routing): served by the app's hot route, documented from here
HOT = (_routes("", PROBLEMS, " (the primary method; falls back to NLE, then GE)")
       + _routes("/{method}", METHOD, ", from one named method")
       + _routes("/models/{name}", NAMED, ", from the model `name`")
       + _routes("/models/{name}/{method}", NAMED, ", from one named method of the model `name`"))
