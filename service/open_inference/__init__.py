"""The Open Inference Protocol ("V2": KServe, Triton, MLServer) as this service speaks it.

:mod:`~service.open_inference.tensors` holds what a model takes and gives and the tensor codec shared by
every transport; :mod:`~service.open_inference.bodies` the REST bodies; :mod:`~service.open_inference.rest`
``infer`` over REST (JSON and the binary tensor extension); :mod:`~service.open_inference.grpc_codec`
``infer`` over gRPC. The protocol: https://github.com/kserve/open-inference-protocol.
"""
