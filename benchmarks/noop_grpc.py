"""The gRPC baseline of ``benchmarks.serving``: a bare ``grpc.aio`` server (one process, uvloop as ``lmve-serve``
runs) whose ``inference.GRPCInferenceService/ModelInfer`` parses the request and answers an empty response: what
any Python gRPC service on this machine pays per call, and the ceiling the load generator reaches.

    python -m benchmarks.noop_grpc PORT
"""

from __future__ import annotations

import asyncio
import sys

import grpc

from service.grpc_endpoint import SERVICE
from service.open_inference.pb import inference_pb2 as pb


async def _infer(request, context):
    return pb.ModelInferResponse(model_name=request.model_name)


async def serve(port: int) -> None:
    server = grpc.aio.server(options=[("grpc.so_reuseport", 0), ("grpc.max_receive_message_length", 64 << 20)])
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(SERVICE, {
        "ModelInfer": grpc.unary_unary_rpc_method_handler(_infer, request_deserializer=pb.ModelInferRequest.FromString,
                                                          response_serializer=pb.ModelInferResponse.SerializeToString)})])
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await server.wait_for_termination()


if __name__ == "__main__":
    try:
        import uvloop

        uvloop.install()
    except ImportError:  # pragma: no cover - uvicorn[standard] brings it
        pass
    asyncio.run(serve(int(sys.argv[1])))
