"""``POST /feedback`` and ``POST /models/{name}/feedback``: labelled readings scored against the served regions (observed coverage and,
in adaptive mode, the served level). Behind the API key like the region routes."""

from __future__ import annotations

import os

import anyio
from fastapi import APIRouter, Request

from service import inference
from service.deps import json_body, json_body_openapi, serving
from service.schemas import FeedbackRequest, FeedbackResponse
from service.state import StateUnavailable

router = APIRouter(tags=["feedback"])
REQUEST_MODELS = (FeedbackRequest,)
_parse = json_body(FeedbackRequest)


RESPONSES = {404: {"description": "unknown model"},
             422: {"description": "invalid rows (problem+json naming the field); nothing is recorded"},
             503: {"description": "no verified bundle, or the state database cannot be reached (nothing was recorded, "
                         "or, when it went away while committing, the outcome is unknown)"}}


@router.post("/feedback", response_model=FeedbackResponse, openapi_extra=json_body_openapi(FeedbackRequest),
             responses=RESPONSES,
             summary="Record where labelled readings truly were: observed coverage per method (the default model, "
                     "or the body's `model`)")
async def feedback(request: Request):
    return await _record(request)


@router.post("/models/{name}/feedback", response_model=FeedbackResponse,
             openapi_extra=json_body_openapi(FeedbackRequest), responses=RESPONSES,
             summary="Record labelled readings against the model `name`'s regions")
async def model_feedback(name: str, request: Request):
    return await _record(request)


async def _record(request: Request) -> FeedbackResponse:
    body = await _parse(request)
    ctx = await serving(request, body.model)
    inference.check_row_limit(body.features, "features", ctx.settings.max_rows)
    result = await anyio.to_thread.run_sync(ctx.monitor.record, ctx.loaded, body.features, body.points, body.centers,
                                            body.site, body.device)
    try:
        summary = await anyio.to_thread.run_sync(ctx.monitor.summary, ctx.loaded)
    except StateUnavailable as exc:  # the batch is committed: answer 200 (a 503 would say it was not)
        summary = {"unavailable": exc.reason}
    return FeedbackResponse(
        recorded=result.rows, bundle_id=ctx.loaded.version, model=ctx.loaded.name, worker_pid=os.getpid(), monitor=summary,
        methods={m: {"inside": result.inside[m], "p_value": result.p_value[m], "inside_served": result.inside_served[m]}
                 for m in result.inside})
