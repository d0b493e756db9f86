"""``GET /model``: what is being served."""

from fastapi import APIRouter

from service.deps import CurrentModel
from service.schemas import ModelInfo

router = APIRouter(tags=["model"])


@router.get("/model", response_model=ModelInfo, summary="Bundle metadata: version, dims, coverage, alpha_q, metrics")
async def model_info(loaded: CurrentModel):
    m = loaded.model.manifest
    return ModelInfo(version=loaded.version, dataset=m.get("dataset", {}), feature_names=m["feature_names"],
                     target_names=m["target_names"], d=m["d"], n=m["n"], coverage=m["coverage"],
                     primary_method=loaded.model.primary_method,
                     methods={k: {"kind": v.get("kind", "ellipsoid"), "alpha_q": v.get("alpha_q"),
                                  "n_calibration": v.get("n_calibration", 0)} for k, v in m["methods"].items()},
                     metrics=m.get("metrics", {}), created_at=m.get("created_at"), versions=m.get("versions", {}))
