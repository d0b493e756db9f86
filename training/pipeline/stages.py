"""Data -> calibrated bundle: :func:`train`, the paper's protocol as stages over one
:class:`training.pipeline.run.TrainState`.

Per split seed ``s``: test = 10 % of the rows, calibration = 10 % of the rest (81 / 9 / 10 %; whole groups
with groups, topped up to the calibration groups the level needs, :func:`group_split`); the RSSI step
(``rssi="auto"``) and the standard scaler fitted on the train part; one centre shared by all methods
(:mod:`training.pipeline.centre`); each shape fitted on the train residuals (out-of-fold ones with ``cross_fit``)
and calibrated on the calibration rows; coverage and volume on the test rows; the served method chosen on
held-out rows (:mod:`training.pipeline.served`).

:func:`plan` makes every check that needs no fit, then the stages run in order, each inside the run's
:class:`training.pipeline.meter.StageMeter`. ``docs/concepts/training.md`` gives the reasoning behind each step."""

from __future__ import annotations

import contextlib
import time
from functools import partial, wraps

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
from training.pipeline.run import TrainResult, TrainState
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
    s = plan(dataset, config, split, meter or StageMeter())
    preprocess_stage(s)
    with _progress(s):
        centre_stage(s)
        methods_stage(s)
    site_weights_stage(s)
    model_stage(s)
    if s.floor_classes is not None:
        floors_stage(s)
    test_part_stage(s)
    served_stage(s)
    size_stage(s)
    record_stage(s)
    return s.result()


def plan(dataset: Dataset, config: TrainConfig, split: Split | None, meter: StageMeter) -> TrainState:
    """Every check that needs no fit (a bad value costs nothing), the survey's grouping (a dataset without
    groups whose rows mostly repeat their position is grouped by position, unless ``use_groups`` is off:
    :func:`training.data.datasets.survey_groups`) and the targets' CRS, then the calibration mode
    (:func:`training.calibration.modes.choose_mode`: the split, ``split`` or the default one, each row's unit and
    the calibration rule) and the shapes' folds."""
    from training.calibration.modes import choose_mode
    from training.data.site import crs_of
    from training.pipeline.floors import floor_classes

    eta = check_coverage(config.coverage)
    check_config(config)
    if config.use_groups:
        dataset = survey_groups(dataset)
    crs = crs_of(dataset, None, None, None) if config.crs == "dataset" else config.crs
    floors = floor_classes(dataset, config)
    mode = choose_mode(dataset, config, split, eta)
    split, groups, rule = mode.split, mode.groups, mode.rule
    n_units = count_units(split.train, groups)
    k = config.resolved_cross_fit(groups is not None, n_units)
    if k != 0:
        check_cross_fit(k, n_units)
    if groups is not None and rule != "group-weighted":
        check_calibration_groups(groups, split, eta)
    return TrainState(dataset=dataset, config=config, meter=meter, eta=eta, split=split, mode=mode,
                      n_units=n_units, k=k, floor_classes=floors, crs=crs)


def _stage(name: str, idle_cores: bool = False):
    """Run the decorated stage inside the run's ``meter.stage(name)`` (and, with ``idle_cores``, with the
    numeric libraries' threads on the cores the run leaves idle: :func:`models.parallel.on_idle_cores`)."""
    def wrap(stage):
        @wraps(stage)
        def run(s: TrainState) -> None:
            with s.meter.stage(name), (on_idle_cores() if idle_cores else contextlib.nullcontext()):
                stage(s)
        return run
    return wrap


@contextlib.contextmanager
def _progress(s: TrainState):
    """The run's progress bar over the centre and each method (``config.progress``)."""
    from tqdm.auto import tqdm

    with tqdm(total=1 + len(s.config.methods), desc=f"{s.dataset.name}", disable=not s.config.progress,
              leave=False) as s.bar:
        s.bar.set_postfix_str("centre")
        yield
        s.bar.update()


@_stage("preprocess")
def preprocess_stage(s: TrainState) -> None:
    """The RSSI step and the scaler, fitted on the train part; ``s.Xs``: every row through them."""
    s.preprocess, s.scaler, s.Xs = standardise(s.dataset.X, s.split, s.config)


def methods_stage(s: TrainState) -> None:
    """Each method fitted and calibrated, one stage each (``timings[name]``: its wall time)."""
    for name in s.config.methods:
        if s.bar is not None:
            s.bar.update()
            s.bar.set_postfix_str(name)
        t0 = time.perf_counter()
        with s.meter.stage(name), on_idle_cores():
            s.methods[name], folds = fit_method(s, name)
        if folds is not None:
            s.unit_folds[name] = folds
        s.timings[name] = time.perf_counter() - t0


def fit_method(s: TrainState, name: str) -> tuple[SplitConformalRegressor, list | None]:
    """Method ``name``'s shape fitted on the train rows' residuals about the run's centre and calibrated by the
    run's calibration mode (:meth:`training.calibration.modes.CalibrationMode.conformalize`), with the fold shapes
    the mode kept (``None``: none); a cross-fitted mode's fold shapes of an ellipsoid method leave their figures in
    ``s.fold_figures[name]``."""
    from models import registry

    train = s.split.train
    reg = SplitConformalRegressor(s.config.make_shape(name), centre=s.centre, coverage=s.eta, prefit_centre=True,
                                  calibration=s.rule, random_state=s.config.seed)
    reg.fit(s.Xs[train], s.Y[train], centers=s.centers[train], groups=s.train_groups)
    on_fold = partial(_fold_figures, s, name) if registry.METHODS[name].kind == "ellipsoid" else None
    return s.mode.conformalize(reg, name, _scoring(s), on_fold)


def _scoring(s: TrainState) -> Scoring:
    """What the calibration mode scores with."""
    return Scoring(s.Xs, s.Y, s.centers, s.split, s.config, s.eta, s.unit_cross_fit)


def model_stage(s: TrainState) -> None:
    """The :class:`~models.model.RegionModel` of the calibrated methods, and its typicality step (stage
    ``typicality``)."""
    s.model = RegionModel(feature_names=list(s.dataset.feature_names), target_names=list(s.dataset.target_names),
                          scaler_mean=s.scaler.mean_.copy(), scaler_scale=s.scaler.scale_.copy(), methods=s.methods,
                          coverage=s.eta, preprocess=s.preprocess,
                          readings=ReadingRanges().fit(s.dataset.X, s.preprocess))
    if s.config.typicality:
        with s.meter.stage("typicality"):
            s.model.typicality = fit_typicality(s.Xs, s.split, s.mode.typicality_units(), s.config.seed)


@_stage("floors", idle_cores=True)
def floors_stage(s: TrainState) -> None:
    """The floor classifier on the train part and the joint calibration of floor sets and ellipses
    (:mod:`training.pipeline.floors`)."""
    from training.pipeline.floors import conformalize_floors, fit_floors

    (labels, codes), config = s.floor_classes, s.config
    train, cal = s.split.train, s.split.calibration
    classifier = fit_floors(s.Xs[train], codes[train], labels, config.floor_classifier, folds=s.k or 5,
                            groups=s.train_groups, seed=config.seed)
    s.model.floors = conformalize_floors(classifier, s.methods, s.Xs[train], s.Y[train] - s.centers[train],
                                         s.Xs[cal], s.Y[cal] - s.centers[cal], codes[cal], s.rule, s.groups_of(cal),
                                         config.seed)


def test_part_stage(s: TrainState) -> None:
    """Coverage and volume of every method on the test rows (stage ``test``), with the floors' held-out figures;
    each method's fit seconds and the centre's test error beside them. With no test part (across units,
    cross-fit), the same figures with each unit left out in turn (:meth:`training.calibration.modes.CrossFitMode.held_out`)."""
    test = s.split.test
    if not len(test):  # across units, cross-fit: every unit calibrates; each is left out in turn instead
        with s.meter.stage("test"):
            _units_left_out(s)
        return
    centers = None if s.dataset.centers is None else s.dataset.centers[test]
    with s.meter.stage("test"):
        s.metrics = evaluate(s.model, s.dataset.X[test], s.Y[test], centers=centers, groups=s.groups_of(test))
        if s.floor_classes is not None:
            from training.pipeline.floors import held_out_floor_metrics

            s.model.floors.metrics = held_out_floor_metrics(s.model, s.dataset.X[test], s.Y[test],
                                                            s.floor_classes[1][test], centers)
    for name in s.metrics:
        s.metrics[name]["fit_seconds"] = s.timings[name]
    s.centre_info["test"] = centre_errors(s.Y[test], s.centers[test])


@_stage("primary", idle_cores=True)
def served_stage(s: TrainState) -> None:
    """The method the plain routes serve (:func:`training.pipeline.served.choose_served`): ``model.selection``."""
    s.model.selection = choose_served(s)


@_stage("survey size", idle_cores=True)
def size_stage(s: TrainState) -> None:
    """Survey-size guidance (:func:`training.pipeline.survey_size.survey_size`): ``s.survey_size``."""
    from training.pipeline.survey_size import survey_size

    s.survey_size = survey_size(s)


def _units_left_out(s: TrainState) -> None:
    """:func:`test_part_stage` with no test part: every method's figures on the calibration rows, each unit's
    regions from its fold's models at the threshold of the other units' scores
    (:meth:`training.calibration.modes.CrossFitMode.held_out`), with ``units`` (each unit's coverage: the lowest,
    the mean) and ``held_out`` (how, in words); the fold centres' errors as the centre's test error; the regions
    in ``s.held_out`` (the plot's)."""
    from training.calibration.unit_holdout import unit_coverages

    rows, centres, regions = s.mode.held_out(_scoring(s), s.methods, s.unit_folds)
    units = s.groups_of(rows)
    for name, region in regions.items():
        s.metrics[name] = {**region_metrics(region, s.Y[rows], units),
                           "units": unit_coverages(region.contains(s.Y[rows]), units),
                           "held_out": "each unit's rows scored by its fold's models at the threshold of the other "
                                       "units' scores (leave one unit out)",
                           "fit_seconds": s.timings[name]}
    s.centre_info["test"] = centre_errors(s.Y[rows], centres)
    s.held_out = {"rows": rows, **regions}


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


def _fold_figures(s: TrainState, name: str, shape, fold: np.ndarray, scored: np.ndarray | None = None) -> None:
    """A fold shape's figures of its fold's train rows, kept in ``s.fold_figures[name]``."""
    from training.pipeline.served_volume import unit_figures

    rows = s.split.train[fold]
    s.fold_figures.setdefault(name, []).append(
        (fold, *unit_figures(shape, s.Xs[rows], s.Y[rows] - s.centers[rows], s.eta)))
