"""Split-conformal region regression: ``fit`` -> ``conformalize`` -> ``predict_region``.

>>> reg = SplitConformalRegressor(GaussianEllipsoid(), centre=SVRCentre(), coverage=0.9)
>>> reg.fit(X_train, Y_train).conformalize(X_cal, Y_cal)          # doctest: +SKIP
>>> regions = reg.predict_region(X_test)                           # doctest: +SKIP
>>> regions.contains(Y_test).mean()   # ~0.9, and >= 0.9 in expectation   # doctest: +SKIP

The centre and the shape are fitted on the training rows only; the calibration rows only set
the threshold. ``predict_region(X, coverage=0.95)`` answers another level from the stored
calibration scores without refitting.
"""

from __future__ import annotations

import numpy as np
from sklearn.base import BaseEstimator, clone

from models._validation import check_coverage, check_is_fitted, check_matrix
from models.centre import SVRCentre
from models.conformal import SplitConformalCalibrator
from models.exceptions import InputError


class SplitConformalRegressor(BaseEstimator):
    """A centre, a shape method and a split-conformal calibrator.

    Parameters
    ----------
    shape : ShapeEstimator
        GE, NLE, LMVE or Copula (unfitted; it is cloned in ``fit``).
    centre : estimator with fit/predict, default=None
        ``None`` means ``SVRCentre()`` (the paper's).
    coverage : float in (0, 1), default=0.9
        Default level ``eta`` for ``predict_region``.
    prefit_centre : bool, default=False
        The centre is already fitted (share one centre between several methods).

    Attributes
    ----------
    centre_, shape_ : the fitted centre and shape
    calibrator_ : SplitConformalCalibrator
    alpha_q_ : float
        Threshold at ``coverage``.
    """

    def __init__(self, shape, centre=None, coverage: float = 0.9, prefit_centre: bool = False):
        self.shape = shape
        self.centre = centre
        self.coverage = coverage
        self.prefit_centre = prefit_centre

    @classmethod
    def from_fitted(cls, centre, shape, calibrator: SplitConformalCalibrator, coverage: float):
        """Assemble from already fitted parts (used when loading a bundle)."""
        reg = cls(shape=shape, centre=centre, coverage=coverage, prefit_centre=True)
        reg.centre_, reg.shape_, reg.calibrator_ = centre, shape, calibrator
        reg.alpha_q_ = calibrator.quantile(coverage)
        return reg

    @property
    def method(self) -> str:
        return getattr(self.shape, "method_name", type(self.shape).__name__)

    def _centers(self, X, centers, n_targets: int | None = None):
        if centers is None:
            return self.centre_.predict(X)
        n_targets = self.shape_.n_targets_ if n_targets is None else n_targets
        C = check_matrix(centers, "centers", n_columns=n_targets)
        if C.shape[0] != np.shape(X)[0]:
            raise InputError(f"centers has {C.shape[0]} rows but X has {np.shape(X)[0]}")
        return C

    def fit(self, X, Y, centers=None) -> "SplitConformalRegressor":
        """Fit the centre (unless prefit) and the shape on training rows ``X`` (m, d), ``Y`` (m, n)."""
        check_coverage(self.coverage)
        X = check_matrix(X, "X", min_rows=2)
        Y = check_matrix(Y, "Y", min_rows=2)
        if X.shape[0] != Y.shape[0]:
            raise InputError(f"X has {X.shape[0]} rows but Y has {Y.shape[0]}; they must match")
        if self.prefit_centre:
            check_is_fitted(self.centre, "n_features_in_", "used as a prefit centre")
            self.centre_ = self.centre
        else:
            self.centre_ = clone(self.centre if self.centre is not None else SVRCentre()).fit(X, Y)
        R = Y - self._centers(X, centers, n_targets=Y.shape[1])
        self.shape_ = clone(self.shape).fit(X, R)
        self.calibrator_ = None
        return self

    def conformalize(self, X, Y, centers=None) -> "SplitConformalRegressor":
        """Score the calibration rows (never seen in ``fit``) and store the scores."""
        check_is_fitted(self, "shape_", "conformalized")
        X = check_matrix(X, "X", n_columns=self.shape_.n_features_in_, owner="the fitted shape")
        Y = check_matrix(Y, "Y", n_columns=self.shape_.n_targets_, owner="the fitted shape")
        if X.shape[0] != Y.shape[0]:
            raise InputError(f"X has {X.shape[0]} rows but Y has {Y.shape[0]}; they must match")
        R = Y - self._centers(X, centers)
        self.shape_.prepare_calibration(X, R)
        self.calibrator_ = SplitConformalCalibrator().fit(self.shape_.conformity_scores(X, R))
        self.alpha_q_ = self.calibrator_.quantile(check_coverage(self.coverage))
        return self

    def _check_calibrated(self):
        check_is_fitted(self, "calibrator_", "asked for regions (call fit, then conformalize)")

    def predict_region(self, X, coverage: float | None = None, centers=None):
        """Calibrated regions for rows ``X`` (N, d) at ``coverage`` (default: the fitted level)."""
        self._check_calibrated()
        X = check_matrix(X, "X", n_columns=self.shape_.n_features_in_, owner="the fitted shape")
        eta = self.coverage if coverage is None else check_coverage(coverage)
        alpha = self.alpha_q_ if coverage is None else self.calibrator_.quantile(eta)
        return self.shape_.region(X, self._centers(X, centers), alpha, eta)

    def conformity_scores(self, X, Y, centers=None) -> np.ndarray:
        """(N,) the conformity scores of rows ``(X, Y)``."""
        self._check_calibrated()
        X = check_matrix(X, "X", n_columns=self.shape_.n_features_in_, owner="the fitted shape")
        Y = check_matrix(Y, "Y", n_columns=self.shape_.n_targets_, owner="the fitted shape")
        return self.shape_.conformity_scores(X, Y - self._centers(X, centers))

    def p_value(self, X, Y, centers=None) -> np.ndarray:
        """(N,) conformal p-values of the points ``Y`` given ``X``."""
        return self.calibrator_.p_value(self.conformity_scores(X, Y, centers))
