"""The served-method stage of :func:`training.pipeline.train` (``primary="auto"``, :mod:`training.pipeline.served_volume`):
the ellipsoid method of smallest expected calibrated volume on held-out rows, the test (or selection) rows
joined by the train part's ``primary_folds`` cross-fit, fold by fold until the leader is within
``primary_tolerance`` of the best (:func:`training.pipeline.served_volume.leader_excess`). A fold refits each
method at the configurations its served fit chose (LMVE its members' configurations, not the whole grid):
chosen on every train row, the fold's among them, so a little in LMVE's favour.

Across units in cross-fit mode the calibration has already scored every train row by a shape of its unit
fold (:func:`training.pipeline.stages.methods_stage`'s ``fold_figures``): when every ellipsoid method has
the same rows, that cross-fit joins the test rows and nothing is fitted again.

With no test part (across units, cross-fit: every unit calibrates) the choice reads the run's own held-out
figures, each unit left out in turn (:func:`by_units`): the ball about the same centre is the safe choice, and
another method is served only where its mean area is no larger than the ball's at **every** unit left out.
"""

from __future__ import annotations

from functools import partial

import numpy as np

from models import registry
from models.exceptions import InputError
from models.predictor import SplitConformalRegressor
from training.calibration.across import fold_regressor
from training.calibration.splits import count_units
from training.pipeline.run import Centres, Methods, Plan, Standardised, Tested
from training.pipeline.served_volume import (MIN_UNITS, choose, cross_fit_figures, ellipsoid_figures, leader_excess, stop_reason)


def choose_served(p: Plan, x: Standardised, c: Centres, fitted: Methods, model, tested: Tested) -> dict:
    """The model's ``selection``: which method the plain routes serve, and the evidence."""
    if tested.held_out is not None:
        return by_units(p, c, fitted, tested)
    choice = ServedChoice(p, x, c, fitted, model)
    if not choice.reuse_unit_folds():
        choice.read_held_out()
        if choice.folds:
            choice.cross_fit()
    return choice.selection()


#: the method a new unit's regions must not exceed, unit by unit, for another to be served
SAFE = "ball"


def by_units(p: Plan, c: Centres, fitted: Methods, tested: Tested) -> dict:
    """The ``selection`` of a run with no test part, on its units each left out in turn (``tested.held_out``, the
    regions of :meth:`training.calibration.modes.CrossFitMode.held_out`): every ellipsoid method's mean area
    per unit, each unit weighted the same. Eligible: the ball (:data:`SAFE`) and every method whose mean area is
    at most the ball's at every unit (all methods when the ball is not trained); the eligible ones rank first,
    by their mean over the units (ties: the registry's order), then the others; ``--primary`` forces its
    method first. ``held_out``: per method ``volume`` (the unit-weighted mean area, ``None`` for a box),
    ``coverage`` and ``volume_calibrated`` (the run's figures over the rows) and ``units_larger_than_ball``."""
    from training.pipeline.served_volume import AUTO

    rows = tested.held_out["rows"]
    codes = np.unique(p.groups_of(rows), return_inverse=True)[1].ravel()
    sizes = np.bincount(codes)
    fallback = registry.fallback_order()
    ellipsoids = [m for m in fallback if m in fitted.fitted and registry.METHODS[m].kind == "ellipsoid"]
    per = {m: np.bincount(codes, weights=tested.held_out[m].volume("lebesgue")) / sizes for m in ellipsoids}
    ball = per.get(SAFE)
    larger = {m: 0 if ball is None else int(np.sum(per[m] > ball)) for m in ellipsoids}
    ranked = sorted(ellipsoids, key=lambda m: (larger[m] > 0, float(np.mean(per[m])), fallback.index(m)))
    primary = p.config.primary
    if primary != AUTO:
        ranked = [primary, *[m for m in ranked if m != primary]]
    held = {m: {"volume": float(np.mean(per[m])) if m in per else None, "coverage": tested.metrics[m]["coverage"],
                "volume_calibrated": tested.metrics[m]["volume"], "units_larger_than_ball": larger.get(m)}
            for m in fitted.fitted}
    held = {m: {k: (None if isinstance(v, float) and not np.isfinite(v) else v) for k, v in f.items()}
            for m, f in held.items()}
    safe = f"no larger than the {registry.METHODS[SAFE].label}'s at any unit, " if ball is not None else ""
    return {"rule": "auto" if primary == AUTO else "forced", "primary": ranked[0], "order": ranked,
            "rows": f"calibration rows of {len(sizes)} units, each unit left out in turn", "n_rows": int(len(rows)),
            "folds": int(c.info.get("cross_fit") or 0), "folds_run": int(c.info.get("cross_fit") or 0),
            "criterion": (f"smallest mean area over the units, each unit's regions from models that never saw it at "
                          f"the threshold of the other units' scores, every unit weighted the same; {safe}else the "
                          f"{registry.METHODS[SAFE].label if ball is not None else 'registry order'}"),
            "held_out": held, "calibrated_on": "each unit's rows at the other units' threshold"}


def _regressor(p: Plan, c: Centres, fitted: Methods, name: str) -> SplitConformalRegressor:
    """A fold's ``name`` shape on the run's centre, at the configurations the served fit of ``name`` chose
    (:func:`training.calibration.across.fold_regressor`: LMVE refits its chosen members, no grid search)."""
    return fold_regressor(c.config, name, fitted.fitted[name].shape_, c.centre, p.eta, p.rule)


def _check(evidence: dict, folds: int) -> dict:
    """One line of ``selection.evidence.checks``."""
    return {"folds": folds, "rows": evidence["rows"], "leader": evidence["leader"],
            "excess": evidence["excess"] if np.isfinite(evidence["excess"]) else None, "wins": evidence["wins"]}


class ServedChoice:
    """One choice of the served method: the held-out rows, the cross-fit folds still to run, and the evidence
    read after each (``checks``)."""

    def __init__(self, p: Plan, x: Standardised, c: Centres, fitted: Methods, model):
        self.p, self.x, self.c, self.fitted, self.model = p, x, c, fitted, model
        s, config = p, p.config
        self.rows = s.split.test if s.split.selection is None else s.split.selection
        self.ellipsoids = [m for m in registry.fallback_order() if m in config.methods
                           and registry.METHODS[m].kind == "ellipsoid"]
        folds = min(config.primary_folds, s.n_units) if len(self.ellipsoids) > 1 else 0
        self.folds = self.folds_run = folds if folds >= 2 else 0
        self.held_groups = s.groups_of(self.rows)
        self.held_centers = None if s.dataset.centers is None else s.dataset.centers[self.rows]
        self.calibration = (s.rule, count_units(s.split.calibration, s.groups))
        self.oof = self.oof_rows = self.skipped = self.evidence = self.how = self.held = None
        self.checks: list[dict] = []  # each read of the evidence, after how many folds

    def reuse_unit_folds(self) -> bool:
        """Take the calibration's unit folds as the cross-fit when every ellipsoid method has the same rows."""
        figures = self.fitted.fold_figures if self.p.mode.cross_fitted else None
        if not (self.folds and figures and all(m in figures for m in self.ellipsoids)):
            return False
        done = [np.concatenate([f[0] for f in figures[m]]) for m in self.ellipsoids]
        if not (all(np.array_equal(d, done[0]) for d in done) and len(done[0])):
            return False
        self.oof = {m: (np.concatenate([f[1] for f in figures[m]]), np.concatenate([f[2] for f in figures[m]]))
                    for m in self.ellipsoids}
        self.oof_rows, self.folds = done[0], len(figures[self.ellipsoids[0]])
        self.folds_run, self.how = self.folds, f"the calibration's {self.folds} unit folds (no fit of their own)"
        return True

    def read_held_out(self) -> None:
        """With a tolerance: the evidence of the held-out rows alone; when it settles, no fold is fitted."""
        config = self.p.config
        if not (self.folds and config.primary == "auto" and config.primary_tolerance is not None):
            return
        X, Y = self.p.dataset.X[self.rows], self.p.Y[self.rows]
        self.held = ellipsoid_figures(self.model, X, Y, self.held_centers)
        self._read(self.held, self.held_groups, 0)
        if self.evidence["excess"] <= config.primary_tolerance:
            self.skipped = stop_reason(self.evidence, config.primary_tolerance, f"not needed ({self.folds} folds saved)")
            self.folds = self.folds_run = 0

    def _read(self, figures: dict, groups, folds_done: int) -> dict:
        s = self.p
        self.evidence = leader_excess(figures, s.eta, s.Y.shape[1], self.calibration, groups, s.config.seed)
        self.checks.append(_check(self.evidence, folds_done))
        return self.evidence

    def settled(self, figures: dict, done: np.ndarray, folds_done: int) -> bool:
        """Whether the leader is within the tolerance on the cross-fit rows ``done`` of ``folds_done`` folds and
        the held-out rows."""
        pooled = {m: (np.concatenate([figures[m][0], self.held[m][0]]),
                      np.concatenate([figures[m][1], self.held[m][1]])) for m in self.ellipsoids}
        groups = None if self.p.groups is None else np.concatenate([self.p.train_groups[done], self.held_groups])
        return self._read(pooled, groups, folds_done)["excess"] <= self.p.config.primary_tolerance

    def unsettled(self, done: np.ndarray) -> bool:
        """Too few held-out units for the evidence to settle anything yet."""
        s = self.p
        return count_units(s.split.train[done], s.groups) + count_units(self.rows, s.groups) < MIN_UNITS

    def cross_fit(self) -> None:
        """The train part's folds, each method refitted on the others and scored on it, stopping once settled."""
        from tqdm.auto import tqdm

        s, x, c, config = self.p, self.x, self.c, self.p.config
        train = s.split.train
        with tqdm(total=self.folds * len(self.ellipsoids), desc=f"{s.dataset.name} primary",
                  disable=not config.progress, leave=False) as bar:
            try:
                self.oof, self.oof_rows = cross_fit_figures(
                    partial(_regressor, s, c, self.fitted), self.ellipsoids, x.Xs[train], s.Y[train],
                    c.centers[train], self.folds, config.seed, s.eta, groups=s.train_groups, bar=bar,
                    stop=self.settled if self.evidence is not None else None, unsettled=self.unsettled)
            except InputError as err:  # a fold too small for a method: the test part alone decides
                self.skipped = f"the {self.folds}-fold cross-fit of the train part could not run ({err})"
                self.folds, self.evidence = 0, None
        if self.oof is None or self.evidence is None:
            return
        if len(self.oof_rows) < len(train):  # the folds partition the train part: it stopped early
            self.folds_run = self.checks[-1]["folds"]
            self.skipped = stop_reason(self.evidence, config.primary_tolerance,
                                       f"stopped after {self.folds_run} of {self.folds} folds")
        else:  # every fold ran: the evidence on all of them
            self.settled(self.oof, self.oof_rows, self.folds)

    def selection(self) -> dict:
        """The choice (:func:`training.pipeline.served_volume.choose`) on the held-out rows and the cross-fit."""
        s = self.p
        evidence = None if self.evidence is None else {**self.evidence, "tolerance": s.config.primary_tolerance,
                                                       "checks": self.checks}
        groups = None if s.groups is None else np.concatenate(
            ([s.train_groups[self.oof_rows]] if self.oof else []) + [self.held_groups])
        return choose(self.model, s.dataset.X[self.rows], s.Y[self.rows], s.eta, s.config.primary,
                      centers=self.held_centers, rows="test part" if s.split.selection is None else "selection rows",
                      cross_fit=self.oof, folds=self.folds, skipped=self.skipped, calibration=self.calibration,
                      groups=groups, folds_run=self.folds_run, evidence=evidence, n_train=len(s.split.train),
                      how=self.how)
