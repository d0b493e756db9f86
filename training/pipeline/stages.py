"""Data -> calibrated bundle: :func:`train`, the paper's protocol as stages, each a function of the run's
:class:`training.pipeline.run.Plan` and the earlier stages' results that returns its own.

Per split seed ``s``: test = 10 % of the rows, calibration = 10 % of the rest (81 / 9 / 10 %; whole groups
with groups, topped up to the calibration groups the level needs, :func:`group_split`); the RSSI step
(``rssi="auto"``) and the standard scaler fitted on the train part; one centre shared by all methods
(:mod:`training.pipeline.centre`); each shape fitted on the train residuals (out-of-fold ones with ``cross_fit``)
and calibrated on the calibration rows; coverage and volume on the test rows; the served method chosen on
held-out rows (:mod:`training.pipeline.served`).

:func:`plan` makes every check that needs no fit and returns the frozen plan; then :func:`train` calls the
stages in order, passing each the plan, the earlier results it reads and the run's
:class:`training.pipeline.meter.StageMeter` (each stage measured inside it), and gathers what they return. ``docs/concepts/training.md`` gives the reasoning behind each step."""

from __future__ import annotations

import contextlib
import time
from dataclasses import replace
from functools import partial

import numpy as np
from sklearn.preprocessing import StandardScaler

from models._validation import check_coverage
from models.exceptions import InputError
from models.model import RegionModel
from models.parallel import on_idle_cores
from models.predictor import SplitConformalRegressor
from models.preprocessing import RSSIFloor
from models.readings import ReadingRanges
from training.calibration.modes import Scoring, default_split
from training.calibration.splits import (MIN_TEST_GROUPS, MIN_TRAIN_GROUPS, Split, check_calibration_groups, count_units, group_split, groups_needed, paper_split)
from training.data.datasets import Dataset, survey_groups
from training.pipeline.centre import centre_stage
from training.pipeline.centre_selection import CRITERIA, centre_errors, out_of_fold_centers
from training.pipeline.config import METHODS, TrainConfig, check_config, check_cross_fit
from training.pipeline.meter import StageMeter
from training.pipeline.record import record_stage
from training.pipeline.run import Centres, Methods, Plan, Standardised, Tested, TrainResult
from training.pipeline.site_weights import site_weights_stage
from training.pipeline.served import choose_served

#: what other modules import from here (the configuration, the split helpers and the centre's figures live in
#: their own modules)
__all__ = ["CRITERIA", "METHODS", "MIN_TEST_GROUPS", "MIN_TRAIN_GROUPS", "RSSIFloor", "Split", "TrainConfig",
           "TrainResult", "centre_errors", "check_calibration_groups", "default_split", "evaluate", "fit_preprocess",
           "fit_typicality", "group_split", "groups_needed", "out_of_fold_centers", "paper_split", "plan",
           "region_metrics", "standardise", "train"]


def train(dataset: Dataset, config: TrainConfig, split: Split | None = None,
          meter: StageMeter | None = None) -> TrainResult:
    """Fit, calibrate and test every method of a configuration on a dataset.

    :func:`plan` checks everything that needs no fit and chooses the calibration mode; then the stages
    run in order, each stage's wall time and peak memory going to ``meter``.

    Parameters
    ----------
    dataset : Dataset
        Features, positions and, where the survey has them, groups and label columns. Without groups, rows
        that mostly repeat their position are grouped by position (``config.use_groups=False``: rows).
    config : TrainConfig
        What to fit.
    split : Split, default=None
        The parts to use; ``None``: the configuration's default split, seeded.
    meter : StageMeter, default=None
        Where the stages' costs go; ``None``: a new one.

    Returns
    -------
    TrainResult
        The conformalized model, the split, the test figures, the costs and the bundle's records
        (:meth:`TrainResult.save` writes the bundle ``lmve-train`` writes).

    Raises
    ------
    InputError
        A configuration or dataset that cannot be fitted, named before any fit.
    """
    meter = meter or StageMeter()
    p = plan(dataset, config, split)
    x = preprocess_stage(p, meter)
    with _progress(p) as bar:
        c = centre_stage(p, x, meter, bar)
        fitted = methods_stage(p, x, c, meter, bar)
    fitted, weights = site_weights_stage(p, fitted)
    model = model_stage(p, x, fitted, meter)
    if p.floor_classes is not None:
        model.floors = floors_stage(p, x, c, fitted, meter)
    tested = test_part_stage(p, x, c, fitted, model, meter)
    if tested.floors is not None:
        model.floors.metrics = tested.floors
    model.selection = served_stage(p, x, c, fitted, model, tested, meter)
    size = size_stage(p, x, c, fitted, model, meter)
    centre = {**c.info, "test": tested.centre}
    records = record_stage(p, c, model, centre, weights, size, meter)
    model.crs, model.radio_map, model.survey = p.crs, records.radio_map, records.survey
    return TrainResult(model=model, split=p.split, metrics=tested.metrics, timings={**c.seconds, **fitted.seconds},
                       centre=centre, stages=meter.stages, survey_size=size, held_out=tested.held_out,
                       dataset=p.dataset, calibration=records.calibration, training=records.training)


def plan(dataset: Dataset, config: TrainConfig, split: Split | None = None) -> Plan:
    """Every check that needs no fit (a bad value costs nothing), the survey's grouping (a dataset without
    groups whose rows mostly repeat their position is grouped by position, unless ``use_groups`` is off:
    :func:`training.data.datasets.survey_groups`) and the targets' CRS, then the calibration mode
    (:func:`training.calibration.modes.choose_mode`: the split, ``split`` or the default one, each row's unit and
    the calibration rule) and the shapes' folds. Every decision the configuration leaves to the run is made here,
    once: the methods fitted (:meth:`~training.pipeline.config.TrainConfig.resolved_methods`: GE and NLE, the
    service's fallbacks, with the methods asked for; the plan's ``config`` holds them), the projection
    (:meth:`~training.pipeline.config.TrainConfig.target_crs`), the grouping."""
    from training.calibration.modes import choose_mode
    from training.pipeline.floors import floor_classes

    eta = check_coverage(config.coverage)
    check_config(config)
    config = replace(config, methods=config.resolved_methods())
    if config.use_groups:
        dataset = survey_groups(dataset)
    crs = config.target_crs(dataset)
    floors = floor_classes(dataset, config)
    mode = choose_mode(dataset, config, split, eta)
    split, groups, rule = mode.split, mode.groups, mode.rule
    n_units = count_units(split.train, groups)
    k = config.resolved_cross_fit(groups is not None, n_units)
    if k != 0:
        check_cross_fit(k, n_units)
    if groups is not None and rule != "group-weighted":
        check_calibration_groups(groups, split, eta)
    return Plan(dataset=dataset, config=config, eta=eta, split=split, mode=mode, n_units=n_units, k=k,
                floor_classes=floors, crs=crs)


@contextlib.contextmanager
def _progress(p: Plan):
    """The run's progress bar over the centre and each method (``config.progress``)."""
    from tqdm.auto import tqdm

    with tqdm(total=1 + len(p.config.methods), desc=f"{p.dataset.name}", disable=not p.config.progress,
              leave=False) as bar:
        bar.set_postfix_str("centre")
        yield bar
        bar.update()


def preprocess_stage(p: Plan, meter: StageMeter) -> Standardised:
    """The RSSI step and the scaler, fitted on the train part, and every row through them (stage ``preprocess``)."""
    with meter.stage("preprocess"):
        return Standardised(*standardise(p.dataset.X, p.split, p.config))


def methods_stage(p: Plan, x: Standardised, c: Centres, meter: StageMeter, bar=None) -> Methods:
    """Each method fitted and calibrated (:func:`fit_method`), one stage each (``seconds[name]``: its wall time)."""
    fitted, figures, unit_folds, seconds = {}, {}, {}, {}
    for name in c.config.methods:
        if bar is not None:
            bar.update()
            bar.set_postfix_str(name)
        t0 = time.perf_counter()
        with meter.stage(name), on_idle_cores():
            fitted[name], folds, fold_figures = fit_method(p, x, c, name)
        if folds is not None:
            unit_folds[name] = folds
        if fold_figures:
            figures[name] = fold_figures
        seconds[name] = time.perf_counter() - t0
    return Methods(fitted=fitted, fold_figures=figures, unit_folds=unit_folds, seconds=seconds)


def fit_method(p: Plan, x: Standardised, c: Centres, name: str) -> tuple[SplitConformalRegressor, list | None, list]:
    """``(calibrated, folds, figures)``: method ``name``'s shape fitted on the train rows' residuals about the run's
    centre and calibrated by the run's calibration mode
    (:meth:`training.calibration.modes.CalibrationMode.conformalize`), the fold shapes the mode kept (``None``:
    none), and a cross-fitted mode's fold figures of an ellipsoid method (``(fold, scores, volumes)`` per fold: the
    figures of each fold shape on its fold's train rows; empty otherwise)."""
    from models import registry

    train, config = p.split.train, c.config
    reg = SplitConformalRegressor(config.make_shape(name), centre=c.centre, coverage=p.eta, prefit_centre=True,
                                  calibration=p.rule, random_state=config.seed)
    reg.fit(x.Xs[train], p.Y[train], centers=c.centers[train], groups=p.train_groups)
    figures: list = []
    on_fold = partial(_fold_figures, p, x, c, figures) if registry.METHODS[name].kind == "ellipsoid" else None
    calibrated, folds = p.mode.conformalize(reg, name, scoring(p, x, c), on_fold)
    return calibrated, folds, figures


def scoring(p: Plan, x: Standardised, c: Centres) -> Scoring:
    """What the calibration mode scores with (:class:`training.calibration.modes.Scoring`)."""
    return Scoring(x.Xs, p.Y, c.centers, p.split, c.config, p.eta, c.cross_fit)


def model_stage(p: Plan, x: Standardised, fitted: Methods, meter: StageMeter) -> RegionModel:
    """The :class:`~models.model.RegionModel` of the calibrated methods, and its typicality step (stage
    ``typicality``)."""
    model = RegionModel(feature_names=list(p.dataset.feature_names), target_names=list(p.dataset.target_names),
                        scaler_mean=x.scaler.mean_.copy(), scaler_scale=x.scaler.scale_.copy(),
                        methods=dict(fitted.fitted), coverage=p.eta, preprocess=x.preprocess,
                        readings=ReadingRanges().fit(p.dataset.X, x.preprocess))
    if p.config.typicality:
        with meter.stage("typicality"):
            model.typicality = fit_typicality(x.Xs, p.split, p.mode.typicality_units(), p.config.seed)
    return model


def floors_stage(p: Plan, x: Standardised, c: Centres, fitted: Methods, meter: StageMeter):
    """The floor classifier on the train part and the joint calibration of floor sets and ellipses
    (:mod:`training.pipeline.floors`; stage ``floors``): the model's :class:`~models.floors.FloorModel`."""
    from training.pipeline.floors import conformalize_floors, fit_floors

    (labels, codes), config = p.floor_classes, p.config
    train, cal = p.split.train, p.split.calibration
    with meter.stage("floors"), on_idle_cores():
        classifier = fit_floors(x.Xs[train], codes[train], labels, config.floor_classifier, folds=c.k or 5,
                                groups=p.train_groups, seed=config.seed)
        return conformalize_floors(classifier, fitted.fitted, x.Xs[train], p.Y[train] - c.centers[train],
                                   x.Xs[cal], p.Y[cal] - c.centers[cal], codes[cal], p.rule, p.groups_of(cal),
                                   config.seed)


def test_part_stage(p: Plan, x: Standardised, c: Centres, fitted: Methods, model: RegionModel,
                    meter: StageMeter) -> Tested:
    """Coverage and volume of every method on the test rows (stage ``test``), with the floors' held-out figures;
    each method's fit seconds and the centre's test error beside them. With no test part (across units,
    cross-fit), the same figures with each unit left out in turn (:meth:`training.calibration.modes.CrossFitMode.held_out`)."""
    test = p.split.test
    if not len(test):  # across units, cross-fit: every unit calibrates; each is left out in turn instead
        with meter.stage("test"):
            return _units_left_out(p, x, c, fitted)
    centers = None if p.dataset.centers is None else p.dataset.centers[test]
    floors = None
    with meter.stage("test"):
        metrics = evaluate(model, p.dataset.X[test], p.Y[test], centers=centers, groups=p.groups_of(test))
        if p.floor_classes is not None:
            from training.pipeline.floors import held_out_floor_metrics

            floors = held_out_floor_metrics(model, p.dataset.X[test], p.Y[test], p.floor_classes[1][test], centers)
    metrics = {name: {**m, "fit_seconds": fitted.seconds[name]} for name, m in metrics.items()}
    return Tested(metrics=metrics, centre=centre_errors(p.Y[test], c.centers[test]), floors=floors)


def served_stage(p: Plan, x: Standardised, c: Centres, fitted: Methods, model: RegionModel, tested: Tested,
                 meter: StageMeter) -> dict:
    """The method the plain routes serve (:func:`training.pipeline.served.choose_served`, stage ``primary``): the
    model's ``selection``."""
    with meter.stage("primary"), on_idle_cores():
        return choose_served(p, x, c, fitted, model, tested)


def size_stage(p: Plan, x: Standardised, c: Centres, fitted: Methods, model: RegionModel,
               meter: StageMeter) -> dict | None:
    """Survey-size guidance (:func:`training.pipeline.survey_size.survey_size`, stage ``survey size``)."""
    from training.pipeline.survey_size import survey_size

    with meter.stage("survey size"), on_idle_cores():
        return survey_size(p, x, c, fitted, model)


def _units_left_out(p: Plan, x: Standardised, c: Centres, fitted: Methods) -> Tested:
    """:func:`test_part_stage` with no test part: every method's figures on the calibration rows, each unit's
    regions from its fold's models at the threshold of the other units' scores
    (:meth:`training.calibration.modes.CrossFitMode.held_out`), with ``units`` (each unit's coverage: the lowest,
    the mean) and ``held_out`` (how, in words); the fold centres' errors as the centre's test error; the regions
    in ``held_out`` (the plot's)."""
    from training.calibration.unit_holdout import unit_coverages

    rows, centres, regions = p.mode.held_out(scoring(p, x, c), fitted.fitted, fitted.unit_folds)
    units = p.groups_of(rows)
    metrics = {name: {**region_metrics(region, p.Y[rows], units),
                      "units": unit_coverages(region.contains(p.Y[rows]), units),
                      "held_out": "each unit's rows scored by its fold's models at the threshold of the other "
                                  "units' scores (leave one unit out)",
                      "fit_seconds": fitted.seconds[name]} for name, region in regions.items()}
    return Tested(metrics=metrics, centre=centre_errors(p.Y[rows], centres), held_out={"rows": rows, **regions})


def evaluate(model: RegionModel, X_raw: np.ndarray, Y: np.ndarray, coverage: float | None = None,
             centers: np.ndarray | None = None, thresholds: dict | None = None, groups: np.ndarray | None = None) -> dict:
    """Per method: test coverage, mean volume (paper convention and true), the RMSE of the regions'
    centres (the shared centre, or LMVE's corrected one), rows (``centers``: the client's estimates,
    for a client-centre model), and the coverage's interval over the rows or, with ``groups`` (each row's
    unit), over the groups (``coverage_test``, :func:`training.figures.coverage.coverage_interval`).
    ``thresholds`` (``method -> (alpha_q, level)``) replaces the calibrated thresholds of the methods it
    names (:meth:`RegionModel.predict_region`'s)."""
    return {name: region_metrics(model.predict_region(X_raw, method=name, coverage=coverage, centers=centers,
                                                      thresholds=thresholds, typicality=False).regions, Y, groups)
            for name in model.methods}


def region_metrics(region, Y: np.ndarray, groups: np.ndarray | None = None) -> dict:
    """A batch of regions against the true points ``Y``: coverage, mean volume (paper convention and
    true), the threshold, rows, the RMSE of the regions' centres, and the coverage's interval against the
    regions' level, over the rows or the ``groups`` (``coverage_test``)."""
    from training.figures.coverage import coverage_interval

    inside = region.contains(Y)
    return {"coverage": float(inside.mean()),
           "volume_paper": float(region.volume("paper").mean()),
           "volume": float(region.volume("lebesgue").mean()),
           "alpha_q": float(region.alpha_q), "n_test": int(len(Y)),
           "centre_rmse": centre_errors(Y, region.centers)["rmse"],
           "coverage_test": coverage_interval(inside, region.coverage, groups)}


def fit_preprocess(X_train: np.ndarray, config: TrainConfig) -> RSSIFloor | None:
    """The fitted RSSI step (``None`` when off, or when no column qualifies and none was asked for)."""
    if config.rssi == "off":
        return None
    if config.rssi != "auto":
        raise InputError(f"rssi must be 'auto' or 'off'; got {config.rssi!r}", field="rssi", expected="auto | off",
                         received=repr(config.rssi))
    step = RSSIFloor(not_detected=config.not_detected, floor=config.rssi_floor,
                     representation=config.resolved_representation()).fit(X_train)
    if not step.active:
        if config.not_detected is not None:
            raise InputError(f"--not-detected {config.not_detected:g}: no column holds readings in -120..0 dBm and "
                             f"that code only (at least 2 such columns are needed)", field="--not-detected",
                             expected="RSSI columns holding that code", received="none")
        return None
    return step


def standardise(X: np.ndarray, split: Split, config: TrainConfig):
    """``(preprocess, scaler, Xs)``: the RSSI step (or ``None``) and the standard scaler, both fitted
    on the train part, and every row of ``X`` through them (what the centres and shapes see)."""
    preprocess = fit_preprocess(X[split.train], config)
    out = X if preprocess is None else preprocess.transform(X)
    scaler = StandardScaler().fit(out[split.train])
    return preprocess, scaler, scaler.transform(out, copy=out is X)  # the step's copy is scaled in place


def fit_typicality(Xs: np.ndarray, split: Split, units=None, seed: int = 0):
    """The typicality step (:class:`models.typicality.Typicality`) of standardised features ``Xs``: its
    reference from the train part, its calibration scores from the calibration rows, each scored as a query
    of the guarantee would be. A grouped split already keeps the calibration positions out of the train
    part; across ``units`` (m,), each calibration row also leaves its own unit's reference rows out, as a
    new phone has none in the survey. ``None`` when a calibration row has fewer than ``k`` reference rows
    outside its unit (a train part of two units, one of them tiny): the answers then carry no typicality."""
    from models.typicality import Typicality

    train_units = None if units is None else np.asarray(units)[split.train]
    cal_units = None if units is None else np.asarray(units)[split.calibration]
    step = Typicality(seed=seed).fit(Xs[split.train], groups=train_units)
    try:
        return step.calibrate(Xs[split.calibration], groups=cal_units)
    except InputError:
        return None


def _fold_figures(p: Plan, x: Standardised, c: Centres, figures: list, shape, fold: np.ndarray,
                  scored: np.ndarray | None = None) -> None:
    """A fold shape's figures of its fold's train rows, appended to ``figures``."""
    from training.pipeline.served_volume import unit_figures

    rows = p.split.train[fold]
    figures.append((fold, *unit_figures(shape, x.Xs[rows], p.Y[rows] - c.centers[rows], p.eta)))
