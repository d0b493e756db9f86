"""The contract every shape method follows (scikit-learn style).

A shape method learns how the residuals ``r = y - mu(x)`` spread around the centre:

* ``fit(X, R)`` with standardised features ``X`` (m, d) and residuals ``R`` (m, n); returns self.
  ``fit`` is a public boundary: it checks its input. Methods with ``tunes_to_coverage`` (LMVE)
  take the level to tune for as ``fit(X, R, coverage=eta)`` from their owner, the
  :class:`~models.predictor.SplitConformalRegressor`.
* ``conformity_scores(X, R)`` (N,): the score that split-conformal calibration ranks.
* ``region(X, centers, alpha_q, coverage)``: the calibrated regions for new rows.
* ``to_arrays()`` -> ``(params, arrays)`` and ``from_arrays(params, arrays)``: how the fitted
  method is stored in a bundle (JSON-able parameters beside plain float arrays).

Prediction-side methods take rows already checked by the caller (:class:`~models.model.RegionModel`
or the regressor's ``conformalize``), so a request's rows are checked once. Ellipsoid methods
also give ``predict_shape(X)`` (N, n, n), SPD, and score rows by the Mahalanobis distance
``M = r^T C(x)^{-1} r``. An ellipsoid method may also move the centre: ``predict_parts(X)`` returns
the shapes and an (N, n) correction ``delta(x)`` (``None`` for most methods; LMVE with a mean head);
its regions are centred on ``mu(x) + delta(x)`` and its scores are taken about that centre. Hyperparameters live in ``__init__`` only; learned state in
attributes ending with ``_``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np
from sklearn.base import BaseEstimator

from models import geometry
from models._validation import check_is_fitted, check_Xy
from models.regions import EllipsoidRegions


class ShapeEstimator(BaseEstimator, ABC):
    """Base class: the fit-time input check and the bundle protocol shared by all shape methods."""

    #: whether ``fit`` takes the coverage level to tune for (``fit(X, R, coverage=eta)``)
    tunes_to_coverage: bool = False

    def _validate_fit(self, X, R, min_rows: int = 2):
        X, R = check_Xy(X, R, min_rows=min_rows)
        self.n_features_in_ = X.shape[1]
        self.n_targets_ = R.shape[1]
        return X, R

    @abstractmethod
    def fit(self, X, R) -> "ShapeEstimator":
        """Fit the shape on the training rows' residuals.

        Parameters
        ----------
        X : array-like of shape (m, d)
            Standardised features of the training rows.
        R : array-like of shape (m, n)
            Their residuals ``y - mu(x)``.

        Returns
        -------
        self : ShapeEstimator

        Raises
        ------
        InputError
            Fewer than two rows, a value that is not finite, ``X`` and ``R`` with different row counts, or a
            hyperparameter out of its range.
        """

    def prepare_calibration(self, X, R) -> None:
        """Hook run on the calibration rows before they are scored; the ellipsoid methods have nothing to do.

        Parameters
        ----------
        X : ndarray of shape (k, d)
            Checked standardised features of the calibration rows.
        R : ndarray of shape (k, n)
            Their residuals.
        """

    def prepare(self) -> None:
        """Load what answering uses beyond the arrays (a compiled loop), so that the first request does not
        pay for it; nothing here."""

    @abstractmethod
    def conformity_scores(self, X, R) -> np.ndarray:
        """The scores split-conformal calibration ranks: larger is further out.

        Parameters
        ----------
        X : ndarray of shape (k, d)
            Standardised features, checked by the caller; ``R`` (k, n): their residuals ``y - mu(x)``.
        R : ndarray of shape (k, n)

        Returns
        -------
        ndarray of shape (k,)
        """

    @abstractmethod
    def region(self, X, centers, alpha_q: float, coverage: float):
        """The calibrated regions of checked rows.

        Parameters
        ----------
        X : ndarray of shape (N, d)
            Checked standardised features.
        centers : ndarray of shape (N, n)
            The centre of each row.
        alpha_q : float
            The calibrated threshold on the scores.
        coverage : float
            The level it was calibrated at.

        Returns
        -------
        EllipsoidRegions or BoxRegions
        """

    @abstractmethod
    def to_arrays(self) -> tuple[dict, dict[str, np.ndarray]]:
        """The fitted method in a bundle's form.

        Returns
        -------
        params : dict
            JSON-able parameters.
        arrays : dict of str -> ndarray
            The fitted arrays.
        """

    @classmethod
    @abstractmethod
    def from_arrays(cls, params: dict, arrays: dict[str, np.ndarray]):
        """Rebuild a fitted method from what :meth:`to_arrays` gave.

        Parameters
        ----------
        params : dict
            JSON-able parameters.
        arrays : dict of str -> ndarray
            The fitted arrays.

        Returns
        -------
        ShapeEstimator
            Fitted.
        """


class EllipsoidShapeEstimator(ShapeEstimator):
    """Shape methods whose regions are ellipsoids ``{y : (y-c)^T alpha_q C(x)^{-1} (y-c) <= 1}``."""

    @abstractmethod
    def predict_shape(self, X) -> np.ndarray:
        """The shapes ``C(x)`` of checked rows.

        Parameters
        ----------
        X : ndarray of shape (N, d)
            Checked standardised features.

        Returns
        -------
        ndarray of shape (N, n, n)
            Symmetric positive definite.
        """

    def predict_parts(self, X) -> tuple[np.ndarray, np.ndarray | None]:
        """The shapes and the centre correction of checked rows, in one pass.

        Parameters
        ----------
        X : ndarray of shape (N, d)
            Checked standardised features.

        Returns
        -------
        shapes : ndarray of shape (N, n, n)
            ``C(x)``, symmetric positive definite.
        delta : ndarray of shape (N, n) or None
            The correction the regions are centred by (``None``: the method does not move the centre).
        """
        return self.predict_shape(X), None

    @property
    def moves_centre(self) -> bool:
        """Whether :meth:`predict_parts` gives a centre correction (fitted state)."""
        return False

    def conformity_scores(self, X, R, parts=None) -> np.ndarray:
        """Mahalanobis distances of residuals about the method's centre.

        Parameters
        ----------
        X : ndarray of shape (N, d)
            Checked standardised features.
        R : ndarray of shape (N, n)
            Residuals ``y - mu(x)``.
        parts : (ndarray, ndarray or None), default=None
            What :meth:`predict_parts` gave for ``X``, to reuse.

        Returns
        -------
        ndarray of shape (N,)
            ``(r_i - delta_i)^T C(x_i)^{-1} (r_i - delta_i)``, ``delta`` zero unless the method moves the centre.

        Raises
        ------
        NotFittedError
            The method was never fitted.
        """
        check_is_fitted(self, "n_features_in_", "scored")
        C, delta = self.predict_parts(X) if parts is None else parts
        return geometry.mahalanobis(R if delta is None else R - delta, C)

    def region(self, X, centers, alpha_q: float, coverage: float, parts=None) -> EllipsoidRegions:
        """Calibrated ellipsoids ``alpha_q C(x)`` around the centres (plus the method's correction).

        Parameters
        ----------
        X : ndarray of shape (N, d)
            Checked standardised features.
        centers : array-like of shape (N, n)
            The centre's predictions.
        alpha_q : float
            The calibrated threshold (``+inf``: unbounded regions).
        coverage : float
            The level the regions report.
        parts : (ndarray, ndarray or None), default=None
            What :meth:`predict_parts` gave for ``X``, to reuse.

        Returns
        -------
        EllipsoidRegions
        """
        C, delta = self.predict_parts(X) if parts is None else parts
        centers = np.asarray(centers, dtype=np.float64)
        return EllipsoidRegions(centers=centers if delta is None else centers + delta, shapes=geometry.scale(C, alpha_q),
                                coverage=float(coverage), alpha_q=float(alpha_q))


def second_moment(R: np.ndarray) -> np.ndarray:
    """The uncentred second moment of residuals: their spread about the centre.

    Parameters
    ----------
    R : ndarray of shape (m, n)
        Residuals.

    Returns
    -------
    ndarray of shape (n, n)
        ``(1/m) sum_i r_i r_i^T``.
    """
    return R.T @ R / R.shape[0]


__all__ = ["ShapeEstimator", "EllipsoidShapeEstimator", "second_moment", "check_is_fitted"]
