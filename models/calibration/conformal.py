"""Split-conformal calibration, shared by every region method.

Given conformity scores ``alpha_1..alpha_m`` of ``m`` calibration rows (for ellipsoids the
Mahalanobis distance ``r^T C(x)^{-1} r``), a region ``{y : score(x, y) <= alpha_q}`` with

    k       = ceil((m + 1) * eta)
    alpha_q = alpha_(k)   (the k-th smallest score)   if k <= m
    alpha_q = +inf        (the whole space)            if k >  m

covers a new exchangeable row with probability ``P >= eta``, and ``P <= eta + 1/(m + 1)``
when the scores have no ties. The calibrator keeps every score, so any other level and the
conformal p-value ``p(x, y) = (1 + #{i : alpha_i >= score(x, y)}) / (m + 1)`` come with no refit.

Grouped rules (``RULES``), for rows in groups whose new queries come from new groups, over ``m``
calibration groups:

- ``"group-subsample"`` (exact): one score per group, drawn at random; the rule above on those scores.
- ``"group-pooled"``: every score, each group weighted ``1/m`` and spread over its rows; the smallest score
  whose pooled CDF reaches ``eta (m + 1) / m``. Asymptotic guarantee.
- ``"group-weighted"`` (approximate, for few groups, e.g. two or three phones held out of training): the
  same pooled CDF at ``eta``, so any level is attainable with any ``m``; its coverage at a new unit is
  ``eta`` only on average over the units' draw.

In the exact rules a level above ``m / (m + 1)`` has no finite threshold, and p-values are
``(1 + m W(alpha >= s)) / (m + 1)`` with ``W`` the stored scores' weights. ``docs/concepts/conformal.md``
states the rules and their references."""

from __future__ import annotations

import math
import warnings

import numpy as np

from models._validation import check_coverage, lookup
from models.exceptions import InputError, NotFittedError, UnattainableCoverageError

#: Slack for ``(m + 1) * eta`` landing a hair above an integer through binary rounding
#: (``10 * 0.7 == 7.000000000000001``); far below any meaningful change of ``eta``.
_CEIL_SLACK = 1e-9


class UncalibratableWarning(UserWarning):
    """Too few calibration rows for the requested level: the region is the whole space."""


def conformal_rank(n_calibration: int, eta: float) -> int:
    """The rank ``k = ceil((m + 1) * eta)`` of the conformal quantile, counted from 1.

    Parameters
    ----------
    n_calibration : int
        ``m``, the calibration scores (or groups).
    eta : float in (0, 1)
        A checked level.

    Returns
    -------
    int
        ``k``; ``k > m`` means that no finite threshold guarantees the level (``alpha_q = +inf``).
    """
    return max(1, math.ceil((n_calibration + 1) * eta - _CEIL_SLACK))


def max_coverage(n_calibration: int) -> float:
    """The highest level that ``m`` calibration scores attain with a finite threshold.

    Parameters
    ----------
    n_calibration : int
        ``m``, the calibration scores (or groups).

    Returns
    -------
    float
        ``m / (m + 1)``.
    """
    return n_calibration / (n_calibration + 1.0)


def conformal_quantile(scores, eta: float) -> float:
    """The split-conformal threshold ``alpha_q`` of ``scores`` at level ``eta``.

    ``alpha_q`` is the ``ceil((m + 1) * eta)``-th smallest score, or ``+inf`` when that rank
    exceeds ``m`` (then the region is the whole space; a :class:`UncalibratableWarning` says so).

    Parameters
    ----------
    scores : array-like of shape (m,)
        Conformity scores of the calibration rows; finite or ``+inf``.
    eta : float in (0, 1)
        Target coverage.

    Returns
    -------
    float
        ``alpha_q``: a new exchangeable row's score is at most ``alpha_q`` with probability at least ``eta``.

    Raises
    ------
    InputError
        ``eta`` outside (0, 1), or ``scores`` empty or holding NaN.
    """
    eta = check_coverage(eta)
    s = np.asarray(scores, dtype=np.float64).ravel()
    if s.size == 0:
        raise InputError("scores is empty; at least one calibration score is required")
    if np.isnan(s).any():
        raise InputError("scores contains NaN; conformity scores must be numbers")
    return _kth_smallest(s, eta, presorted=False)


def _kth_smallest(s: np.ndarray, eta: float, presorted: bool) -> float:
    k = conformal_rank(s.size, eta)
    if k > s.size:
        warnings.warn(
            f"coverage {eta} needs ceil((m+1)*eta) = {k} calibration scores but only m = {s.size} "
            "are available: the region is the whole space (alpha_q = +inf)",
            UncalibratableWarning,
            stacklevel=3,
        )
        return math.inf
    return float(s[k - 1] if presorted else np.partition(s, k - 1)[k - 1])


#: calibration rules: what a calibration score stands for, and what the guarantee covers
RULES = ("rows", "group-subsample", "group-pooled", "group-weighted")
#: rules whose level has no finite-sample guarantee (reports call them approximate)
APPROXIMATE_RULES = ("group-pooled", "group-weighted")


def guarantee_words(level: float, rule: str, unit: str, n_rows: int, n_groups: int | None = None,
                    on: str = "held-out") -> str:
    """The guarantee of a calibration in words, as the report, the terminal and the manifest state it.

    Parameters
    ----------
    level : float
        The calibrated level.
    rule : str
        One of :data:`RULES`; an approximate rule states ``P ~ level`` instead of ``P >= level``.
    unit : str
        What the guarantee holds for ("new row", "row of a new group", ...).
    n_rows : int
        Calibration rows scored.
    n_groups : int, default=None
        Calibration groups, under a group rule.
    on : str, default="held-out"
        What the rows were ("held-out", "cross-fitted").

    Returns
    -------
    str
        For example ``"P >= 0.9 for a new row (calibrated on 412 held-out rows; rule rows)"``.
    """
    bound = f"P ~ {level} (asymptotically: {rule} rule)" if rule in APPROXIMATE_RULES else f"P >= {level}"
    counted = f"{n_rows} {on} rows" if n_groups is None else f"{n_groups} {on} groups, {n_rows} rows"
    return f"{bound} for a {unit} (calibrated on {counted}; rule {rule})"


def guarantee_terms(level: float, rule: str, n_rows: int, exact: bool, mode: str, holds_for: str, units: str,
                    n_units: int, bound: float | None = None, bound_of: str | None = None,
                    why: str | None = None) -> dict:
    """The guarantee as fields, the same everywhere it is stated (the manifest, ``GET /model``'s ``guarantee``).

    Parameters
    ----------
    level : float
        The calibrated level.
    rule : str
        The calibration rule (:data:`RULES`).
    n_rows : int
        Calibration rows scored.
    exact : bool
        Whether ``P >= level`` holds in finite samples.
    mode : str
        How the scores were drawn (``"split"``, ``"cross-fit"``, ``"across cross-fit"``, ``"recalibrated"``).
    holds_for : str
        What a new query must be, in words.
    units : str
        What calibrated (``"positions"``, ``"rows"``, ``"PHONEID units"``).
    n_units : int
        How many of them.
    bound : float, default=None
        For an approximate form, the probability a finite-sample result does promise, if one is known.
    bound_of : str, default=None
        Whose result ``bound`` is.
    why : str, default=None
        Why the mode was chosen.

    Returns
    -------
    dict
        ``level``, ``form`` (``"exact"`` or ``"approximate"``), ``bound`` (the level when exact), ``bound_of``,
        ``holds_for``, ``units``, ``n_units``, ``n_rows``, ``rule``, ``mode`` and, when given, ``why``.
    """
    return {"level": level, "form": "exact" if exact else "approximate",
            "bound": level if exact else bound, "bound_of": "split conformal" if exact else bound_of,
            "holds_for": holds_for, "units": units, "n_units": n_units, "n_rows": n_rows, "rule": rule, "mode": mode,
            **({"why": why} if why else {})}


def check_rule(rule: str) -> str:
    """A calibration rule, checked.

    Parameters
    ----------
    rule : str
        The rule's name.

    Returns
    -------
    str
        ``rule``, one of :data:`RULES`.

    Raises
    ------
    InputError
        ``rule`` names none of :data:`RULES`; the message lists them.
    """
    return lookup(RULES, rule, "calibration rule", field="calibration")


def group_codes(groups, n_rows: int) -> np.ndarray:
    """Integer codes of a group label per row.

    Parameters
    ----------
    groups : array-like of shape (n_rows,) or (n_rows, c)
        Any hashable labels; the rows of a 2-D array are one label each.
    n_rows : int
        The calibration rows the labels must match.

    Returns
    -------
    ndarray of shape (n_rows,)
        Codes ``0 .. g - 1`` in the order of the sorted labels.

    Raises
    ------
    InputError
        Not one label per row; the message names the shape that came.
    """
    g = np.asarray(groups)
    if g.ndim == 2:
        g = np.unique(g, axis=0, return_inverse=True)[1].ravel()
    if g.ndim != 1 or g.shape[0] != n_rows:
        raise InputError(f"groups must give one label per calibration row ({n_rows}); got shape {g.shape}",
                         field="groups", expected=f"{n_rows} labels", received=f"shape {g.shape}")
    return np.unique(g, return_inverse=True)[1].ravel()


class SplitConformalCalibrator:
    """Holds the calibration scores of one method and answers thresholds and p-values.

    Parameters
    ----------
    rule : {"rows", "group-subsample", "group-pooled", "group-weighted"}, default="rows"
        How scores become a threshold (see the module docstring); the group rules need ``groups``.
    random_state : int, default=0
        Seed of the draw of one row per group (``"group-subsample"``).

    Attributes
    ----------
    scores_ : ndarray of shape (k,)
        The stored scores, sorted ascending (one per group for ``"group-subsample"``).
    weights_ : ndarray of shape (k,) or None
        Their weights (sum 1) for ``"group-pooled"`` and ``"group-weighted"``; ``None``: ``1/m`` each.
    n_calibration_ : int
        ``m``: calibration rows, or calibration groups under a group rule.
    n_rows_ : int
        Calibration rows scored.
    """

    def __init__(self, rule: str = "rows", random_state: int = 0):
        self.rule = rule
        self.random_state = random_state
        self.scores_ = None
        self.weights_ = None
        self.n_calibration_ = None

    def fit(self, scores, groups=None) -> "SplitConformalCalibrator":
        """Store the calibration scores (and, under a group rule, what each group weighs).

        Parameters
        ----------
        scores : array-like of shape (k,)
            Conformity scores of the calibration rows, non-negative.
        groups : array-like of shape (k,), default=None
            The rows' groups; needed by every rule but ``"rows"``.

        Returns
        -------
        self : SplitConformalCalibrator

        Raises
        ------
        InputError
            An unknown rule, empty scores, a NaN or negative score, or a group rule without ``groups``.
        """
        check_rule(self.rule)
        s = np.asarray(scores, dtype=np.float64).ravel()
        if s.size == 0:
            raise InputError("scores is empty; at least one calibration score is required")
        if np.isnan(s).any() or (s < 0).any():
            raise InputError("scores must be non-negative numbers (no NaN)")
        self.n_rows_ = int(s.size)
        if self.rule == "rows":
            return self._store(s, None, s.size)
        if groups is None:
            raise InputError(f"calibration rule {self.rule!r} needs the calibration rows' groups", field="groups",
                             expected="one group label per calibration row", received="none")
        codes = group_codes(groups, s.size)
        m = int(codes.max()) + 1
        if self.rule == "group-subsample":
            order = np.random.default_rng(self.random_state).permutation(s.size)
            first = np.unique(codes[order], return_index=True)[1]  # a uniformly random row of each group
            return self._store(s[order[first]], None, m, np.arange(m))
        sizes = np.bincount(codes, minlength=m)
        return self._store(s, 1.0 / (m * sizes[codes]), m, codes)

    def _store(self, scores, weights, m: int, codes=None) -> "SplitConformalCalibrator":
        order = np.argsort(scores, kind="stable")
        self.scores_ = scores[order]
        self.weights_ = None if weights is None else weights[order]
        self._cum = None if weights is None else np.cumsum(self.weights_)
        self.n_calibration_ = int(m)
        self._codes = None if codes is None else codes[order]  # each stored score's group (a fit's, not stored)
        return self

    def reweighed(self, group_weights) -> "SplitConformalCalibrator":
        """This calibrator with its groups weighing ``group_weights`` rather than the same: weighted conformal
        calibration (each group's weight spread over its rows; the level corrected by ``(m + 1) / m`` as under
        equal weights, the new group taken to weigh the mean). In place; returns ``self``.

        Parameters
        ----------
        group_weights : array-like of shape (m,)
            Non-negative, not all zero, one per calibration group in the order of its sorted labels (the codes
            of :func:`group_codes`).

        Returns
        -------
        self : SplitConformalCalibrator

        Raises
        ------
        InputError
            Not a grouped fit of this process (a rows calibrator, or one loaded from a bundle), or weights that
            are not one non-negative number per group.
        """
        self._check()
        codes = getattr(self, "_codes", None)
        if codes is None:
            raise InputError("only a grouped calibrator fitted in this process can be reweighed", field="rule",
                             expected="a group rule, fitted here", received=self.rule)
        w = np.asarray(group_weights, dtype=np.float64).ravel()
        m = self.n_calibration_
        if w.shape != (m,) or not np.isfinite(w).all() or (w < 0).any() or w.sum() <= 0:
            raise InputError(f"group_weights must be {m} non-negative numbers, not all zero; got shape {w.shape}",
                             field="group_weights", expected=f"{m} weights >= 0", received=f"shape {w.shape}")
        sizes = np.bincount(codes, minlength=m)
        row = w[codes] / sizes[codes]
        self.weights_ = row / row.sum()
        self._cum = np.cumsum(self.weights_)
        return self

    @classmethod
    def from_arrays(cls, rule: str, scores, weights, n_calibration: int, n_rows: int) -> "SplitConformalCalibrator":
        """Rebuild a calibrator from its stored arrays (what loading a bundle does).

        Parameters
        ----------
        rule : str
            One of :data:`RULES`.
        scores : array-like of shape (k,)
            The stored scores, sorted ascending.
        weights : array-like of shape (k,) or None
            Their weights under a weighted rule.
        n_calibration : int
            ``m``: calibration rows, or groups under a group rule.
        n_rows : int
            Calibration rows scored.

        Returns
        -------
        SplitConformalCalibrator
            Fitted.
        """
        cal = cls(rule=check_rule(rule))
        cal.n_rows_ = int(n_rows)
        s = np.asarray(scores, dtype=np.float64)
        w = None if weights is None else np.asarray(weights, dtype=np.float64)
        return cal._store(s, w, n_calibration)

    @property
    def unit(self) -> str:
        """What ``m`` counts: ``"scores"`` (rows) or ``"groups"``."""
        return "scores" if self.rule == "rows" else "groups"

    def _check(self):
        if self.scores_ is None:
            raise NotFittedError("This SplitConformalCalibrator has no scores; call fit (conformalize) first")

    @property
    def max_coverage(self) -> float:
        """The highest level with a finite threshold: ``m / (m + 1)`` (1 for ``"group-weighted"``, which has
        no finite-sample correction)."""
        self._check()
        return 1.0 if self.rule == "group-weighted" else max_coverage(self.n_calibration_)

    def check_level(self, eta, field: str = "coverage") -> float:
        """A level, checked against what the calibration can promise.

        Parameters
        ----------
        eta : float
            The level asked for.
        field : str, default="coverage"
            The request field an error names.

        Returns
        -------
        float
            ``eta``.

        Raises
        ------
        InputError
            ``eta`` is not a number in (0, 1).
        UnattainableCoverageError
            ``eta`` is above :attr:`max_coverage`: the region would be the whole space. The error carries
            the highest attainable level.
        """
        eta = check_coverage(eta, field)
        top = self.max_coverage
        if eta > top:
            raise UnattainableCoverageError(
                f"{field} {eta} needs more than the {self.n_calibration_} calibration {self.unit}: the region would be "
                f"the whole space. The highest attainable level is {top:.6g} (m / (m + 1), m = "
                f"{self.n_calibration_} {self.unit})",
                max_coverage=top, field=field, expected=f"at most {top:.6g}", received=str(eta))
        return eta

    def quantile(self, eta: float) -> float:
        """The threshold ``alpha_q`` at a checked level.

        With equal weights: the ``ceil((m + 1) eta)``-th smallest stored score. Weighted: the smallest score
        whose cumulative weight reaches ``eta (m + 1) / m`` (``eta`` for ``"group-weighted"``).

        Parameters
        ----------
        eta : float in (0, 1)
            The level, already checked.

        Returns
        -------
        float
            ``alpha_q``, or ``+inf`` (with an :class:`UncalibratableWarning`) when no stored score reaches it.
        """
        self._check()
        if self.weights_ is None:
            return _kth_smallest(self.scores_, eta, presorted=True)
        m = self.n_calibration_
        target = eta if self.rule == "group-weighted" else eta * (m + 1) / m
        if target > 1.0 + _CEIL_SLACK:
            return self._unbounded(eta)
        idx = int(np.searchsorted(self._cum, target - _CEIL_SLACK / m, side="left"))
        return float(self.scores_[min(idx, self.scores_.size - 1)])

    def _unbounded(self, eta: float) -> float:
        warnings.warn(f"coverage {eta} needs more than the {self.n_calibration_} calibration groups: the region is the "
                      "whole space (alpha_q = +inf)", UncalibratableWarning, stacklevel=3)
        return math.inf

    def p_value(self, scores) -> np.ndarray:
        """Conformal p-values of test scores.

        Parameters
        ----------
        scores : array-like of shape (N,)
            Conformity scores of test points.

        Returns
        -------
        ndarray of shape (N,)
            ``(1 + m W(alpha >= s)) / (m + 1)``, which is ``(1 + #{alpha_i >= s}) / (m + 1)`` with equal
            weights; ``W(alpha >= s)`` for ``"group-weighted"``, so that ``p > 1 - eta`` where the score is below
            its threshold.
        """
        self._check()
        s = np.asarray(scores, dtype=np.float64).ravel()
        below = np.searchsorted(self.scores_, s, side="left")
        m = self.n_calibration_
        if self.weights_ is None:
            n_ge = self.scores_.size - below
        else:
            n_ge = m * (1.0 - np.where(below > 0, self._cum[np.maximum(below - 1, 0)], 0.0))
        if self.rule == "group-weighted":
            return np.clip(n_ge / m, 0.0, 1.0)
        return (1.0 + n_ge) / (m + 1.0)

    def level_of(self, threshold: float) -> float:
        """The level whose threshold is ``threshold``; reports an online rule's threshold as a level.

        Parameters
        ----------
        threshold : float
            A threshold on conformity scores.

        Returns
        -------
        float
            ``#{alpha_i <= threshold} / (m + 1)`` (weighted for the pooled rules), at most ``m / (m + 1)``.
        """
        self._check()
        below = int(np.searchsorted(self.scores_, threshold, side="right"))
        m = self.n_calibration_
        if self.weights_ is None:
            return below / (m + 1.0)
        pooled = float(self._cum[below - 1]) if below > 0 else 0.0
        return min(pooled, 1.0) if self.rule == "group-weighted" else m * pooled / (m + 1.0)

    def coverage_bounds(self, eta: float) -> tuple[float, float]:
        """The interval of marginal coverage the calibration guarantees at a level.

        Parameters
        ----------
        eta : float in (0, 1)
            The level.

        Returns
        -------
        (float, float)
            ``(eta, eta + 1/(m + 1))``, the upper bound holding when scores have no ties. For the
            approximate rules it is the interval the finite-sample rule would give, not a guarantee.
        """
        self._check()
        return eta, min(1.0, eta + 1.0 / (self.n_calibration_ + 1.0))
