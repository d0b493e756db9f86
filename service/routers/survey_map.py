"""``GET /model/survey-map`` and ``GET /models/{name}/survey-map``: where a model's regions are large, as GeoJSON.

The survey map (:mod:`models.survey_map`) of the bundle's survey, as :mod:`models.survey_geojson` writes it: a
grid of cells over the surveyed positions' hull with each cell's expected region area and centre error; with
``add``, the plan of that many positions to survey next (:mod:`models.survey_plan`) as Points in walking order.
Read from the bundle alone (no model call), in a worker thread: a 200-position map costs milliseconds, a plan
of 30 positions about half a second.
"""

from __future__ import annotations

import anyio
from fastapi import APIRouter, Query

from service.deps import CurrentModel
from service.error_handlers import FastJSONResponse
from service.exceptions import APIError
from service.geojson import MEDIA_TYPE

router = APIRouter(tags=["model"])
RESPONSES = {200: {"content": {MEDIA_TYPE: {}}, "description": "a GeoJSON FeatureCollection of the map's cells "
                   "(and the plan's proposals and walk)"},
             404: {"description": "no model of that name"},
             409: {"description": "the bundle keeps no survey map (not a survey, or trained before the map): retrain"},
             422: {"description": "a query parameter out of range"},
             503: {"description": "the model has no verified bundle"}}


def survey_map_collection(model, cells: int, floor: int | None, add: int, seed: int, plane: bool) -> dict:
    """The FeatureCollection (in a worker thread): the map of ``model`` 's survey and, with ``add``, its plan."""
    from models.survey_geojson import feature_collection
    from models.survey_map import survey_map
    from models.survey_plan import plan

    survey = model.survey
    if survey is None or survey.areas is None:
        raise APIError(409, "No survey map", "this bundle keeps no per-position region areas (not a survey grouped "
                       "by position, or trained before the survey map): retrain it with lmve-train to map it")
    smap = survey_map(survey, cells=cells, floor=floor, method=model.primary_method)
    chosen = plan(smap, add, seed=seed) if add else None
    return feature_collection(smap, model.crs, chosen, plane=plane)


async def _answer(loaded, cells: int, floor: int | None, add: int, seed: int, coordinates: str):
    out = await anyio.to_thread.run_sync(survey_map_collection, loaded.model, cells, floor, add, seed,
                                         coordinates == "plane")  # an InputError: 422, as every route answers it
    return FastJSONResponse({"model": loaded.name, "bundle_id": loaded.version, **out}, media_type=MEDIA_TYPE)


CELLS = Query(40, ge=2, le=200, description="cells along the extent's longer side")
FLOOR = Query(None, ge=0, description="a floor bundle: the floor code whose positions to map (default: all)")
ADD = Query(0, ge=0, le=500, description="positions to plan (Points in walking order); 0: the map alone")
SEED = Query(0, ge=0, description="the plan's seed (candidate jitter, ties)")
COORDINATES = Query("auto", pattern="^(auto|plane)$", description="auto: WGS84 with a CRS; plane: target coordinates")


@router.get("/model/survey-map", responses=RESPONSES, summary="The default model's survey map: expected region "
            "area per cell (GeoJSON), with add=N the positions to survey next")
async def default_survey_map(loaded: CurrentModel, cells: int = CELLS, floor: int | None = FLOOR, add: int = ADD,
                             seed: int = SEED, coordinates: str = COORDINATES):
    return await _answer(loaded, cells, floor, add, seed, coordinates)


@router.get("/models/{name}/survey-map", responses=RESPONSES, summary="One model's survey map (as GET "
            "/model/survey-map)")
async def named_survey_map(name: str, loaded: CurrentModel, cells: int = CELLS, floor: int | None = FLOOR,
                           add: int = ADD, seed: int = SEED, coordinates: str = COORDINATES):
    return await _answer(loaded, cells, floor, add, seed, coordinates)
