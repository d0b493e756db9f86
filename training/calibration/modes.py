"""A run's calibration mode: how its calibration rows are drawn and scored, chosen once and called by the stages.

:func:`choose_mode` (called by :func:`training.pipeline.stages.plan`, before any fit) reads the configuration and
the data and returns one of two strategies, each holding the split, every row's exchangeable unit and the
calibration rule:

* :class:`HeldOutMode`: the served model scores calibration rows it never trained on: rows (the paper),
  whole positions (a grouped survey), or whole units held out of training (``--calibrate-across`` with
  ``across_mode="held-out"``). The split-conformal guarantee is exact for the rule's unit.
* :class:`CrossFitMode`: every training unit calibrates, scored by a centre and shapes fitted without its unit
  fold (:class:`training.calibration.across.UnitCrossFit`): the positions of a small survey
  (``calibration_mode="cross-fit"``, :mod:`training.calibration.cross_fit`), or the units of
  ``--calibrate-across`` (``across_mode="cross-fit"``). Approximate, and said so.

The stages never branch on the configuration for these: the centre stage calls :meth:`~CalibrationMode.fit_centres`
after the served centre, each method is calibrated by :meth:`~CalibrationMode.conformalize`, the typicality step
takes :meth:`~CalibrationMode.typicality_units`, and ``cross_fitted`` and ``across`` say what the rest must know.
Each is a function of what it is given (a :class:`Scoring`, the data, the configuration) and returns what it
makes; the stages keep it. A mode never reads or writes the pipeline's state.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from models.exceptions import InputError
from models.parallel import on_idle_cores
from training.calibration.splits import Split, group_split, paper_split


@dataclass(frozen=True)
class Scoring:
    """What a mode scores calibration rows with: every row's standardised features ``Xs`` (m, d), positions ``Y``
    (m, n) and centre ``centers`` (m, n; the train rows' out of fold where the shapes learn from out-of-fold
    residuals), the run's ``split``, ``config`` and level ``eta``, and a cross-fitted mode's ``cross_fit`` (the
    :class:`~training.calibration.across.UnitCrossFit` of :meth:`CalibrationMode.fit_centres`; ``None`` held out)."""

    Xs: np.ndarray
    Y: np.ndarray
    centers: np.ndarray
    split: Split
    config: object
    eta: float
    cross_fit: object = None


@dataclass(frozen=True)
class CrossFittedCentres:
    """What a cross-fitted mode makes of the chosen centre (:meth:`CrossFitMode.fit_centres`).

    Attributes
    ----------
    cross_fit : UnitCrossFit
        The centre's unit cross-fit over the train part, scoring the calibration rows.
    centers : ndarray of shape (m, n)
        Every row's centre, the train rows' from the fold centres that never saw their unit.
    k : int
        The shapes' folds: the cross-fit's unit folds.
    record : dict
        What the centre's record gains: ``centre_folds_by``, ``cross_fit`` (``k``) and ``centre_folds``.
    """

    cross_fit: object
    centers: np.ndarray
    k: int
    record: dict


@dataclass(frozen=True)
class CalibrationMode:
    """How one run calibrates: its ``split``, every row's unit (``groups``; ``None``: rows), the calibration
    ``rule`` (:data:`models.calibration.conformal.RULES`), and whether the units are ``--calibrate-across``'s
    (``across``: phones, users, days, rather than positions or rows)."""

    split: Split
    groups: np.ndarray | None
    rule: str
    across: bool = False
    #: whether the calibration rows are scored by fold models (a unit cross-fit) rather than the served model
    cross_fitted = False

    def units_of(self, rows: np.ndarray) -> np.ndarray | None:
        """The units of ``rows`` (``None`` for rows)."""
        return None if self.groups is None else np.asarray(self.groups)[rows]

    def fit_centres(self, dataset, config, Xs: np.ndarray, centers: np.ndarray, centre: str, n_units: int,
                    meter) -> CrossFittedCentres | None:
        """After the served centre is fitted: what the mode needs of the centres (nothing here: ``None``)."""
        return None

    def conformalize(self, reg, name: str, scoring: Scoring, on_fold=None) -> tuple:
        """``(calibrated, folds)``: method ``name``'s regressor ``reg`` (fitted on the train rows) calibrated on the
        calibration rows, and the fold shapes kept for :meth:`CrossFitMode.held_out` (none here: ``None``)."""
        cal = scoring.split.calibration
        return reg.conformalize(scoring.Xs[cal], scoring.Y[cal], centers=scoring.centers[cal],
                                groups=self.units_of(cal)), None

    def typicality_units(self) -> np.ndarray | None:
        """The units whose own reference rows a calibration row's typicality score leaves out (``None``: none)."""
        return self.groups if self.across else None


class HeldOutMode(CalibrationMode):
    """The served model scores calibration rows held out of its training: rows, positions or units."""


class CrossFitMode(CalibrationMode):
    """Every training unit calibrates, scored by models fitted without its unit fold (cross-conformal)."""

    cross_fitted = True

    def fit_centres(self, dataset, config, Xs: np.ndarray, centers: np.ndarray, centre: str, n_units: int,
                    meter) -> CrossFittedCentres:
        """The unit cross-fit of the chosen centre ``centre`` (a registry name; stage ``cross-fit`` of ``meter``):
        its out-of-fold centres replace the train rows' of ``centers`` (the shapes learn from them; ``centers``
        itself is not modified), and its folds become the shapes'. Its centre folds come from the centre's costed
        fit on the train part's ``n_units`` units (:func:`~training.calibration.across.centre_folds`, what decided
        in the record's ``centre_folds_by``), so the same data and seed give the same folds on any machine."""
        from training.calibration.across import UnitCrossFit, centre_folds
        from training.calibration.centre_cost import fit_seconds

        split = self.split
        own = dataset.centers is not None  # the client's own centres: nothing is refitted
        with meter.stage("cross-fit"), on_idle_cores():
            cost = None if own else fit_seconds(config, centre, len(split.train), Xs.shape[1])
            k, by = centre_folds(n_units, config.across_centre_folds, config.cross_fit or 5, cost,
                                 config.across_centre_seconds)
            cross = UnitCrossFit(config.cross_fit or 5, config.seed, centre_k=k).fit(
                lambda: config.make_centre(centre), Xs, dataset.Y, split.train, split.calibration, self.groups,
                meta=dataset.meta, columns=config.calibrate_across, centres=centers if own else None)
        out = centers.copy()
        out[split.train] = cross.train_centres_
        folds = len(cross.folds_)
        return CrossFittedCentres(cross, out, folds, {"centre_folds_by": by, "cross_fit": folds,
                                                      "centre_folds": cross.centre_folds_})

    def conformalize(self, reg, name: str, scoring: Scoring, on_fold=None) -> tuple:
        """``(calibrated, folds)``: ``reg`` calibrated on the cross-fitted scores of the calibration rows, one shape
        per unit fold of ``scoring.cross_fit``, each fitted at the configurations the served fit chose (LMVE's
        ``chosen_grid``: no search of its own); ``on_fold(shape, fold, scored)`` is called with each fold's shape.
        ``folds``: without a test part, each fold's shape and the calibration rows it scored (what
        :meth:`held_out` reads); ``None`` with one."""
        from functools import partial

        from training.calibration.across import conformalize_cross_fit, fold_regressor

        s, keep, kept = scoring, on_fold, None
        if not len(s.split.test):
            kept = []

            def keep(shape, fold, scored):
                kept.append((shape, s.split.calibration[scored]))
                if on_fold is not None:
                    on_fold(shape, fold, scored)

        regressor = partial(fold_regressor, s.config, name, reg.shape_, reg.centre_, s.eta, self.rule)
        calibrated = conformalize_cross_fit(reg, s.cross_fit, regressor, s.Xs, s.Y, s.split.train,
                                            s.split.calibration, np.asarray(self.groups), s.centers, self.rule,
                                            s.config.seed, s.eta, keep)
        return calibrated, kept

    def held_out(self, scoring: Scoring, methods: dict, unit_folds: dict) -> tuple[np.ndarray, np.ndarray, dict]:
        """With no test part: ``(rows, centres, regions)``: the calibration rows (sorted), the fold models' centres
        there (the served centre's for a unit with no train row), and each of ``methods``' regions there, each unit
        scored by its fold's models (``unit_folds[name]``, what :meth:`conformalize` kept) at the threshold of the
        other units' scores (:func:`training.calibration.unit_holdout.leave_unit_out`)."""
        from training.calibration.unit_holdout import leave_unit_out

        s = scoring
        cal, units = s.split.calibration, np.asarray(self.groups)
        fold_centres = s.cross_fit.score_centres_
        centres = s.centers.copy()
        centres[cal] = np.where(np.isnan(fold_centres), s.centers[cal], fold_centres)
        rows = np.sort(cal)
        regions = {}
        for name, reg in methods.items():
            folds = list(unit_folds.get(name) or ())
            scored = np.concatenate([r for _, r in folds]) if folds else np.empty(0, dtype=np.int64)
            rest = np.setdiff1d(cal, scored)
            if len(rest):  # units with no train row: the served model never saw them
                folds.append((reg.shape_, rest))
            regions[name] = leave_unit_out(folds, s.Xs, s.Y, centres, units, self.rule, s.config.seed, s.eta,
                                           reg.alpha_q_)[0]
        return rows, centres[rows], regions

    def typicality_units(self) -> np.ndarray | None:
        return self.groups


def choose_mode(dataset, config, split: Split | None, eta: float) -> CalibrationMode:
    """The run's mode: across units with ``config.calibrate_across``; else the cross-fit over positions when
    ``config.calibration_mode`` resolves to it (:func:`training.calibration.cross_fit.resolve_mode`), held-out
    rows or positions otherwise. ``split``: the caller's (``None``: :func:`default_split`'s)."""
    from models.calibration.conformal import check_rule
    from training.calibration.across import plan_across
    from training.calibration.cross_fit import CROSS_FIT_RULE, cross_fit_split, resolve_mode

    if config.calibrate_across:
        split = split or default_split(dataset, config)
        groups, rule, cross = plan_across(dataset, config, split, eta)
        return (CrossFitMode if cross else HeldOutMode)(split=split, groups=groups, rule=rule, across=True)
    grouped = config.grouped(dataset)
    mode, why = resolve_mode(dataset, config) if split is None or config.calibration_mode == "cross-fit" \
        else ("split", "the caller's split")
    cross = mode == "cross-fit"
    groups = dataset.groups if grouped else None
    rule = config.resolved_rule(grouped) if not cross else check_rule(config.calibration or CROSS_FIT_RULE)
    if rule != "rows" and not grouped:
        raise InputError(f"calibration rule {rule!r} needs groups; the rows have none (name them with --groups)",
                         field="calibration", expected="rows", received=rule)
    if cross:
        split = cross_fit_split(groups, config.seed, eta, split, why)
    split = split or default_split(dataset, config)
    return (CrossFitMode if cross else HeldOutMode)(split=split, groups=groups, rule=rule)


def holds_positions(dataset, config) -> bool:
    """Whether an across split also holds whole groups out: groups the user named (``--groups``), not the
    automatic grouping by position, which across units would demand a new phone *and* a new position (regions
    sized for both, where a new phone reads at the survey's positions)."""
    return config.grouped(dataset) and not (dataset.grouping or {}).get("automatic", False)


def default_split(dataset, config) -> Split:
    """The split a run uses when given none: over whole groups when the config uses the dataset's groups, the
    paper's row split otherwise (both seeded with ``config.seed``); with ``calibrate_across``, over its units
    (:func:`training.calibration.across.across_split`), holding positions out too only where the user grouped
    them (:func:`holds_positions`)."""
    if config.calibrate_across:
        from training.calibration.across import across_split

        return across_split(dataset if holds_positions(dataset, config) else replace(dataset, groups=None),
                            config.calibrate_across, config.seed, config.coverage, mode=config.across_mode,
                            folds=config.cross_fit or 5)
    if config.grouped(dataset):
        return group_split(dataset.groups, config.seed, coverage=config.coverage)
    return paper_split(dataset.X.shape[0], config.seed)
