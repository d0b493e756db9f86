"""The bundle's survey (:mod:`models.survey`) and CRS (:mod:`models.geo`) from a training run."""

from __future__ import annotations

import numpy as np

from models.exceptions import InputError
from models.geo import TargetCRS, parse_crs
from models.survey import Survey


def survey_of(dataset, split, floor_codes: np.ndarray | None, seed: int = 0, areas=None, errors=None) -> Survey:
    """The positions of the training and calibration rows (with their floor classes when the bundle has
    floors) and held-out rows of the test part to show (with no test part, calibration rows); ``areas`` and
    ``errors``: one per dataset row (NaN where none), averaged per position (:meth:`Survey.of`)."""
    surveyed = np.concatenate([split.train, split.calibration])
    test = np.asarray(split.test if len(split.test) else split.calibration)
    per = {k: None if v is None else np.asarray(v)[surveyed] for k, v in (("areas", areas), ("errors", errors))}
    return Survey.of(dataset.Y[surveyed], None if floor_codes is None else floor_codes[surveyed],
                     dataset.X[test], dataset.Y[test], None if floor_codes is None else floor_codes[test], seed=seed,
                     **per)


def crs_of(dataset, crs: str | None, axes: str | None, scale: float | None) -> TargetCRS | None:
    """The CRS a run declares (``crs``, ``crs_axes``, ``crs_scale``; else the dataset's), checked against the
    targets: a CRS places 2-D positions. Errors name the field (``crs``, ``crs_axes``, ``crs_scale``) first; the
    command maps it to its flag."""
    try:
        target = parse_crs(crs, axes, scale, default=dataset.crs)
    except InputError as exc:
        field = exc.field
        message = str(exc) if str(exc).startswith(f"{field}:") else f"{field}: {exc}"
        raise InputError(message, field=field, expected=exc.expected, received=exc.received) from None
    if target is not None and dataset.Y.shape[1] != 2:
        raise InputError(f"crs places 2-D positions; the targets have {dataset.Y.shape[1]} columns",
                         field="crs", expected="2 targets", received=f"{dataset.Y.shape[1]} targets")
    return target
