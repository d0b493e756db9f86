"""The centre stage of :func:`training.pipeline.train`: the centre chosen (``centre="auto"``) or weighted
(``"stack"``), fitted on the train part, and every row's centre, with out-of-fold ones for the train rows
when the shapes learn from out-of-fold residuals; across units in cross-fit mode, the unit cross-fit too.

Stages ``centre selection`` (``auto`` or ``stack``), ``centre`` and, in a cross-fitted calibration mode,
``cross-fit`` (:mod:`training.calibration.modes`), each wrapped by the run's
:class:`~training.pipeline.meter.StageMeter`.
"""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np

from models import registry
from models.centres import ClientCentre
from models.parallel import on_idle_cores
from training.pipeline.centre_selection import CRITERIA, RACE_FOLDS, out_of_fold_centers, select_centre
from training.pipeline.config import check_cross_fit
from training.pipeline.run import TrainState


def centre_stage(s: TrainState) -> None:
    """Fit the centre (:func:`fit_centre`), then what the calibration mode needs of it
    (:meth:`~training.calibration.modes.CalibrationMode.fit_centres`: a cross-fitted mode's unit cross-fit, whose
    out-of-fold centres replace the train rows'); ``timings["centre"]`` is the whole step's wall time."""
    t0 = time.perf_counter()
    tuning = prepare_fingerprint(s)
    fit_centre(s, out_of_fold=not s.mode.cross_fitted)
    if tuning is not None:
        s.centre_info["fingerprint"] = fingerprint_record(tuning)
        if hasattr(s.centre, "tuning_"):
            s.centre.tuning_ = tuning
    if "centre selection" in s.meter.stages:
        s.timings["centre_selection"] = s.meter.stages["centre selection"]["seconds"]
    crossed = s.mode.fit_centres(s.dataset, s.config, s.Xs, s.centers, s.centre_info["name"], s.n_units, s.meter)
    if crossed is not None:
        s.unit_cross_fit, s.centers, s.k = crossed.cross_fit, crossed.centers, crossed.k
        s.centre_info.update(crossed.record)
    s.timings["centre"] = time.perf_counter() - t0


def _wants_fingerprint(config) -> bool:
    """Whether the run may fit a fingerprint centre: configured, a candidate of "auto", or a member of the stack."""
    if config.centre == "auto":
        return "fingerprint" in config.centre_candidates
    if config.centre == "stack":
        return "fingerprint" in config.make_centre("stack").members
    return config.centre == "fingerprint"


def prepare_fingerprint(s: TrainState) -> dict | None:
    """The fingerprint centre's reading space (:class:`~models.centres.representations.ReadingSpace`: the RSSI
    step and scaler undone on the RSSI columns) and its configuration, chosen once on the train part by leaving
    each of its units out (the calibration mode's: phones, users or positions; rows without), stage ``fingerprint``.
    ``s.config.centre_context`` then gives both to every fingerprint centre the run fits (selection folds, unit
    folds, the served one), so none searches the grid again. Returns the search's record (``None``: no
    fingerprint centre in this run)."""
    from models.centres.representations import ReadingSpace

    config = s.config
    if s.dataset.centers is not None or not _wants_fingerprint(config):
        return None
    train = s.split.train
    with s.meter.stage("fingerprint"):
        space = ReadingSpace.of(s.preprocess, s.scaler)
        probe = config.make_centre("fingerprint").set_params(space=space, criterion=config.centre_criterion,
                                                            coverage=s.eta)
        probe.fit(s.Xs[train], s.Y[train], groups=s.train_groups)
    context = {"space": space, "criterion": config.centre_criterion, "coverage": s.eta, **probe.chosen_}
    s.config = replace(config, centre_context={**config.centre_context, "fingerprint": context})
    return probe.tuning_


def fingerprint_record(tuning: dict | None, shown: int = 5) -> dict | None:
    """What the manifest and the report say of the fingerprint search: the configuration chosen, its error, the
    textbook configuration's, and the ``shown`` best (``None``: the configuration was given, nothing searched)."""
    if tuning is None:
        return None
    return {"chosen": tuning["chosen"], "error": tuning["error"], "textbook": tuning["textbook"],
            "criterion": tuning["criterion"], "held_out": tuning["held_out"], "units": tuning["units"],
            "best": tuning["candidates"][:shown], "configurations": len(tuning["candidates"]),
            "rule": tuning.get("rule")}


def fit_centre(s: TrainState, out_of_fold: bool = True) -> None:
    """``s.centre``, ``s.centers`` (m, n) for every row (out-of-fold ones for the train rows when ``s.k``
    and ``out_of_fold``; ``s.k`` becomes 5 for a centre that interpolates its training rows) and
    ``s.centre_info``; the client's own estimates when the data set has them."""
    X, Y = s.Xs[s.split.train], s.Y[s.split.train]
    if s.dataset.centers is not None:  # the client's own estimates
        with s.meter.stage("centre"):
            s.centre = ClientCentre().fit(X, Y)
        s.centers = np.array(s.dataset.centers, dtype=np.float64)
        s.centre_info = {"name": "client", "columns": list(s.dataset.centre_columns), "cross_fit": 0}
        return
    name, oof, folds, info = s.config.centre, {}, None, {"name": s.config.centre}
    if name in ("auto", "stack"):
        with s.meter.stage("centre selection"):
            name, oof, folds, info = _select(s, X, Y, complete=out_of_fold)
    with s.meter.stage("centre"), on_idle_cores():
        if s.k == 0 and registry.centre(name).interpolates:
            units = len(X) if s.train_groups is None else len(np.unique(s.train_groups))
            s.k = min(5, units)  # its in-sample residuals are zero: the shapes learn from out-of-fold ones
            check_cross_fit(s.k, units)
        info["cross_fit"] = s.k
        if name == "stack" and oof:  # weighted on the selection's out-of-fold centres: no refit for them
            centre = s.config.make_centre("stack").set_params(cv=folds)
            centre.fit(X, Y, predictions={n: oof[n] for n in centre.members})
        else:
            centre = s.config.make_centre(name).fit(X, Y)
        if folds != s.k:  # the selection's out-of-fold centres serve only with the same folds
            oof = {}
        centers = centre.predict(s.Xs)
        if s.k and out_of_fold:
            centers[s.split.train] = oof[name] if name in oof else out_of_fold_centers(
                X, Y, s.config, s.k, s.train_groups, name=name)
    s.centre, s.centers, s.centre_info = centre, centers, info


def _select(s: TrainState, X: np.ndarray, Y: np.ndarray, complete: bool) -> tuple[str, dict, int, dict]:
    """``centre="auto"``: the candidate of smallest cross-validated error; ``"stack"``: its members'
    out-of-fold centres, once (they weight the blend and, with the same folds, give the shapes' residuals,
    instead of a whole blend per fold). ``(name, out-of-fold centres by candidate, folds, centre_info)``."""
    config, grouped = s.config, s.train_groups is not None
    if config.centre == "auto":
        folds, units = s.k or 5, s.mode.across
        name, errors, oof = select_centre(X, Y, config, folds, s.train_groups, s.bar, complete=complete, units=units)
        kind = "unit " if units else "group " if grouped else ""
        weighing = ", each unit weighing the same" if units else ""
        return name, oof, folds, {
            "name": name, "selected_by": f"{folds}-fold {kind}cross-validation on the train part "
            f"({CRITERIA[config.centre_criterion]} of the Euclidean error{weighing})"
            + _screen_words(config, len(X), units),
            "criterion": config.centre_criterion, "cv": errors, "screen": _screen_record(config, len(X))}
    stack = config.make_centre("stack")
    folds = s.k or stack.cv
    members = replace(config, centre="auto", centre_candidates=(*stack.members, "stack"),
                      centre_screen_rows=None)  # the blend the user asked for, whole
    _, errors, oof = select_centre(X, Y, members, folds, s.train_groups, s.bar)
    return "stack", oof, folds, {"name": "stack", "selected_by": f"--centre stack, weighted on its members' {folds}-"
                                 f"fold {'group ' if grouped else ''}out-of-fold centres", "cv": errors}


def _screen_record(config, rows: int) -> dict:
    """The screen's settings and whether this train part was above its size."""
    n = config.centre_screen_rows
    return {"rows": n, "margin": config.centre_screen_margin, "race_margin": config.centre_race_margin,
            "race_rows": config.centre_race_rows, "applied": n is not None and rows > n}


def _screen_words(config, rows: int, units: bool = False) -> str:
    """How the candidates were screened and raced on a train part of ``rows`` rows, for ``selected_by``."""
    n = config.centre_screen_rows
    if units and n is not None and rows > n:
        return (f"; {rows} train rows: screened on {n} rows of each unit fold, judged "
                f"on all their held-out rows (dropped above {100 * config.centre_screen_margin:.0f} % behind), then "
                "raced fold by fold (dropped once it cannot win); a dropped candidate that beat the chosen one where it "
                "was scored is recalled")
    if n is None or rows <= n:
        if config.centre_race_rows is None or rows < config.centre_race_rows:
            return ""
        return (f"; {rows} train rows: raced fold by fold once {config.centre_race_rows} held-out rows were seen "
                f"and from fold {RACE_FOLDS} on "
                f"(dropped above {100 * config.centre_race_margin:.0f} % behind)")
    return (f"; {rows} train rows: screened on {n} rows of fold 1 (dropped above {100 * config.centre_screen_margin:.0f} "
            f"% behind), then raced fold by fold (dropped above {100 * config.centre_race_margin:.0f} % behind)")
