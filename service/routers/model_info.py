"""``GET /model`` (the default model) and ``GET /models/{name}``: what a model serves."""

import os

import anyio
from fastapi import APIRouter

from service.deps import AppMonitor, AppRadio, AppShift, CurrentModel, Repository
from service.monitor import Monitor
from service.repository import ModelRepository
from service.radio_follower import RadioFollower
from service.schemas import ModelInfo
from service.shift import ShiftAlarm
from service.state import StateUnavailable
from service.store import Loaded

router = APIRouter(tags=["model"])
NOT_SERVED = {404: {"description": "no model of that name (problem+json listing the models)"},
              503: {"description": "the model has no verified bundle (problem+json with the reason)"}}


async def describe(loaded: Loaded, monitor: Monitor, shift: ShiftAlarm, repository: ModelRepository,
                   radio: RadioFollower) -> ModelInfo:
    """A served model's metadata: its bundle's manifest, the selection, the feedback summary, the shift
    alarm and the radio watch (this worker's pending queries counted first)."""
    watch = await anyio.to_thread.run_sync(_radio, radio, repository, loaded)
    shifted = await anyio.to_thread.run_sync(_shift, shift, repository, loaded)
    shifted["drift"] = watch.get("drift")
    model = loaded.model
    m = model.manifest
    return ModelInfo(name=loaded.name, version=loaded.version, dataset=m.get("dataset", {}),
                     feature_names=m["feature_names"], target_names=m["target_names"], d=m["d"], n=m["n"],
                     coverage=m["coverage"], primary_method=model.primary_method, selection=model.selection,
                     methods={k: {"kind": v["kind"], "alpha_q": v.get("alpha_q"), "n_calibration": v["n_calibration"],
                                  "max_coverage": model.methods[k].calibrator_.max_coverage,
                                  "learned_centre": bool(getattr(model.methods[k].shape_, "moves_centre", False))}
                              for k, v in m["methods"].items()},
                     metrics=m.get("metrics", {}), guarantee=_guarantee(m),
                     calibration={k: v for k, v in m.get("calibration", {}).items() if k not in CALIBRATION_ELSEWHERE},
                     scale=_scale(m),
                     centre={"type": m["centre"]["type"], **_centre_choice(m)},
                     requires_centers=model.requires_centers, floors=_floors(model),
                     preprocess=(m.get("preprocess") or {}).get("description"),
                     created_at=m.get("created_at"), versions=m.get("versions", {}),
                     feedback=await anyio.to_thread.run_sync(monitor.summary, loaded),
                     shift=shifted, radio=watch, worker_pid=os.getpid())


#: the manifest's calibration keys GET /model serves elsewhere (the guarantee at the top, the scale on its own)
CALIBRATION_ELSEWHERE = ("scale", "guarantee", "terms", "n_groups", "exact", "bound")


def _guarantee(manifest: dict) -> dict:
    """The bundle's guarantee, one object: its ``words`` (what the training report and terminal printed) and
    its terms (:func:`models.calibration.conformal.guarantee_terms`); a bundle from before the terms were
    recorded gives what its calibration record holds."""
    cal = manifest.get("calibration") or {}
    terms = cal.get("terms")
    if terms is None:
        exact = cal.get("exact")
        terms = {"level": manifest.get("coverage"), "rule": cal.get("rule"), "n_units": cal.get("n_groups"),
                 "n_rows": cal.get("n_rows"), "mode": cal.get("mode"),
                 "form": None if exact is None else "exact" if exact else "approximate"}
    return {"words": cal.get("guarantee"), **terms}


def _scale(manifest: dict) -> dict | None:
    """The survey's scale, without the extent's coordinates (GET /model stays small; the viewer has the survey)."""
    scale = (manifest.get("calibration") or {}).get("scale")
    return None if scale is None else {k: v for k, v in scale.items() if k not in ("bbox", "hull")}


def _shift(shift: ShiftAlarm, repository: ModelRepository, loaded: Loaded) -> dict:
    """The shift report, this worker's pending queries tested first; with the state unreachable, why."""
    shift.flush(repository)
    try:
        return shift.summary(loaded)
    except StateUnavailable as exc:
        return {"available": False, "reason": f"the state is unreachable: {exc.reason}", "delta": shift.delta}


def _radio(radio: RadioFollower, repository: ModelRepository, loaded: Loaded) -> dict:
    """The radio watch, this worker's pending queries counted first (their decision is followed at the next
    periodic flush); with the state unreachable, why."""
    try:
        radio.flush(repository, follow=False)
        return radio.summary(loaded)
    except StateUnavailable as exc:
        return {"available": False, "mode": radio.mode, "reason": f"the state is unreachable: {exc.reason}"}


@router.get("/model", response_model=ModelInfo, responses=NOT_SERVED,
            summary="The default model's bundle: version, dims, coverage, alpha_q, metrics")
async def model_info(loaded: CurrentModel, monitor: AppMonitor, shift: AppShift, repository: Repository,
                     radio: AppRadio):
    return await describe(loaded, monitor, shift, repository, radio)


@router.get("/models/{name}", response_model=ModelInfo, responses=NOT_SERVED,
            summary="One model's bundle: version, dims, coverage, alpha_q, metrics (as GET /model)")
async def named_model_info(name: str, loaded: CurrentModel, monitor: AppMonitor, shift: AppShift,
                           repository: Repository, radio: AppRadio):
    return await describe(loaded, monitor, shift, repository, radio)


def _centre_choice(manifest: dict) -> dict:
    """How the centre was chosen, as ``lmve-train`` recorded it (older bundles: nothing)."""
    choice = manifest.get("training", {}).get("centre")
    return choice if isinstance(choice, dict) else {}


def _floors(model) -> dict | None:
    """A floor bundle's floor part for ``GET /model``: the manifest's entry and the labels it knows."""
    if model.floors is None:
        return None
    entry = model.manifest["floors"]
    labels = model.floors.labels
    return {"columns": entry["columns"], "labels": [labels.label(k) for k in range(len(labels.values))],
            "classifier": entry["classifier"], "selection": entry.get("selection", {}),
            "metrics": entry.get("metrics", {}), "guarantee": entry["guarantee"]}
