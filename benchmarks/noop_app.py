"""The baseline of ``benchmarks.serving``: a bare FastAPI app whose region routes (and V2 ``infer`` route, JSON or
binary tensors) parse the same body with pydantic and answer ``{}``: what any FastAPI + pydantic service on this
machine pays per request. ``benchmarks.noop_grpc`` is the same for gRPC.

    .venv/bin/uvicorn benchmarks.noop_app:app --port 8001
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from pydantic import BaseModel
from starlette.requests import ClientDisconnect


class Body(BaseModel):
    features: list[list[float]]
    points: list[list[float]] | None = None
    centers: list[list[float]] | None = None
    coverage: float | None = None


class V2Input(BaseModel):
    name: str
    shape: list[int]
    datatype: str
    data: list[float]


class V2Body(BaseModel):
    """The Open Inference Protocol's request, as a FastAPI + pydantic V2 server would declare it."""

    id: str | None = None
    parameters: dict | None = None
    inputs: list[V2Input]


class V2Header(BaseModel):
    """A binary request's JSON header: the tensors' names, shapes and sizes, no data."""

    inputs: list[dict]


app = FastAPI()


@app.post("/predict-region")
@app.post("/contains")
@app.post("/{method}/predict-region")
@app.post("/{method}/contains")
@app.post("/models/{name}/predict-region")
@app.post("/models/{name}/contains")
async def noop(body: Body) -> dict:
    return {}


@app.post("/v2/models/{name}/infer")
async def noop_v2(request: Request) -> dict:
    """JSON parsed as a V2Body; a binary body (the tensor extension) read whole, its JSON header parsed."""
    try:
        raw = await request.body()
    except ClientDisconnect:  # the load generator closing at the end of a run
        return {}
    length = request.headers.get("inference-header-content-length")
    V2Header.model_validate_json(raw[:int(length)]) if length else V2Body.model_validate_json(raw)
    return {}


@app.get("/readyz")
async def ready() -> dict:
    return {}
