"""The Open Inference Protocol ("V2") over REST: server and model metadata, health, inference (JSON or
binary tensors), and the model-repository extension (index, load, unload).

A thin adapter over :class:`service.dataplane.DataPlane`: the codec is :mod:`service.open_inference`, the
errors (``{"error": "..."}``) are rendered by :mod:`service.error_handlers`. :data:`HOT` declares the two
``infer`` routes once (:mod:`service.routing`). The health routes are public; load and unload need the
admin key.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Request, Response
from fastapi.responses import JSONResponse

from service.deps import require_admin_key
from service.open_inference import bodies, rest
from service.routing import PATH_PARAMETERS, HotRoute

router = APIRouter(tags=["v2"])
Name = Annotated[str, Path(description=PATH_PARAMETERS["name"])]
Version = Annotated[str, Path(description=PATH_PARAMETERS["version"])]
ERRORS = {400: {"model": bodies.ErrorResponse, "description": "bad input, naming the input, output or parameter"},
          404: {"model": bodies.ErrorResponse, "description": "unknown model (or version)"},
          503: {"model": bodies.ErrorResponse, "description": "the model has no verified bundle"}}
LOOKUP = {404: ERRORS[404], 503: ERRORS[503]}


def _loaded(request: Request, name: str, version: str | None = None):
    plane = request.app.state.plane
    return plane, plane.loaded(name, version, request.scope)


# ------------------------------------------------------------------------------------ server
@router.get("/v2", response_model=bodies.MetadataServerResponse, summary="Server metadata: name, version, extensions")
async def server_metadata(request: Request):
    return request.app.state.plane.server_metadata()


@router.get("/v2/health/live", summary="The process is up: `{\"live\": true}`")
async def live():
    return {"live": True}


@router.get("/v2/health/ready", responses={503: {"model": bodies.ErrorResponse}},
            summary="Every model that should serve has a verified bundle (503 naming the others)")
async def ready(request: Request):
    not_ready = request.app.state.plane.unready()
    if not_ready:
        listed = "; ".join(f"{name}: {reason}" if name else reason for name, reason in sorted(not_ready.items()))
        return JSONResponse({"ready": False, "error": f"not ready: {listed}"}, status_code=503,
                            headers={"Retry-After": "5"})
    return {"ready": True}


# ------------------------------------------------------------------------------------ models
METADATA = dict(response_model=bodies.MetadataModelResponse, responses=LOOKUP,
                summary="A model's metadata: its input tensors (features, points, centers) and outputs (center, "
                        "shape, volume, inside, distance, p_value, typicality)")
READY = dict(responses=LOOKUP, summary="200 `{\"ready\": true}` when the model serves; 503 with its state and reason "
                                       "when not")


@router.get("/v2/models/{name}", **METADATA)
async def model_metadata(name: Name, request: Request):
    plane, loaded = _loaded(request, name)
    return plane.model_metadata(loaded)


@router.get("/v2/models/{name}/versions/{version}", **METADATA)
async def model_version_metadata(name: Name, version: Version, request: Request):
    plane, loaded = _loaded(request, name, version)
    return plane.model_metadata(loaded)


@router.get("/v2/models/{name}/ready", **READY)
async def model_ready(name: Name, request: Request):
    _, loaded = _loaded(request, name)
    return {"name": loaded.name, "ready": True}


@router.get("/v2/models/{name}/versions/{version}/ready", **READY)
async def model_version_ready(name: Name, version: Version, request: Request):
    _, loaded = _loaded(request, name, version)
    return {"name": loaded.name, "ready": True}


# ------------------------------------------------------------------------------------ inference
def _response(result, binary: bool) -> Response:
    body, header = rest.encode(result, binary)
    if header is None:
        return Response(body, media_type=rest.JSON)
    return Response(body, media_type=rest.BINARY, headers={"Inference-Header-Content-Length": str(header)})


async def infer(request: Request):
    """``POST /v2/models/{name}[/versions/{version}]/infer``: the model first (404, 503), then the body (400
    naming the input); batches over ``service.dataplane.INLINE_ROWS`` rows run in the thread pool."""
    params, plane = request.path_params, request.app.state.plane
    raw = await request.body()
    loaded = plane.loaded(params["name"], params.get("version"), request.scope)  # the model first: 404, 503
    call = _decode(raw, request.scope["headers"])  # then the body: 400 naming the input
    result = await plane.infer(loaded, call)
    return await plane.run(call.rows, _response, result, call.binary)


def _decode(raw: bytes, headers):
    """The request's :class:`~service.open_inference.tensors.InferCall`, the binary extension's header read."""
    length = None
    for key, value in headers:
        if key == rest.HEADER_LENGTH:
            length = rest.header_length(value, len(raw))
    return rest.decode(raw, length)


#: the JSON body; the binary tensor extension's body (a JSON header, then raw tensors) is told in words: no schema
#: can tie it to the Inference-Header-Content-Length header that says where the JSON ends
INFER_BODY = {"requestBody": {"required": True, "description": (
    "An InferenceRequest. With the binary tensor data extension, the body is a JSON InferenceRequest of "
    "`Inference-Header-Content-Length` bytes (that header is then required), followed by each input whose "
    "`parameters.binary_data_size` is set as that many raw little-endian bytes, in input order."),
    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/InferenceRequest"}}}}}
INFER_RESPONSES = {**ERRORS, 200: {"description": "the outputs; with binary outputs asked, `application/octet-stream`: "
                                                  "a JSON header of `Inference-Header-Content-Length` bytes, then "
                                                  "the raw outputs", "content": {
    "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}},
    413: {"model": bodies.ErrorResponse, "description": "too many rows, or the body is too large"}}
REQUEST_MODELS = (bodies.InferenceRequest, bodies.RepositoryIndexRequest, bodies.LoadRequest)
SUMMARY = ("Calibrated ellipses (center, shape, volume) and, with `points`, containment (inside, distance, "
           "p_value), with each row's typicality, for a batch of feature rows (JSON or binary tensors)")

#: the two infer routes, declared once (service.routing): served by the app's hot route, documented from here
HOT = [HotRoute("/v2/models/{name}/infer", infer, SUMMARY, bodies.InferenceResponse, INFER_BODY, INFER_RESPONSES,
                ("v2",)),
       HotRoute("/v2/models/{name}/versions/{version}/infer", infer, SUMMARY, bodies.InferenceResponse, INFER_BODY,
                INFER_RESPONSES, ("v2",))]


# ------------------------------------------------------------------------------------ repository
def _optional_body(model) -> dict:
    """``openapi_extra`` declaring ``model`` as an optional JSON body (the routes parse it themselves,
    :func:`service.open_inference.bodies.parse`: clients send it with or without a content type)."""
    return {"requestBody": {"required": False, "content": {"application/json": {
        "schema": {"$ref": f"#/components/schemas/{model.__name__}"}}}}}


@router.post("/v2/repository/index", response_model=list[bodies.RepositoryModel], response_model_exclude_none=True,
             openapi_extra=_optional_body(bodies.RepositoryIndexRequest),
             responses={400: {"model": bodies.ErrorResponse}},
             summary="Every model of the repository: name, version (its bundle id), state and reason")
async def repository_index(request: Request):
    body = bodies.parse(await request.body(), bodies.RepositoryIndexRequest, "repository index request",
                        optional=True)
    return request.app.state.plane.repository_index(only_ready=body is not None and body.ready is True)


ADMIN = {401: {"model": bodies.ErrorResponse, "description": "bad key"},
         403: {"model": bodies.ErrorResponse, "description": "no key configured"},
         404: {"model": bodies.ErrorResponse, "description": "no model of that name in the repository"}}


@router.post("/v2/repository/models/{name}/load", dependencies=[Depends(require_admin_key)],
             openapi_extra=_optional_body(bodies.LoadRequest),
             responses={**ADMIN, 400: {"model": bodies.ErrorResponse, "description": "the bundle was refused; the "
                                                                                     "previous one keeps serving"}},
             summary="Load (or reload) the model `name` from its directory, verified, on every worker (admin key)")
async def load(name: Name, request: Request):
    bodies.parse(await request.body(), bodies.LoadRequest, "load request", optional=True)  # its parameters: none used
    new, _ = await request.app.state.plane.load(name)
    return {"name": new.name, "load": True, "version": new.version}


@router.post("/v2/repository/models/{name}/unload", dependencies=[Depends(require_admin_key)],
             openapi_extra=_optional_body(bodies.LoadRequest), responses={**ADMIN, 400: {"model": bodies.ErrorResponse}},
             summary="Stop serving the model `name` on every worker (admin key)")
async def unload(name: Name, request: Request):
    bodies.parse(await request.body(), bodies.LoadRequest, "unload request", optional=True)  # unload_dependents
    await request.app.state.plane.unload(name)
    return {"name": name, "unload": True}

