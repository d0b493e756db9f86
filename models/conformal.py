"""Split-conformal calibration, shared by every region method.

Given conformity scores ``alpha_1..alpha_m`` of ``m`` calibration rows (for ellipsoids the
Mahalanobis distance ``r^T C(x)^{-1} r``), a region ``{y : score(x, y) <= alpha_q}`` with

    k       = ceil((m + 1) * eta)
    alpha_q = alpha_(k)   (the k-th smallest score)   if k <= m
    alpha_q = +inf        (the whole space)            if k >  m

covers a new exchangeable row with probability ``P >= eta``, and ``P <= eta + 1/(m + 1)``
when the scores have no ties (Vovk et al. 2005; Lei et al. 2018). The calibrator keeps every
score, so any other level ``eta'`` and the conformal p-value of a point

    p(x, y) = (1 + #{i : alpha_i >= score(x, y)}) / (m + 1)

come from the stored scores with no refit.
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from models._validation import check_coverage
from models.exceptions import InputError, NotFittedError, UnattainableCoverageError

#: Slack for ``(m + 1) * eta`` landing a hair above an integer through binary rounding
#: (``10 * 0.7 == 7.000000000000001``); far below any meaningful change of ``eta``.
_CEIL_SLACK = 1e-9


class UncalibratableWarning(UserWarning):
    """Too few calibration rows for the requested level: the region is the whole space."""


def conformal_rank(n_calibration: int, eta: float) -> int:
    """The rank ``k = ceil((m + 1) * eta)`` of the conformal quantile (1-based), for a checked ``eta``.

    ``k > m`` means that no finite threshold guarantees the level (``alpha_q = +inf``).
    """
    return max(1, math.ceil((n_calibration + 1) * eta - _CEIL_SLACK))


def max_coverage(n_calibration: int) -> float:
    """The highest level ``m / (m + 1)`` that ``m`` calibration scores attain with a finite threshold."""
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


class SplitConformalCalibrator:
    """Holds the calibration scores of one method and answers thresholds and p-values.

    Attributes
    ----------
    scores_ : ndarray of shape (m,)
        Calibration scores, sorted ascending.
    n_calibration_ : int
        ``m``.
    """

    def __init__(self):
        self.scores_ = None
        self.n_calibration_ = None

    def fit(self, scores) -> "SplitConformalCalibrator":
        """Store ``scores`` (m,) of the calibration rows."""
        s = np.asarray(scores, dtype=np.float64).ravel()
        if s.size == 0:
            raise InputError("scores is empty; at least one calibration score is required")
        if np.isnan(s).any() or (s < 0).any():
            raise InputError("scores must be non-negative numbers (no NaN)")
        self.scores_ = np.sort(s)
        self.n_calibration_ = int(s.size)
        return self

    def _check(self):
        if self.scores_ is None:
            raise NotFittedError("This SplitConformalCalibrator has no scores; call fit (conformalize) first")

    @property
    def max_coverage(self) -> float:
        """The highest level with a finite threshold: ``m / (m + 1)``."""
        self._check()
        return max_coverage(self.n_calibration_)

    def check_level(self, eta, field: str = "coverage") -> float:
        """``eta`` checked: a number in (0, 1) and at most :attr:`max_coverage` (else the region would be
        the whole space: :class:`UnattainableCoverageError` names the highest attainable level)."""
        eta = check_coverage(eta, field)
        top = self.max_coverage
        if eta > top:
            raise UnattainableCoverageError(
                f"{field} {eta} needs more than the {self.n_calibration_} calibration scores: the region would be "
                f"the whole space. The highest attainable level is {top:.6g} (m / (m + 1))",
                max_coverage=top, field=field, expected=f"at most {top:.6g}", received=str(eta))
        return eta

    def quantile(self, eta: float) -> float:
        """``alpha_q`` at a checked level ``eta``: the ``ceil((m + 1) eta)``-th smallest stored score."""
        self._check()
        return _kth_smallest(self.scores_, eta, presorted=True)

    def p_value(self, scores) -> np.ndarray:
        """Conformal p-values ``(1 + #{alpha_i >= s}) / (m + 1)`` for test scores ``s`` (N,)."""
        self._check()
        s = np.asarray(scores, dtype=np.float64).ravel()
        n_ge = self.n_calibration_ - np.searchsorted(self.scores_, s, side="left")
        return (1.0 + n_ge) / (self.n_calibration_ + 1.0)

    def coverage_bounds(self, eta: float) -> tuple[float, float]:
        """The guaranteed interval ``[eta, eta + 1/(m + 1)]`` of marginal coverage (no ties)."""
        self._check()
        return eta, min(1.0, eta + 1.0 / (self.n_calibration_ + 1.0))
