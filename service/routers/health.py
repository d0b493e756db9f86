"""Liveness, readiness and Prometheus metrics (never behind the API key)."""

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from service.deps import AppMetrics, Store

router = APIRouter(tags=["health"])


@router.get("/livez", summary="The process is up")
def livez():
    return {"status": "ok"}


@router.get("/readyz", summary="A verified bundle is loaded (503 otherwise)",
            responses={503: {"description": "no verified bundle"}})
def readyz(store: Store):
    if store.current is None:
        from service.errors import problem

        return problem(503, "Service Unavailable", f"not ready: {store.error}", headers={"Retry-After": "5"})
    return {"status": "ready", "version": store.current.version}


@router.get("/metrics", summary="Prometheus metrics", response_class=Response)
def metrics(m: AppMetrics):
    return Response(generate_latest(m.registry), media_type=CONTENT_TYPE_LATEST)


noop_router = APIRouter(tags=["benchmark"])


@noop_router.post("/noop", include_in_schema=False)
async def noop(request: Request):
    """Read the body and answer a fixed JSON: the ceiling a route of this app can reach."""
    await request.body()
    return JSONResponse({"ok": True})
