"""The baseline of ``benchmarks/serving.py``: a bare FastAPI app whose region routes parse the same body
with pydantic and answer ``{}``: what any FastAPI + pydantic service on this machine pays per request.

    .venv/bin/uvicorn benchmarks.noop_app:app --port 8001
"""

from __future__ import annotations

from fastapi import FastAPI
from pydantic import BaseModel


class Body(BaseModel):
    features: list[list[float]]
    points: list[list[float]] | None = None
    centers: list[list[float]] | None = None
    coverage: float | None = None


app = FastAPI()


@app.post("/predict-region")
@app.post("/contains")
@app.post("/{method}/predict-region")
@app.post("/{method}/contains")
@app.post("/models/{name}/predict-region")
@app.post("/models/{name}/contains")
async def noop(body: Body) -> dict:
    return {}


@app.get("/readyz")
async def ready() -> dict:
    return {}
