"""``GET /model``: what is being served."""

import os

import anyio
from fastapi import APIRouter

from service.deps import AppMonitor, CurrentModel
from service.schemas import ModelInfo

router = APIRouter(tags=["model"])


@router.get("/model", response_model=ModelInfo, summary="Bundle metadata: version, dims, coverage, alpha_q, metrics")
async def model_info(loaded: CurrentModel, monitor: AppMonitor):
    model = loaded.model
    m = model.manifest
    return ModelInfo(version=loaded.version, dataset=m.get("dataset", {}), feature_names=m["feature_names"],
                     target_names=m["target_names"], d=m["d"], n=m["n"], coverage=m["coverage"],
                     primary_method=model.primary_method, selection=model.selection,
                     methods={k: {"kind": v["kind"], "alpha_q": v.get("alpha_q"), "n_calibration": v["n_calibration"],
                                  "max_coverage": model.methods[k].calibrator_.max_coverage,
                                  "learned_centre": bool(getattr(model.methods[k].shape_, "moves_centre", False))}
                              for k, v in m["methods"].items()},
                     metrics=m.get("metrics", {}), calibration=m.get("calibration", {}),
                     centre={"type": m["centre"]["type"], **_centre_choice(m)},
                     requires_centers=model.requires_centers,
                     preprocess=(m.get("preprocess") or {}).get("description"),
                     created_at=m.get("created_at"), versions=m.get("versions", {}),
                     feedback=await anyio.to_thread.run_sync(monitor.summary, loaded), worker_pid=os.getpid())


def _centre_choice(manifest: dict) -> dict:
    """How the centre was chosen, as ``lmve-train`` recorded it (older bundles: nothing)."""
    choice = manifest.get("training", {}).get("centre")
    return choice if isinstance(choice, dict) else {}
