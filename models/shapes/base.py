"""The contract every shape method follows (scikit-learn style).

A shape method learns how the residuals ``r = y - mu(x)`` spread around the centre:

* ``fit(X, R)`` with standardised features ``X`` (m, d) and residuals ``R`` (m, n); returns self.
* ``conformity_scores(X, R)`` (N,): the score that split-conformal calibration ranks.
* ``region(X, centers, alpha_q, coverage)``: the calibrated regions for new rows.

Ellipsoid methods also give ``predict_shape(X)`` (N, n, n), SPD, and score rows by the
Mahalanobis distance ``M = r^T C(x)^{-1} r``. Hyperparameters live in ``__init__`` only;
learned state in attributes ending with ``_``.
"""

from __future__ import annotations

import numpy as np
from sklearn.base import BaseEstimator

from models import geometry
from models._validation import check_features, check_is_fitted, check_matrix, check_Xy
from models.exceptions import InputError
from models.regions import EllipsoidRegions


class ShapeEstimator(BaseEstimator):
    """Base class: input checks shared by all shape methods."""

    #: short name used in bundles, reports and the API
    method_name: str = "shape"

    def _validate_fit(self, X, R, min_rows: int = 2):
        X, R = check_Xy(X, R, min_rows=min_rows)
        self.n_features_in_ = X.shape[1]
        self.n_targets_ = R.shape[1]
        return X, R

    def _validate_predict(self, X, R=None):
        X = check_features(self, X)
        if R is None:
            return X
        R = check_matrix(R, "R", n_columns=self.n_targets_, owner=type(self).__name__)
        if R.shape[0] != X.shape[0]:
            raise InputError(f"X has {X.shape[0]} rows but R has {R.shape[0]}; they must match")
        return X, R

    def prepare_calibration(self, X, R) -> None:
        """Hook run on the calibration rows before scoring them (no-op for ellipsoids)."""


class EllipsoidShapeEstimator(ShapeEstimator):
    """Shape methods whose regions are ellipsoids ``{y : (y-c)^T alpha_q C(x)^{-1} (y-c) <= 1}``."""

    def predict_shape(self, X) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def conformity_scores(self, X, R) -> np.ndarray:
        """Mahalanobis distances ``r_i^T C(x_i)^{-1} r_i`` (N,)."""
        X, R = self._validate_predict(X, R)
        return geometry.mahalanobis(R, self.predict_shape(X))

    def region(self, X, centers, alpha_q: float, coverage: float) -> EllipsoidRegions:
        C = self.predict_shape(X)
        return EllipsoidRegions(
            centers=np.asarray(centers, dtype=np.float64),
            shapes=geometry.scale(C, alpha_q),
            coverage=float(coverage),
            alpha_q=float(alpha_q),
        )


def second_moment(R: np.ndarray) -> np.ndarray:
    """Uncentred second moment ``(1/m) sum_i r_i r_i^T`` (n, n): the spread about the centre."""
    return R.T @ R / R.shape[0]


__all__ = ["ShapeEstimator", "EllipsoidShapeEstimator", "second_moment", "check_is_fitted"]
