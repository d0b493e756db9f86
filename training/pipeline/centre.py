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
from training.pipeline.config import TrainConfig, check_cross_fit
from training.pipeline.meter import StageMeter
from training.pipeline.run import Centres, Plan, Standardised


def centre_stage(p: Plan, x: Standardised, meter: StageMeter, bar=None) -> Centres:
    """The centre (:func:`fit_centre`), then what the calibration mode needs of it
    (:meth:`~training.calibration.modes.CalibrationMode.fit_centres`: a cross-fitted mode's unit cross-fit, whose
    out-of-fold centres replace the train rows'); ``seconds["centre"]`` is the whole step's wall time. ``bar``:
    the run's progress bar, if any."""
    t0 = time.perf_counter()
    config, tuning = prepare_fingerprint(p, x, meter)
    centre, centers, info, k = fit_centre(p, x, config, meter, bar, out_of_fold=not p.mode.cross_fitted)
    if tuning is not None:
        info["fingerprint"] = fingerprint_record(tuning)
        if hasattr(centre, "tuning_"):
            centre.tuning_ = tuning
    seconds = {}
    if "centre selection" in meter.stages:
        seconds["centre_selection"] = meter.stages["centre selection"]["seconds"]
    crossed = p.mode.fit_centres(p.dataset, config, x.Xs, centers, info["name"], p.n_units, meter)
    cross_fit = None
    if crossed is not None:
        cross_fit, centers, k = crossed.cross_fit, crossed.centers, crossed.k
        info.update(crossed.record)
    seconds["centre"] = time.perf_counter() - t0
    return Centres(centre=centre, centers=centers, info=info, k=k, cross_fit=cross_fit, config=config,
                   seconds=seconds)


def _wants_fingerprint(config) -> bool:
    """Whether the run may fit a fingerprint centre: configured, a candidate of "auto", or a member of the stack."""
    if config.centre == "auto":
        return "fingerprint" in config.centre_candidates
    if config.centre == "stack":
        return "fingerprint" in config.make_centre("stack").members
    return config.centre == "fingerprint"


def prepare_fingerprint(p: Plan, x: Standardised, meter: StageMeter) -> tuple[TrainConfig, dict | None]:
    """The fingerprint centre's reading space (:class:`~models.centres.representations.ReadingSpace`: the RSSI
    step and scaler undone on the RSSI columns) and its configuration, chosen once on the train part by leaving
    each of its units out (the calibration mode's: phones, users or positions; rows without), stage ``fingerprint``.
    Returns ``(config, record)``: the plan's configuration whose ``centre_context`` gives both to every fingerprint
    centre the run fits (selection folds, unit folds, the served one), so none searches the grid again, and the
    search's record; the plan's configuration and ``None`` where the run fits no fingerprint centre."""
    from models.centres.representations import ReadingSpace

    config = p.config
    if p.dataset.centers is not None or not _wants_fingerprint(config):
        return config, None
    train = p.split.train
    with meter.stage("fingerprint"):
        space = ReadingSpace.of(x.preprocess, x.scaler)
        probe = config.make_centre("fingerprint").set_params(space=space, criterion=config.centre_criterion,
                                                            coverage=p.eta)
        probe.fit(x.Xs[train], p.Y[train], groups=p.train_groups)
    context = {"space": space, "criterion": config.centre_criterion, "coverage": p.eta, **probe.chosen_}
    return replace(config, centre_context={**config.centre_context, "fingerprint": context}), probe.tuning_


def fingerprint_record(tuning: dict | None, shown: int = 5) -> dict | None:
    """What the manifest and the report say of the fingerprint search: the configuration chosen, its error, the
    textbook configuration's, and the ``shown`` best (``None``: the configuration was given, nothing searched)."""
    if tuning is None:
        return None
    return {"chosen": tuning["chosen"], "error": tuning["error"], "textbook": tuning["textbook"],
            "criterion": tuning["criterion"], "held_out": tuning["held_out"], "units": tuning["units"],
            "best": tuning["candidates"][:shown], "configurations": len(tuning["candidates"]),
            "rule": tuning.get("rule")}


def fit_centre(p: Plan, x: Standardised, config: TrainConfig, meter: StageMeter, bar=None,
               out_of_fold: bool = True) -> tuple:
    """``(centre, centers, info, k)``: the centre fitted on the train part, every row's centre (m, n) (out-of-fold
    ones for the train rows when ``k`` and ``out_of_fold``), its record, and the shapes' folds (the plan's, or 5
    for a centre that interpolates its training rows); the client's own estimates when the data set has them."""
    X, Y, k = x.Xs[p.split.train], p.Y[p.split.train], p.k
    if p.dataset.centers is not None:  # the client's own estimates
        with meter.stage("centre"):
            centre = ClientCentre().fit(X, Y)
        info = {"name": "client", "columns": list(p.dataset.centre_columns), "cross_fit": 0}
        return centre, np.array(p.dataset.centers, dtype=np.float64), info, k
    name, oof, folds, info = config.centre, {}, None, {"name": config.centre}
    if name in ("auto", "stack"):
        with meter.stage("centre selection"):
            name, oof, folds, info = _select(p, config, X, Y, bar, complete=out_of_fold)
    with meter.stage("centre"), on_idle_cores():
        if k == 0 and registry.centre(name).interpolates:
            units = len(X) if p.train_groups is None else len(np.unique(p.train_groups))
            k = min(5, units)  # its in-sample residuals are zero: the shapes learn from out-of-fold ones
            check_cross_fit(k, units)
        info["cross_fit"] = k
        if name == "stack" and oof:  # weighted on the selection's out-of-fold centres: no refit for them
            centre = config.make_centre("stack").set_params(cv=folds)
            centre.fit(X, Y, predictions={n: oof[n] for n in centre.members})
        else:
            centre = config.make_centre(name).fit(X, Y)
        if folds != k:  # the selection's out-of-fold centres serve only with the same folds
            oof = {}
        centers = centre.predict(x.Xs)
        if k and out_of_fold:
            centers[p.split.train] = oof[name] if name in oof else out_of_fold_centers(
                X, Y, config, k, p.train_groups, name=name)
    return centre, centers, info, k


def _select(p: Plan, config: TrainConfig, X: np.ndarray, Y: np.ndarray, bar, complete: bool) -> tuple[str, dict, int, dict]:
    """``centre="auto"``: the candidate of smallest cross-validated error; ``"stack"``: its members'
    out-of-fold centres, once (they weight the blend and, with the same folds, give the shapes' residuals,
    instead of a whole blend per fold). ``(name, out-of-fold centres by candidate, folds, centre_info)``."""
    grouped = p.train_groups is not None
    if config.centre == "auto":
        folds, units = p.k or 5, p.mode.across
        name, errors, oof = select_centre(X, Y, config, folds, p.train_groups, bar, complete=complete, units=units)
        kind = "unit " if units else "group " if grouped else ""
        weighing = ", each unit weighing the same" if units else ""
        return name, oof, folds, {
            "name": name, "selected_by": f"{folds}-fold {kind}cross-validation on the train part "
            f"({CRITERIA[config.centre_criterion]} of the Euclidean error{weighing})"
            + _screen_words(config, len(X), units),
            "criterion": config.centre_criterion, "cv": errors, "screen": _screen_record(config, len(X))}
    stack = config.make_centre("stack")
    folds = p.k or stack.cv
    members = replace(config, centre="auto", centre_candidates=(*stack.members, "stack"),
                      centre_screen_rows=None)  # the blend the user asked for, whole
    _, errors, oof = select_centre(X, Y, members, folds, p.train_groups, bar)
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
