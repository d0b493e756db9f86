"""Liveness, readiness and Prometheus metrics (never behind the API key)."""

import anyio
from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from service.deps import AppMetrics, Repository

router = APIRouter(tags=["health"])


@router.get("/livez", summary="The process is up")
async def livez():
    return {"status": "ok"}


@router.get("/readyz", summary="Every model that should serve has a verified bundle (503 naming the others); "
            "`status` is `degraded` (still 200) while the shared state cannot be reached",
            responses={503: {"description": "a model is not ready, or there is none (problem+json: `models` maps "
                                            "each to its reason)"}})
async def readyz(request: Request, repository: Repository):
    not_ready = request.app.state.plane.unready()
    if not_ready:
        from service.error_handlers import problem

        listed = "; ".join(f"{name}: {reason}" if name else reason for name, reason in sorted(not_ready.items()))
        return problem(503, "Service Unavailable", f"not ready: {listed}", headers={"Retry-After": "5"},
                       extra={"models": not_ready})
    default = repository.default
    state = request.app.state.service_state
    reason = await anyio.to_thread.run_sync(state.health)
    # an unreachable state degrades feedback and publishes (503), never the regions: still ready
    body = {"status": "ready" if reason is None else "degraded",
            "state": {"backend": state.describe(), "status": "ok" if reason is None else "unavailable",
                      **({} if reason is None else {"reason": reason})},
            "models": {name: s.current.version for name, s in sorted(repository.stores.items())
                       if s.current is not None}}
    if default is not None and default.current is not None:
        body["version"] = default.current.version
    return body


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
