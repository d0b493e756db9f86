"""Recalibrate a fitted model from fresh labelled rows: shared by ``lmve-recalibrate`` and
``POST /admin/recalibrate``, which write the result with :func:`models.bundle.save_recalibrated`.

The new bundle keeps the parent's preprocessing, scaler, centre and shapes; only the calibration
scores change (:meth:`models.model.RegionModel.recalibrated`). Its manifest records the parent's
bundle id, the rows and groups used, the source and when, and states the guarantee in words.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # a type only: the model imports calibration, never the other way
    from models.model import RegionModel

#: ``--group-rule`` / ``group_rule`` names -> calibration rules of :mod:`models.calibration.conformal`
GROUP_RULES = {"subsample": "group-subsample", "pooled": "group-pooled"}


@dataclass(frozen=True)
class Recalibration:
    model: RegionModel
    calibration: dict
    training: dict
    n_rows: int
    n_groups: int | None


def recalibrate(parent: RegionModel, features, points, *, groups=None, grouping: list[str] | None = None,
                centers=None, group_rule: str = "subsample", seed: int = 0, source: dict | None = None,
                floors=None, buildings=None) -> Recalibration:
    """``parent`` recalibrated on ``features`` (k, d) and true ``points`` (k, n); ``groups`` (k,) labels
    rows by group (one score per group under ``group_rule``); a floor bundle needs the rows' ``floors``
    (and ``buildings``). Raises ``InputError`` naming the field for bad rows or too few rows or groups;
    ``parent`` is never modified."""
    rule = None if groups is None else GROUP_RULES[group_rule]
    model = parent.recalibrated(features, points, groups=groups, centers=centers, rule=rule, random_state=seed,
                                floors=floors, buildings=buildings)
    cal = next(iter(model.methods.values())).calibrator_
    n_rows = int(cal.n_rows_)
    n_groups = None if groups is None else int(cal.n_calibration_)
    what = ", ".join(grouping) if grouping else "group"
    unit = "row" if groups is None else f"row from a new {what} group"
    m = parent.manifest
    src = dict(source or {})
    calibration = {"grouping": list(grouping) if grouping else None, "n_groups": n_groups,
                   "guarantee": f"P >= {model.coverage} for a {unit} exchangeable with the {n_rows} fresh rows"
                                f"{' of ' + src['file'] if src.get('file') else ''} (recalibrated; rule {cal.rule})"}
    training = {**(m.get("training") or {}), "recalibrated": {
        "parent_bundle_id": m.get("bundle_id"), "rows": n_rows, "groups": n_groups, "source": src,
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}}
    return Recalibration(model, calibration, training, n_rows, n_groups)


def threshold_changes(parent: RegionModel, model: RegionModel) -> dict[str, tuple[float, float]]:
    """``method -> (old alpha_q, new alpha_q)``."""
    return {name: (float(parent.methods[name].alpha_q_), float(reg.alpha_q_)) for name, reg in model.methods.items()
            if name in parent.methods and np.ndim(reg.alpha_q_) == 0}
