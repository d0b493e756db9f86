"""``GET /viewer``: a page to look at a model (static files of :mod:`service.viewer`, nothing fetched from the
network), and the two reads it draws from besides the clients' own routes:

* ``GET /models/{name}/survey``: the bundle's surveyed positions (per floor for a floor bundle), its
  held-out example rows, and how to draw target coordinates on a map's axes (the CRS's easting and
  northing when the bundle declares one);
* ``GET /models/{name}/feedback/recent``: the last labelled rows posted to ``/feedback``, each with
  whether the region served at the time held it (where the guarantee fails shows where to re-survey).

The page itself asks ``/predict-region`` for the picked row's ellipse, as any client does. The page
and its assets are public (they hold no data); the reads are behind the API key.
"""

from __future__ import annotations

from pathlib import Path

import anyio
from fastapi import APIRouter, Query, Request
from fastapi.responses import FileResponse

from service.deps import CurrentModel
from service.error_handlers import FastJSONResponse
from service.exceptions import APIError

router = APIRouter(tags=["viewer"])
ASSETS = Path(__file__).resolve().parent.parent / "viewer"
#: the page's files (only these names: no path from the request reaches the disk)
FILES = {"viewer.js": "text/javascript", "viewer.css": "text/css"}
#: pyproj's unit names, as the scale bar writes them
UNITS = {"metre": "m", "foot": "ft", "US survey foot": "US ft", "kilometre": "km"}
NOT_SERVED = {404: {"description": "unknown model"}, 503: {"description": "the model has no verified bundle"}}


@router.get("/viewer", include_in_schema=False)
async def page():
    return FileResponse(ASSETS / "index.html", media_type="text/html", headers={"Cache-Control": "no-cache"})


@router.get("/viewer/{asset}", include_in_schema=False)
async def asset(asset: str):
    if asset not in FILES:
        raise APIError(404, "Not Found", f"the viewer has no file {asset!r}; it has {', '.join(FILES)}",
                       field="asset", expected=" | ".join(FILES), received=asset)
    return FileResponse(ASSETS / asset, media_type=FILES[asset], headers={"Cache-Control": "no-cache"})


def display(model) -> dict:
    """How target coordinates become the drawing's (x to the right, y up): with a CRS, its easting and
    northing in CRS units (``x = targets[x_index] * scale``; ``unit``, short, labels the scale bar); without,
    the first and second target (``unit`` None: the targets' own)."""
    crs = model.crs
    names = model.target_names
    if crs is None:
        return {"x_index": 0, "y_index": 1, "scale": 1.0, "x_label": names[0], "y_label": names[1], "unit": None}
    unit = crs.to_manifest()["unit"]
    x, y = (0, 1) if crs.axes == "xy" else (1, 0)
    return {"x_index": x, "y_index": y, "scale": crs.scale, "x_label": f"easting ({unit}, {crs.crs})",
            "y_label": f"northing ({unit}, {crs.crs})", "unit": UNITS.get(unit, unit)}


@router.get("/models/{name}/survey", responses=NOT_SERVED,
            summary="The model's surveyed positions (per floor), held-out example rows, and its drawing axes")
async def survey(name: str, loaded: CurrentModel):
    model = loaded.model
    s = model.survey
    labels = None if model.floors is None else model.floors.labels
    floor = (lambda code: None) if labels is None else (lambda code: labels.label(int(code)))
    method = model.primary_method
    out = {"model": loaded.name, "bundle_id": loaded.version, "target_names": model.target_names,
           "crs": None if model.crs is None else model.crs.to_manifest(), "display": display(model),
           "coverage": model.coverage, "max_coverage": model.methods[method].calibrator_.max_coverage,
           "primary_method": method, "floor_labels": None if labels is None else
           [labels.label(k) for k in range(len(labels))], "positions": [], "counts": [], "floors": None,
           "examples": []}
    if s is None:
        out["note"] = "this bundle keeps no survey (trained before lmve-train stored one): retrain to see it"
        return FastJSONResponse(out)
    out.update(positions=s.positions, counts=s.counts,
               floors=None if s.floors is None else [floor(c) for c in s.floors],
               examples=[{"features": s.example_features[i], "point": s.example_points[i],
                          "floor": None if s.example_floors is None else floor(s.example_floors[i])}
                         for i in range(len(s.example_points))])
    return FastJSONResponse(out)


@router.get("/models/{name}/feedback/recent", responses=NOT_SERVED,
            summary="The last labelled rows posted to /feedback for the model: point, inside the served region")
async def recent_feedback(name: str, request: Request, loaded: CurrentModel,
                          limit: int = Query(500, ge=1, le=10_000, description="rows, newest first"),
                          method: str | None = Query(None, description="the method whose verdicts to show; "
                                                     "default: the model's primary method")):
    model = loaded.model
    method = method or model.primary_method
    if method not in model.methods:
        raise APIError(404, "Unknown method", f"model {loaded.name!r} has no method {method!r}; it has "
                       f"{', '.join(model.methods)}", field="method", expected=" | ".join(model.methods),
                       received=method)
    state = request.app.state.service_state
    rows = await anyio.to_thread.run_sync(state.recent, loaded.name, method, limit)
    return {"model": loaded.name, "method": method, "rows": rows}
