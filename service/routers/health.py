"""Liveness, readiness and Prometheus metrics (never behind the API key)."""

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from service.deps import AppMetrics, Store

router = APIRouter(tags=["health"])


@router.get("/livez", summary="The process is up")
async def livez():
    return {"status": "ok"}


@router.get("/readyz", summary="A verified bundle is loaded (503 otherwise)",
            responses={503: {"description": "no verified bundle"}})
async def readyz(store: Store):
    if store.current is None:
        from service.errors import problem

        return problem(503, "Service Unavailable", f"not ready: {store.error}", headers={"Retry-After": "5"})
    return {"status": "ready", "version": store.current.version}


@router.get("/metrics", summary="Prometheus metrics", response_class=Response)
async def metrics(m: AppMetrics):
    return Response(generate_latest(m.registry), media_type=CONTENT_TYPE_LATEST)


noop_router = APIRouter(tags=["benchmark"])


@noop_router.post("/noop", include_in_schema=False)
async def noop(request: Request):
    """Read the body and answer a fixed JSON: the ceiling a route of this app can reach."""
    from starlette.requests import ClientDisconnect

    try:
        await request.body()
    except ClientDisconnect:  # the load generator closing at the end of a run
        return Response(status_code=499)
    return JSONResponse({"ok": True})
