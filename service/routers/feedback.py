"""``POST /feedback`` and ``POST /models/{name}/feedback``: labelled readings scored against the served regions (observed coverage and,
in adaptive mode, the served level). Behind the API key like the region routes."""

from __future__ import annotations

from fastapi import APIRouter, Request

from service.deps import json_body, json_body_openapi, model_name
from service.schemas import FeedbackRequest, FeedbackResponse

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
    return FeedbackResponse(**await request.app.state.plane.feedback(model_name(request, body.model), body,
                                                                     request.scope))
