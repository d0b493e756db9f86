"""Data -> calibrated bundle, following the paper's protocol (SPEC sections 2-5).

Per split seed ``s``:

1. test = 10 % of the rows (shuffled with ``s``); of the rest, calibration = 10 %
   (81 % train, 9 % calibration, 10 % test);
2. optionally (``rssi="auto"``), "not detected" RSSI codes mapped to a floor (a step fitted on the
   train part and stored); X standardised with the train part's mean and std (constant columns stay 0);
3. one centre fitted on the train part, shared by all methods (``centre="auto"``: the candidate of
   smallest cross-validated error on the train part, group folds with groups);
4. each shape method fitted on the train residuals (LMVE chooses its configuration on a
   held-out slice of the *train* part, never on calibration rows) and calibrated on the
   calibration rows; with ``cross_fit=k`` (beyond the paper) the train residuals are
   out-of-fold ones: each fold's rows get the centre fitted on the other ``k - 1`` folds, so the
   shapes learn from residuals distributed like the calibration and test rows' (a centre's
   residuals on its own training rows are smaller and shaped by its loss; boosted trees and
   kNN nearly reproduce their training rows). ``centre="auto"`` does this by default with the
   selection's folds, whose out-of-fold centres it has already computed;
5. coverage and volume measured on the test rows;
6. the served method chosen (``primary="auto"``): the ellipsoid method of smallest expected calibrated
   volume on held-out rows, the train part cross-fitted (``primary_folds``) and the test rows,
   reading no calibration row, only the calibration part's size (:mod:`training.primary`).

With groups, a split whose calibration part holds too few groups for the level takes whole groups
from the train part (and the test part, down to one group) until it holds enough
(:func:`group_split`; SPEC section 9), and says so in ``Split.adjustment``.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace

import numpy as np
from sklearn.preprocessing import StandardScaler

from models import registry
from models._validation import check_coverage
from models.exceptions import InputError
from models.centres import ClientCentre
from models.model import RegionModel
from models.predictor import SplitConformalRegressor
from models.preprocessing import RSSIFloor
from training.datasets import Dataset
from models.parallel import on_idle_cores
from training.primary import (MIN_UNITS, check_folds, check_primary, check_tolerance, choose, cross_fit_figures,
                              ellipsoid_figures, leader_excess, stop_reason)
from training.stages import StageMeter
from training.splits import (MIN_TEST_GROUPS, MIN_TRAIN_GROUPS, Split, _floor, group_split,  # noqa: F401
                             groups_needed, paper_split)
from training.selection import CRITERIA, MIN_SCREEN_ROWS, RACE_FOLDS, centre_errors, out_of_fold_centers, select_centre

METHODS = tuple(registry.METHODS)


@dataclass
class TrainConfig:
    """What to fit: the level, the split seed, the methods (registry names) and their parameters
    (``method_params[name]``), and the centre (a registry name, with ``centre_params`` overrides)."""

    coverage: float = 0.9
    seed: int = 0
    methods: tuple[str, ...] = METHODS
    device: str = "auto"
    method_params: dict = field(default_factory=dict)
    centre: str = "paper"
    centre_params: dict = field(default_factory=dict)
    progress: bool = False
    #: 0: shapes learn from the centre's own training residuals (the paper); k >= 2: from k-fold
    #: out-of-fold residuals (the served centre is still the one fitted on all training rows);
    #: None: 5 with centre="auto" (the selection's folds: no extra fit) or when the dataset has
    #: groups (group folds), else 0
    cross_fit: int | None = None
    #: the calibration rule (models.calibration.conformal.RULES); None: "rows", or "group-subsample" with groups
    calibration: str | None = None
    #: with groups: whether the split and calibration use them (False: the paper's row protocol)
    use_groups: bool = True
    #: "auto": map the "not detected" codes of RSSI columns to a floor (models.preprocessing); "off": no step
    rssi: str = "off"
    not_detected: float | None = None
    rssi_floor: float | None = None
    #: how the RSSI step re-expresses the readings (models.preprocessing.REPRESENTATIONS), or "auto":
    #: "relative" with ``calibrate_across`` (a new phone's offset cancels), "dbm" otherwise
    rssi_representation: str = "auto"
    #: what centre="auto" chooses from. Not among them by default: "mlp" (six network fits per
    #: selection, the slowest candidate by far) and "stack" (the blend of the others, weighted on their out-of-fold
    #: centres, no fit of its own: it won the row-split benchmark on ble_rssi, but on the grouped
    #: synthetic survey it helped GE and NLE more than LMVE, see benchmarks/results/stack_grouped.md);
    #: ask for them with a candidates list
    centre_candidates: tuple[str, ...] = ("paper", "scaled", "knn", "hgb", "gp")
    #: what centre="auto" minimises over the candidates' out-of-fold Euclidean errors: "rmse", or
    #: "quantile", the error at the coverage level (the distance a region must reach)
    centre_criterion: str = "rmse"
    #: centre="auto" on a train part above this many rows screens the candidates on this many rows of
    #: one fold, then races the survivors fold by fold (training.selection); None: every candidate on
    #: every fold with all rows, whatever the size
    centre_screen_rows: int | None = 5000
    #: dropped at the screen when its error is more than this share above the best candidate's: the race's
    #: margin and what two and a half times the rows moved a candidate's standing on UJIIndoorLoc (hgb 17.9 %
    #: behind knn on the screen's 5,000 rows, 19.4 % on fold 1's 12,821; its full fold then cost 40 s)
    centre_screen_margin: float = 0.15
    #: dropped between folds of the race when its error so far is more than this share above the best's
    centre_race_margin: float = 0.10
    #: below centre_screen_rows the race starts once the folds seen hold this many rows (and from fold
    #: training.selection.RACE_FOLDS on); None: only above it
    #: (centre_screen_rows=None: no race either)
    centre_race_rows: int | None = 500
    #: the method the plain routes serve: "auto" (the smallest on held-out rows, training.primary) or an
    #: ellipsoid method's name
    primary: str = "auto"
    #: the folds of the train part whose out-of-fold rows join the test rows in that choice (training.primary;
    #: each costs one more fit of every ellipsoid method, at most the train part's groups); 0: the test part alone
    primary_folds: int = 3
    #: the cross-fit stops (or never starts) once the leader's expected volume is within this share of the
    #: smallest with 95 % confidence on the held-out rows so far (training.primary.leader_excess); None: every fold
    primary_tolerance: float | None = 0.05
    #: per-row label columns (``Dataset.meta``: PHONEID, USERID, a day) whose units the test and calibration
    #: parts hold out of training (training.across); the guarantee is then for a new unit. Empty: off
    calibrate_across: tuple[str, ...] = ()
    #: how ``calibrate_across`` scores its calibration rows (training.across.MODES): "cross-fit" every
    #: training unit by a model of its unit fold (all units calibrate; approximate), "held-out" only
    #: units held out of training (exact with 9 or more at 0.9; few units in a survey)
    across_mode: str = "cross-fit"
    #: cross-fit mode: the centre's unit folds (one unit per fold up to this many units; the shapes keep
    #: ``cross_fit`` or 5): fold centres that miss a fifth of the units over-cover (training.across.UnitCrossFit)
    across_centre_folds: int = 20
    #: ... while the served centre's fit time times the folds stays within this many seconds (at least 5
    #: folds whatever it costs; None: no limit): UJIIndoorLoc's k-NN refits 13 times in 2 s, its hgb
    #: (22 s a fit) would take 280 s, beyond issue 69's budget for the whole command (360 s)
    across_centre_seconds: float | None = 60.0
    #: fit the queries' typicality step (models.typicality: their conformal p-value and the shift alarm's
    #: scores) on the train part, calibrated on the calibration rows (across units: each row without its unit)
    typicality: bool = True
    #: the per-row label column (``Dataset.meta``) holding each row's floor: the bundle then answers a floor set
    #: beside each ellipse, both calibrated on one joint score (training.floors, models.floors). None: off
    floor_column: str | None = None
    #: with ``floor_column``: the column of each row's building (the floors are then (building, floor) pairs)
    building_column: str | None = None
    #: the floor classifier: "auto" (the candidate of smallest cross-validated Brier score) or one of
    #: models.floors.CLASSIFIERS
    floor_classifier: str = "auto"

    def grouped(self, dataset) -> bool:
        return self.use_groups and getattr(dataset, "groups", None) is not None

    def resolved_cross_fit(self, grouped: bool, n_units: int | None = None) -> int:
        """The fold count: ``cross_fit`` when set, else 5 with groups or ``centre="auto"`` (at most
        ``n_units``, the train part's groups or rows, and 0 when fewer than 2), else 0."""
        if self.cross_fit is not None:
            return self.cross_fit
        k = 5 if grouped or self.centre == "auto" else 0
        return k if n_units is None or n_units >= k else (n_units if n_units >= 2 else 0)

    def resolved_representation(self) -> str:
        """``rssi_representation``, with "auto" resolved: "relative" across units, else "dbm"."""
        if self.rssi_representation == "auto":
            return "relative" if self.calibrate_across else "dbm"
        return self.rssi_representation

    def resolved_rule(self, grouped: bool) -> str:
        from models.calibration.conformal import check_rule

        return check_rule(self.calibration or ("group-subsample" if grouped else "rows"))

    def make_shape(self, name: str):
        return registry.method(name).make(seed=self.seed, device=self.device, progress=self.progress,
                                          **self.method_params.get(name, {}))

    def make_centre(self, name: str | None = None):
        """A new centre: ``name`` (default ``self.centre``) with ``centre_params`` for the configured one."""
        import inspect

        name = name or self.centre
        spec = registry.centre(name)
        accepts = inspect.signature(spec.estimator).parameters
        run = {k: v for k, v in (("seed", self.seed), ("device", self.device)) if k in accepts}  # the MLP's
        if name == "stack":  # seeded; with centre="auto", a blend of the other candidates
            run = {"random_state": self.seed}
            if self.centre == "auto":
                run["members"] = tuple(n for n in self.centre_candidates if n != "stack")
        return spec.make(**run, **(self.centre_params if name == self.centre else {}))


@dataclass
class TrainResult:
    model: RegionModel
    split: Split
    metrics: dict
    timings: dict
    #: the centre used, and with centre="auto" every candidate's cross-validated error
    centre: dict = field(default_factory=dict)
    #: wall seconds and peak resident MiB per stage (training.stages.StageMeter)
    stages: dict = field(default_factory=dict)


def evaluate(model: RegionModel, X_raw: np.ndarray, Y: np.ndarray, coverage: float | None = None,
             centers: np.ndarray | None = None, thresholds: dict | None = None) -> dict:
    """Per method: test coverage, mean volume (paper convention and true), the RMSE of the regions'
    centres (the shared centre, or LMVE's corrected one), rows (``centers``: the client's estimates,
    for a client-centre model). ``thresholds`` (``method -> (alpha_q, level)``) replaces the calibrated
    thresholds of the methods it names (:meth:`RegionModel.predict_region`'s)."""
    return {name: region_metrics(model.predict_region(X_raw, method=name, coverage=coverage, centers=centers,
                                                      thresholds=thresholds, typicality=False).regions, Y)
            for name in model.methods}


def region_metrics(region, Y: np.ndarray) -> dict:
    """A batch of regions against the true points ``Y``: coverage, mean volume (paper convention and
    true), the threshold, rows, and the RMSE of the regions' centres."""
    return {"coverage": float(region.contains(Y).mean()),
            "volume_paper": float(region.volume("paper").mean()),
            "volume": float(region.volume("lebesgue").mean()),
            "alpha_q": float(region.alpha_q), "n_test": int(len(Y)),
            "centre_rmse": centre_errors(Y, region.centers)["rmse"]}


def check_calibration_groups(groups, split: Split, eta: float) -> None:
    """Refuse a grouped split whose calibration groups cannot attain ``eta`` (``m_g / (m_g + 1) < eta``)."""
    from models.calibration.conformal import group_codes, max_coverage

    cal = np.asarray(groups)[split.calibration]
    m_g = int(group_codes(cal, len(cal)).max()) + 1
    top = max_coverage(m_g)
    if eta > top:
        n_all = int(group_codes(groups, len(groups)).max()) + 1
        need = math.ceil(eta / (1 - eta) - 1e-9)
        raise InputError(f"the calibration part holds {m_g} groups (of {n_all}), which attain coverage at most "
                         f"{top:.4g} (m / (m + 1) per group); coverage {eta} needs at least {need} calibration "
                         f"groups, about {need * 11} groups in all", field="groups",
                         expected=f"at least {need} calibration groups", received=f"{m_g}")


def _check_cross_fit(k, m: int) -> int:
    if isinstance(k, bool) or not isinstance(k, int) or not 2 <= k <= m:
        raise InputError(f"cross_fit must be 0 (off) or a fold count in [2, {m}]; got {k!r}")
    return k


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


def default_split(dataset: Dataset, config: TrainConfig) -> Split:
    """The split :func:`train` uses when given none: over whole groups when the config uses the
    dataset's groups, the paper's row split otherwise (both seeded with ``config.seed``); with
    ``calibrate_across``, over its units (:func:`training.across.across_split`)."""
    if config.calibrate_across:
        from training.across import across_split

        return across_split(dataset if config.grouped(dataset) else replace(dataset, groups=None),
                            config.calibrate_across, config.seed, config.coverage, mode=config.across_mode,
                            folds=config.cross_fit or 5)
    if config.grouped(dataset):
        return group_split(dataset.groups, config.seed, coverage=config.coverage)
    return paper_split(dataset.X.shape[0], config.seed)


def standardise(X: np.ndarray, split: Split, config: TrainConfig):
    """``(preprocess, scaler, Xs)``: the RSSI step (or ``None``) and the standard scaler, both fitted
    on the train part, and every row of ``X`` through them (what the centres and shapes see)."""
    preprocess = fit_preprocess(X[split.train], config)
    if preprocess is not None:
        X = preprocess.transform(X)
    scaler = StandardScaler().fit(X[split.train])
    return preprocess, scaler, scaler.transform(X)


def train(dataset: Dataset, config: TrainConfig, split: Split | None = None,
          meter: StageMeter | None = None) -> TrainResult:
    """Fit, calibrate and test every method of ``config`` on ``dataset``; each stage's wall time and peak
    memory go to ``meter`` (a new :class:`training.stages.StageMeter` by default; ``TrainResult.stages``)."""
    from tqdm.auto import tqdm

    meter = meter or StageMeter()

    eta = check_coverage(config.coverage)
    if not config.methods:
        raise InputError(f"methods must be a non-empty subset of {', '.join(METHODS)}; got none", field="methods",
                         expected=f"a subset of {', '.join(METHODS)}", received="none")
    for name in config.methods:
        registry.method(name)
    if config.centre != "auto":
        registry.centre(config.centre)
    for name in config.centre_candidates if config.centre == "auto" else ():
        registry.centre(name)
    if config.centre_criterion not in CRITERIA:
        raise InputError(f"centre_criterion must be one of {', '.join(CRITERIA)}; got {config.centre_criterion!r}",
                         field="centre_criterion", expected=" | ".join(CRITERIA), received=repr(config.centre_criterion))
    _check_screen(config)
    others = [n for n in config.centre_candidates if n != "stack"]
    if config.centre == "auto" and "stack" in config.centre_candidates and len(others) < 2:
        raise InputError(f"the candidate stack blends the other candidates, so it needs at least two of them; got "
                         f"{', '.join(config.centre_candidates)}", field="centre_candidates",
                         expected="stack with at least two other candidates", received=", ".join(others) or "none")
    floor_classes = _floor_classes(dataset, config)
    X, Y = dataset.X, dataset.Y
    grouped = config.grouped(dataset)
    groups = dataset.groups if grouped else None
    if config.calibrate_across:  # the units are the groups of everything after the split
        from models.calibration.conformal import check_rule
        from training.across import unit_codes

        units = unit_codes(dataset, config.calibrate_across)
        split = split or default_split(dataset, config)
        grouped, groups = True, units
        cross = (split.across or {}).get("mode", config.across_mode) == "cross-fit"
        if cross:  # before any fitting: a bad value costs nothing
            from training.across import check_centre_folds, check_centre_seconds

            check_centre_folds(config.across_centre_folds)
            check_centre_seconds(config.across_centre_seconds)
        if config.calibration:
            rule = check_rule(config.calibration)
        elif split.across:
            rule = split.across["rule"]
        else:  # a caller's split: exact when its calibration units, held out of training, attain the level
            exact = not cross and _units(split.calibration, units) >= groups_needed(eta)
            rule = "group-subsample" if exact else "group-weighted"
    else:
        cross, rule = False, config.resolved_rule(grouped)
    if rule != "rows" and not grouped:
        raise InputError(f"calibration rule {rule!r} needs groups; the rows have none (name them with --groups)",
                         field="calibration", expected="rows", received=rule)
    check_primary(config.primary, config.methods)
    check_folds(config.primary_folds)
    check_tolerance(config.primary_tolerance)
    split = split or default_split(dataset, config)
    train_groups = None if groups is None else np.asarray(groups)[split.train]
    n_units = len(split.train) if train_groups is None else len(np.unique(train_groups, axis=0))
    k = config.resolved_cross_fit(grouped, n_units)
    if k != 0:  # before any fitting: a bad value costs nothing
        _check_cross_fit(k, n_units)
    if grouped and rule != "group-weighted":
        check_calibration_groups(groups, split, eta)
    with meter.stage("preprocess"):
        preprocess, scaler, Xs = standardise(X, split, config)
    timings = {}
    bar = tqdm(["centre", *config.methods], desc=f"{dataset.name}", disable=not config.progress, leave=False)
    methods = {}
    fold_figures: dict = {}  # --calibrate-across cross-fit: each ellipsoid's unit-fold figures of the train rows
    for step in bar:
        bar.set_postfix_str(step)
        t0 = time.perf_counter()
        if step == "centre":
            centre, centers, centre_info, k = _fit_centre(dataset, config, Xs, split, k, train_groups, bar, meter,
                                                          out_of_fold=not cross)
            if "centre selection" in meter.stages:
                timings["centre_selection"] = meter.stages["centre selection"]["seconds"]
            if cross:
                with meter.stage("cross-fit"), on_idle_cores():
                    cross_fit = _cross_fit_units(dataset, config, Xs, split, groups, centre_info, centers,
                                                 meter.stages.get("centre", {}).get("seconds"))
                centers[split.train] = cross_fit.train_centres_
                k = centre_info["cross_fit"] = len(cross_fit.folds_)
                centre_info["centre_folds"] = cross_fit.centre_folds_
        else:
            with meter.stage(step), on_idle_cores():
                reg = SplitConformalRegressor(config.make_shape(step), centre=centre, coverage=eta,
                                              prefit_centre=True, calibration=rule, random_state=config.seed)
                reg.fit(Xs[split.train], Y[split.train], centers=centers[split.train], groups=train_groups)
                if cross:
                    reg = _conformalize_across(reg, cross_fit, config, step, rule, eta, Xs, Y, split, groups, centers,
                                               fold_figures)
                else:
                    reg.conformalize(Xs[split.calibration], Y[split.calibration], centers=centers[split.calibration],
                                     groups=None if groups is None else np.asarray(groups)[split.calibration])
                methods[step] = reg
        timings[step] = time.perf_counter() - t0
    bar.close()
    model = RegionModel(feature_names=list(dataset.feature_names), target_names=list(dataset.target_names),
                        scaler_mean=scaler.mean_.copy(), scaler_scale=scaler.scale_.copy(), methods=methods,
                        coverage=eta, preprocess=preprocess)
    if config.typicality:
        with meter.stage("typicality"):
            model.typicality = fit_typicality(Xs, split, groups if config.calibrate_across else None, config.seed)
    if floor_classes is not None:
        from training.floors import conformalize_floors, fit_floors

        labels, codes = floor_classes
        with meter.stage("floors"), on_idle_cores():
            cal_groups = None if groups is None else np.asarray(groups)[split.calibration]
            model.floors = conformalize_floors(
                fit_floors(Xs[split.train], codes[split.train], labels, config.floor_classifier, folds=k or 5,
                           groups=train_groups, seed=config.seed),
                methods, Xs[split.train], Y[split.train] - centers[split.train], Xs[split.calibration],
                Y[split.calibration] - centers[split.calibration], codes[split.calibration], rule, cal_groups,
                config.seed)
    test_centers = None if dataset.centers is None else dataset.centers[split.test]
    with meter.stage("test"):
        metrics = evaluate(model, dataset.X[split.test], Y[split.test], centers=test_centers)
        if floor_classes is not None:
            from training.floors import held_out_floor_metrics

            model.floors.metrics = held_out_floor_metrics(model, dataset.X[split.test], Y[split.test],
                                                          floor_classes[1][split.test], test_centers)
    for name in metrics:
        metrics[name]["fit_seconds"] = timings[name]
    centre_info["test"] = centre_errors(Y[split.test], centers[split.test])
    with meter.stage("primary"), on_idle_cores():
        model.selection = _choose_primary(model, dataset, config, split, Xs, Y, centers, centre, eta, rule, groups,
                                          train_groups, n_units, fold_figures if cross else None)
    return TrainResult(model=model, split=split, metrics=metrics, timings=timings, centre=centre_info,
                       stages=meter.stages)


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


def _choose_primary(model, dataset, config, split, Xs, Y, centers, centre, eta, rule, groups, train_groups,
                    n_units, unit_folds: dict | None = None) -> dict:
    """The model's ``selection`` (training.primary): the served method by expected calibrated volume on the
    test (or selection) rows, the train part's ``primary_folds`` cross-fit added fold by fold until the
    leader is within ``primary_tolerance`` of the best (:func:`training.primary.leader_excess`).

    ``unit_folds`` (``--calibrate-across`` in cross-fit mode: per ellipsoid method, its unit-fold shapes'
    figures of their folds' train rows, :func:`_conformalize_across`) is that cross-fit already made:
    when every ellipsoid method has the same rows, it joins the test rows and nothing is fitted again."""
    rows = split.test if split.selection is None else split.selection
    ellipsoids = [m for m in registry.fallback_order() if m in config.methods
                  and registry.METHODS[m].kind == "ellipsoid"]
    folds = min(config.primary_folds, n_units) if len(ellipsoids) > 1 else 0
    folds = folds if folds >= 2 else 0
    held_groups = None if groups is None else np.asarray(groups)[rows]
    held_centers = None if dataset.centers is None else dataset.centers[rows]
    calibration = (rule, _units(split.calibration, groups))
    n = Y.shape[1]
    oof, oof_rows, skipped, evidence, folds_run, how = None, None, None, None, folds, None
    checks: list[dict] = []  # each read of the evidence, after how many folds
    if folds and unit_folds and all(m in unit_folds for m in ellipsoids):
        done = [np.concatenate([f[0] for f in unit_folds[m]]) for m in ellipsoids]
        if all(np.array_equal(d, done[0]) for d in done) and len(done[0]):
            oof = {m: (np.concatenate([f[1] for f in unit_folds[m]]), np.concatenate([f[2] for f in unit_folds[m]]))
                   for m in ellipsoids}
            oof_rows, folds = done[0], len(unit_folds[ellipsoids[0]])
            folds_run, how = folds, f"the calibration's {folds} unit folds (no fit of their own)"
    if oof is None and folds and config.primary == "auto" and config.primary_tolerance is not None:
        held = ellipsoid_figures(model, dataset.X[rows], Y[rows], held_centers)
        evidence = leader_excess(held, eta, n, calibration, held_groups, config.seed)
        checks.append(_check(evidence, 0))
        if evidence["excess"] <= config.primary_tolerance:
            skipped = stop_reason(evidence, config.primary_tolerance, f"not needed ({folds} folds saved)")
            folds = folds_run = 0

    def settled(figures, done, folds_done) -> bool:  # the leader on the cross-fit rows ``done`` of ``folds_done``
        # folds and the held-out rows
        nonlocal evidence
        pooled = {m: (np.concatenate([figures[m][0], held[m][0]]), np.concatenate([figures[m][1], held[m][1]]))
                  for m in ellipsoids}
        pooled_groups = None if groups is None else np.concatenate([train_groups[done], held_groups])
        evidence = leader_excess(pooled, eta, n, calibration, pooled_groups, config.seed)
        checks.append(_check(evidence, folds_done))
        return evidence["excess"] <= config.primary_tolerance

    def unsettled(done) -> bool:  # too few held-out units for leader_excess to settle anything yet
        return _units(split.train[done], groups) + _units(rows, groups) < MIN_UNITS

    if oof is None and folds:
        from tqdm.auto import tqdm

        def regressor(name):
            return SplitConformalRegressor(config.make_shape(name), centre=centre, coverage=eta,
                                           prefit_centre=True, calibration=rule, random_state=config.seed)

        with tqdm(total=folds * len(ellipsoids), desc=f"{dataset.name} primary", disable=not config.progress,
                  leave=False) as fold_bar:
            try:
                oof, oof_rows = cross_fit_figures(
                    regressor, ellipsoids, Xs[split.train], Y[split.train], centers[split.train], folds, config.seed,
                    eta, groups=train_groups, bar=fold_bar,
                    stop=settled if evidence is not None else None, unsettled=unsettled)
            except InputError as err:  # a fold too small for a method: the test part alone decides
                skipped = f"the {folds}-fold cross-fit of the train part could not run ({err})"
                folds, evidence = 0, None
        if oof is not None and evidence is not None:
            if len(oof_rows) < len(split.train):  # the folds partition the train part: it stopped early
                folds_run = checks[-1]["folds"]
                skipped = stop_reason(evidence, config.primary_tolerance, f"stopped after {folds_run} of {folds} folds")
            else:  # every fold ran: the evidence on all of them
                settled(oof, oof_rows, folds)
    if evidence is not None:
        evidence = {**evidence, "tolerance": config.primary_tolerance, "checks": checks}
    return choose(model, dataset.X[rows], Y[rows], eta, config.primary, centers=held_centers,
                  rows="test part" if split.selection is None else "selection rows",
                  cross_fit=oof, folds=folds, skipped=skipped, calibration=calibration,
                  groups=None if groups is None else np.concatenate(
                      ([train_groups[oof_rows]] if oof else []) + [held_groups]),
                  folds_run=folds_run, evidence=evidence, n_train=len(split.train), how=how)


def _check(evidence: dict, folds: int) -> dict:
    """One line of ``selection.evidence.checks``."""
    return {"folds": folds, "rows": evidence["rows"], "leader": evidence["leader"],
            "excess": evidence["excess"] if np.isfinite(evidence["excess"]) else None, "wins": evidence["wins"]}


def _floor_classes(dataset: Dataset, config: TrainConfig):
    """``(labels, codes)`` of ``config.floor_column`` (and ``building_column``), checked before any fit; ``None``
    without floors."""
    if config.floor_column is None:
        if config.building_column is not None:
            raise InputError("--building-column pairs buildings with floors; name the floors with --floor-column",
                             field="--building-column", expected="with --floor-column", received="alone")
        return None
    if config.calibrate_across:
        raise InputError("--floor-column and --calibrate-across do not combine yet: the joint calibration of floors "
                         "is for rows (or groups) held out of training, not cross-fitted units", field="--floor-column",
                         expected="no --calibrate-across", received=f"--calibrate-across {','.join(config.calibrate_across)}")
    from models.floors import make_classifier
    from training.floors import floor_labels

    if config.floor_classifier != "auto":
        make_classifier(config.floor_classifier)
    return floor_labels(dataset, config.floor_column, config.building_column)


def _units(rows: np.ndarray, groups) -> int:
    """How many exchangeable units ``rows`` hold: rows, or their groups."""
    return len(rows) if groups is None else len(np.unique(np.asarray(groups)[rows], axis=0))


def _cross_fit_units(dataset: Dataset, config: TrainConfig, Xs: np.ndarray, split: Split, units, centre_info: dict,
                     centers: np.ndarray, centre_seconds: float | None = None):
    """``--calibrate-across`` with ``across_mode="cross-fit"``: a :class:`training.across.UnitCrossFit`
    of the chosen centre over the train part's units, scoring the calibration rows. Its centre folds:
    :func:`training.across.centre_folds` of the served centre's fit time ``centre_seconds``; what decided
    goes to ``centre_info["centre_folds_by"]``."""
    from training.across import UnitCrossFit, centre_folds

    name = centre_info["name"]
    n_units = len(np.unique(np.asarray(units)[split.train]))
    k, centre_info["centre_folds_by"] = centre_folds(n_units, config.across_centre_folds, config.cross_fit or 5,
                                                     centre_seconds, config.across_centre_seconds)
    return UnitCrossFit(config.cross_fit or 5, config.seed, centre_k=k).fit(
        lambda: config.make_centre(name), Xs, dataset.Y, split.train, split.calibration, units, meta=dataset.meta,
        columns=config.calibrate_across, centres=centers if dataset.centers is not None else None)


def _conformalize_across(reg, cross_fit, config: TrainConfig, name: str, rule: str, eta: float, Xs: np.ndarray,
                         Y: np.ndarray, split: Split, units, centers: np.ndarray, figures: dict):
    """``reg`` calibrated on the cross-fitted scores of the calibration rows (one shape per unit fold).

    A method with a hyperparameter search of its own (LMVE's grid, ``chosen_grid``) fits its fold shapes
    at the configurations the served fit chose: each fold's weights never saw the fold's units, but that
    one discrete choice was made on held-out rows of the served fit's train part, the fold's units
    among them (on a grouped survey none of the calibration rows, which lie at positions out of
    training; ungrouped, the calibration rows are the train rows, some of them in that slice). UJIIndoorLoc
    across phones (seeds 0-2): the LMVE stage, served fit and five unit folds, from 137-192 s to 109-141 s.

    An ellipsoid method's fold shapes also score their folds' train rows (units they never saw, about
    their fold's centres): ``figures[name]``, ``[(fold positions into the train part, scores, unit
    volumes), ...]``, a cross-fit of the train part that the served-method choice reads without fitting
    again (:func:`_choose_primary`)."""
    from training.across import conformalize_cross_fit
    from training.primary import unit_figures

    narrowed = getattr(reg.shape_, "chosen_grid", None)  # LMVE: the served fit's configurations, no new search
    narrowed = narrowed() if narrowed is not None else {}

    def regressor():
        shape = config.make_shape(name).set_params(**narrowed)
        return SplitConformalRegressor(shape, centre=reg.centre_, coverage=eta, prefit_centre=True,
                                       calibration=rule, random_state=config.seed)

    def on_fold(shape, fold):
        rows = split.train[fold]
        figures.setdefault(name, []).append((fold, *unit_figures(shape, Xs[rows], Y[rows] - centers[rows], eta)))

    ellipsoid = registry.METHODS[name].kind == "ellipsoid"
    return conformalize_cross_fit(reg, cross_fit, regressor, Xs, Y, split.train, split.calibration,
                                  np.asarray(units), centers, rule, config.seed, eta, on_fold if ellipsoid else None)


def _fit_centre(dataset: Dataset, config: TrainConfig, Xs: np.ndarray, split: Split, k: int, train_groups, bar,
                meter: StageMeter, out_of_fold: bool = True):
    """The centre step of :func:`train`: ``(centre, centers, centre_info, k)``, ``centers`` (m, n) for
    every row (out-of-fold ones for the train rows when ``k`` and ``out_of_fold``; ``k`` becomes 5 for
    a centre that interpolates its training rows). Stages ``centre selection`` (with ``centre="auto"``
    or ``"stack"``) and ``centre``."""
    X, Y = Xs[split.train], dataset.Y[split.train]
    grouped = train_groups is not None
    if dataset.centers is not None:  # the client's own estimates
        with meter.stage("centre"):
            centre = ClientCentre().fit(X, Y)
        return centre, np.array(dataset.centers, dtype=np.float64), \
            {"name": "client", "columns": list(dataset.centre_columns), "cross_fit": 0}, k
    name, oof, folds, info = config.centre, {}, None, {"name": config.centre}
    if name in ("auto", "stack"):
        with meter.stage("centre selection"):
            if name == "auto":
                folds = k or 5
                units = bool(config.calibrate_across)
                name, errors, oof = select_centre(X, Y, config, folds, train_groups, bar, complete=out_of_fold,
                                                  units=units)
                kind = "unit " if units else "group " if grouped else ""
                info = {"name": name, "selected_by": f"{folds}-fold {kind}cross-validation "
                        f"on the train part ({CRITERIA[config.centre_criterion]} of the Euclidean error)"
                        + _screen_words(config, len(X), units), "criterion": config.centre_criterion, "cv": errors,
                        "screen": _screen_record(config, len(X))}
            else:  # its members' out-of-fold centres, once: they weight the blend and, with the same
                # folds, give the shapes' residuals (nested), instead of a whole blend per fold
                stack = config.make_centre("stack")
                folds = k or stack.cv
                members_config = replace(config, centre="auto", centre_candidates=(*stack.members, "stack"),
                                         centre_screen_rows=None)  # the blend the user asked for, whole
                _, errors, oof = select_centre(X, Y, members_config, folds, train_groups, bar)
                info = {"name": name, "selected_by": f"--centre stack, weighted on its members' {folds}-fold "
                        f"{'group ' if grouped else ''}out-of-fold centres", "cv": errors}
    with meter.stage("centre"), on_idle_cores():
        if k == 0 and registry.centre(name).interpolates:
            units = len(X) if train_groups is None else len(np.unique(train_groups))
            k = min(5, units)  # its in-sample residuals are zero: the shapes learn from out-of-fold ones
            _check_cross_fit(k, units)
        info["cross_fit"] = k
        if name == "stack" and oof:  # weighted on the selection's out-of-fold centres: no refit for them
            centre = config.make_centre("stack").set_params(cv=folds)
            centre.fit(X, Y, predictions={n: oof[n] for n in centre.members})
        else:
            centre = config.make_centre(name).fit(X, Y)
        if folds != k:  # the selection's out-of-fold centres serve only with the same folds
            oof = {}
        centers = centre.predict(Xs)
        if k and out_of_fold:
            centers[split.train] = oof[name] if name in oof else out_of_fold_centers(
                X, Y, config, k, train_groups, name=name)
    return centre, centers, info, k


def _screen_record(config: TrainConfig, rows: int) -> dict:
    """The screen's settings and whether this train part was above its size."""
    n = config.centre_screen_rows
    return {"rows": n, "margin": config.centre_screen_margin, "race_margin": config.centre_race_margin,
            "race_rows": config.centre_race_rows, "applied": n is not None and rows > n}


def _screen_words(config: TrainConfig, rows: int, units: bool = False) -> str:
    n = config.centre_screen_rows
    if units and n is not None and rows > n:
        return (f"; {rows} train rows: screened on {n} rows of each unit fold, judged on all their held-out rows "
                f"(dropped above {100 * config.centre_screen_margin:.0f} % behind), then raced from fold {RACE_FOLDS} "
                f"on (dropped above {100 * config.centre_race_margin:.0f} % behind); a dropped candidate that beat "
                "the chosen one where it was scored is recalled")
    if n is None or rows <= n:
        if config.centre_race_rows is None or rows < config.centre_race_rows:
            return ""
        return (f"; {rows} train rows: raced fold by fold once {config.centre_race_rows} held-out rows were seen "
                f"and from fold {RACE_FOLDS} on "
                f"(dropped above {100 * config.centre_race_margin:.0f} % behind)")
    return (f"; {rows} train rows: screened on {n} rows of fold 1 (dropped above {100 * config.centre_screen_margin:.0f} "
            f"% behind), then raced fold by fold (dropped above {100 * config.centre_race_margin:.0f} % behind)")


def _check_screen(config: TrainConfig) -> None:
    """Refuse screen settings that cannot work, before any fitting."""
    n = config.centre_screen_rows
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < MIN_SCREEN_ROWS):
        raise InputError(f"centre_screen_rows must be None (off) or a row count of at least {MIN_SCREEN_ROWS}; "
                         f"got {n!r}", field="centre_screen_rows", expected=f"None or an integer >= {MIN_SCREEN_ROWS}",
                         received=repr(n))
    r = config.centre_race_rows
    if r is not None and (isinstance(r, bool) or not isinstance(r, int) or r < 1):
        raise InputError(f"centre_race_rows must be None (race only above the screen size) or a positive row count; "
                         f"got {r!r}", field="centre_race_rows", expected="None or an integer >= 1", received=repr(r))
    for name in ("centre_screen_margin", "centre_race_margin"):
        v = getattr(config, name)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < math.inf:
            raise InputError(f"{name} must be a share >= 0 (0.1: 10 % above the best); got {v!r}", field=name,
                             expected="a finite number >= 0", received=repr(v))
