"""The Open Inference Protocol over gRPC: ``inference.GRPCInferenceService`` on its own port
(``LMVE_GRPC_PORT``, ``lmve-serve --grpc-port``; 0: off), a thin adapter over
:class:`service.dataplane.DataPlane` as the REST routers are.

Each worker serves it on the worker's event loop (``grpc.aio``), beside uvicorn; with several workers
they share the port (``SO_REUSEPORT``), as they share the HTTP one. The REST guards hold here too:
the API key (``x-api-key`` or ``authorization: Bearer`` metadata; ``ServerLive`` and ``ServerReady``,
the probes, are public) answers ``UNAUTHENTICATED``; a message over ``LMVE_MAX_BODY_BYTES``
``RESOURCE_EXHAUSTED``; more than ``LMVE_MAX_CONCURRENCY`` requests in flight, REST and gRPC together
(the data plane's :class:`~service.dataplane.InFlight`), ``UNAVAILABLE``; a call
over ``LMVE_REQUEST_TIMEOUT_S`` ``DEADLINE_EXCEEDED``. Every refusal is the one
:class:`~service.exceptions.APIError` (:func:`service.refusals.refusal`, in the V2 words), rendered once here:
its canonical code as the status, its detail as the message.
"""

from __future__ import annotations

import asyncio
import logging
import time

import grpc

from service.auth import key_matches, presented_key
from service.dataplane import MODEL_LABEL
from service.exceptions import APIError
from service.open_inference import grpc_codec
from service.open_inference.pb import inference_pb2 as pb
from service.refusals import refusal

log = logging.getLogger("lmve.service")
#: the protocol's service name: the methods are /inference.GRPCInferenceService/<Method>
SERVICE = "inference.GRPCInferenceService"
PUBLIC = frozenset({"ServerLive", "ServerReady"})
#: method -> (request message, response message)
METHODS = {"ServerLive": (pb.ServerLiveRequest, pb.ServerLiveResponse),
           "ServerReady": (pb.ServerReadyRequest, pb.ServerReadyResponse),
           "ModelReady": (pb.ModelReadyRequest, pb.ModelReadyResponse),
           "ServerMetadata": (pb.ServerMetadataRequest, pb.ServerMetadataResponse),
           "ModelMetadata": (pb.ModelMetadataRequest, pb.ModelMetadataResponse),
           "ModelInfer": (pb.ModelInferRequest, pb.ModelInferResponse),
           "RepositoryIndex": (pb.RepositoryIndexRequest, pb.RepositoryIndexResponse)}


def _status(exc: BaseException) -> tuple[grpc.StatusCode, str]:
    """An exception's gRPC status code and message: :func:`~service.refusals.refusal`'s code and detail."""
    err = refusal(exc, v2=True, where="a gRPC call")
    return getattr(grpc.StatusCode, err.code, grpc.StatusCode.UNKNOWN), err.detail


class InferenceServicer:
    """``GRPCInferenceService`` over a :class:`~service.dataplane.DataPlane`, behind the guards (see the module).

    Parameters
    ----------
    plane : the data plane the REST routers share
    api_key : ``None``: no key is required
    seconds : the longest call
    """

    def __init__(self, plane, *, api_key: str | None, seconds: float):
        self.plane, self.api_key, self.seconds = plane, api_key, seconds
        metrics = plane.metrics
        self._requests, self._latency = metrics.grpc_requests, metrics.grpc_latency

    async def _guarded(self, rpc: str, context, work):
        """``await work(seen)`` behind the guards, counted in the metrics by the model ``seen`` names
        (:data:`~service.dataplane.MODEL_LABEL`, set by the data plane)."""
        start, code, seen = time.perf_counter(), grpc.StatusCode.OK, {}
        try:
            if self.api_key is not None and rpc not in PUBLIC:
                meta = dict(context.invocation_metadata() or ())
                if not key_matches(presented_key(meta.get("x-api-key"), meta.get("authorization")), self.api_key):
                    raise APIError(401, "Unauthorized", "a valid API key is required in the x-api-key metadata "
                                   "(or authorization: Bearer)")
            in_flight = self.plane.in_flight
            if not in_flight.enter():
                raise APIError(503, "Service Unavailable", in_flight.refusal())
            try:
                async with asyncio.timeout(self.seconds):
                    return await work(seen)
            finally:
                in_flight.leave()
        except Exception as exc:  # every refusal becomes a status; a bug is logged (INTERNAL)
            code, message = _status(exc)
            await context.abort(code, message)
        finally:
            metrics, model = self.plane.metrics, seen.get(MODEL_LABEL, "")
            metrics.child(self._requests, rpc, code.name, model).inc()
            metrics.child(self._latency, rpc, model).observe(time.perf_counter() - start)

    def _loaded(self, name: str, version: str, seen: dict):
        return self.plane.loaded(name or None, version or None, seen)

    async def ServerLive(self, request, context):
        async def work(seen):
            return pb.ServerLiveResponse(live=True)
        return await self._guarded("ServerLive", context, work)

    async def ServerReady(self, request, context):
        async def work(seen):
            return pb.ServerReadyResponse(ready=not self.plane.unready())
        return await self._guarded("ServerReady", context, work)

    async def ModelReady(self, request, context):
        async def work(seen):
            try:
                self._loaded(request.name, request.version, seen)
            except APIError as exc:
                if exc.status != 503:
                    raise
                return pb.ModelReadyResponse(ready=False)
            return pb.ModelReadyResponse(ready=True)
        return await self._guarded("ModelReady", context, work)

    async def ServerMetadata(self, request, context):
        async def work(seen):
            meta = self.plane.server_metadata()
            return pb.ServerMetadataResponse(name=meta["name"], version=meta["version"], extensions=meta["extensions"])
        return await self._guarded("ServerMetadata", context, work)

    async def ModelMetadata(self, request, context):
        async def work(seen):
            meta = self.plane.model_metadata(self._loaded(request.name, request.version, seen))
            tensor = pb.ModelMetadataResponse.TensorMetadata
            return pb.ModelMetadataResponse(
                name=meta["name"], versions=meta["versions"], platform=meta["platform"],
                inputs=[tensor(name=t["name"], datatype=t["datatype"], shape=t["shape"]) for t in meta["inputs"]],
                outputs=[tensor(name=t["name"], datatype=t["datatype"], shape=t["shape"]) for t in meta["outputs"]])
        return await self._guarded("ModelMetadata", context, work)

    async def ModelInfer(self, request, context):
        async def work(seen):
            loaded = self._loaded(request.model_name, request.model_version, seen)  # the model first
            call = grpc_codec.decode(request)  # then the request: INVALID_ARGUMENT naming the input
            result = await self.plane.infer(loaded, call)
            return await self.plane.run(call.rows, grpc_codec.encode, result)
        return await self._guarded("ModelInfer", context, work)

    async def RepositoryIndex(self, request, context):
        async def work(seen):
            index = pb.RepositoryIndexResponse()
            for entry in self.plane.repository_index(only_ready=request.ready):
                index.models.add(name=entry["name"], version=entry.get("version", ""), state=entry["state"],
                                 reason=entry.get("reason") or "")
            return index
        return await self._guarded("RepositoryIndex", context, work)


def handlers(servicer: InferenceServicer) -> grpc.GenericRpcHandler:
    """The servicer's methods under the protocol's service name (:data:`SERVICE`)."""
    return grpc.method_handlers_generic_handler(SERVICE, {
        name: grpc.unary_unary_rpc_method_handler(getattr(servicer, name), request_deserializer=request.FromString,
                                                  response_serializer=response.SerializeToString)
        for name, (request, response) in METHODS.items()})


async def start(plane, settings) -> grpc.aio.Server | None:
    """Serve ``GRPCInferenceService`` on ``settings.host:settings.grpc_port`` (``None`` when the port is 0).

    The port is shared (``SO_REUSEPORT``) only between the workers of one ``lmve-serve``: a single worker
    binds it alone, so a port another process holds fails loudly instead of sharing its traffic."""
    if not settings.grpc_port:
        return None
    options = [("grpc.max_receive_message_length", settings.max_body_bytes),
               ("grpc.max_send_message_length", -1), ("grpc.so_reuseport", 1 if settings.workers > 1 else 0)]
    server = grpc.aio.server(options=options)
    api_key = None if settings.api_key is None else settings.api_key.get_secret_value()
    servicer = InferenceServicer(plane, api_key=api_key, seconds=settings.request_timeout_s)
    server.add_generic_rpc_handlers([handlers(servicer)])
    address = f"{settings.host}:{settings.grpc_port}"
    try:
        bound = server.add_insecure_port(address)
    except RuntimeError:
        bound = 0
    if bound == 0:
        raise RuntimeError(f"gRPC: could not bind {address} (LMVE_GRPC_PORT; 0 turns gRPC off)")
    await server.start()
    log.info("gRPC: GRPCInferenceService on %s", address)
    return server
