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
from models.exceptions import InputError, NotFittedError

#: Slack for ``(m + 1) * eta`` landing a hair above an integer through binary rounding
#: (``10 * 0.7 == 7.000000000000001``); far below any meaningful change of ``eta``.
_CEIL_SLACK = 1e-9


class UncalibratableWarning(UserWarning):
    """Too few calibration rows for the requested level: the region is the whole space."""


def conformal_rank(n_calibration: int, eta: float) -> int:
    """The rank ``k = ceil((m + 1) * eta)`` of the conformal quantile (1-based).

    ``k > m`` means that no finite threshold guarantees the level (``alpha_q = +inf``).
    """
    eta = check_coverage(eta)
    if n_calibration < 1:
        raise InputError(f"at least one calibration score is required; got {n_calibration}")
    return max(1, math.ceil((n_calibration + 1) * eta - _CEIL_SLACK))


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
    s = np.asarray(scores, dtype=np.float64).ravel()
    if s.size == 0:
        raise InputError("scores is empty; at least one calibration score is required")
    if np.isnan(s).any():
        raise InputError("scores contains NaN; conformity scores must be numbers")
    k = conformal_rank(s.size, eta)
    if k > s.size:
        warnings.warn(
            f"coverage {eta} needs ceil((m+1)*eta) = {k} calibration scores but only m = {s.size} "
            "are available: the region is the whole space (alpha_q = +inf)",
            UncalibratableWarning,
            stacklevel=2,
        )
        return math.inf
    return float(np.partition(s, k - 1)[k - 1])


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

    def quantile(self, eta: float) -> float:
        """``alpha_q`` at level ``eta`` (see :func:`conformal_quantile`)."""
        self._check()
        return conformal_quantile(self.scores_, eta)

    def p_value(self, scores) -> np.ndarray:
        """Conformal p-values ``(1 + #{alpha_i >= s}) / (m + 1)`` for test scores ``s`` (N,)."""
        self._check()
        s = np.asarray(scores, dtype=np.float64).ravel()
        n_ge = self.n_calibration_ - np.searchsorted(self.scores_, s, side="left")
        return (1.0 + n_ge) / (self.n_calibration_ + 1.0)

    def coverage_bounds(self, eta: float) -> tuple[float, float]:
        """The guaranteed interval ``[eta, eta + 1/(m + 1)]`` of marginal coverage (no ties)."""
        self._check()
        eta = check_coverage(eta)
        return eta, min(1.0, eta + 1.0 / (self.n_calibration_ + 1.0))
