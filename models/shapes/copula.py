"""Copula baseline (Messoudi et al. 2021): per-target normalised scores, box regions.

Each target ``j`` gets a normalised score ``s_j = |r_j| / sigma_j(x)`` with ``sigma_j`` from a
small MLP fitted on the training residuals. On the calibration rows, each score is turned into
its empirical marginal rank ``F_j(s) = #{calibration s_j < s} / m``; the conformity score of a
row is ``u = max_j F_j(s_j)`` (the empirical copula evaluated on the diagonal). Split-conformal
calibration of ``u`` at level ``eta`` gives a rank ``alpha_q``, and the region is the box

    {y : |y_j - mu_j(x)| <= a_j sigma_j(x) for all j},   a_j = the (m alpha_q + 1)-th smallest s_j,

which holds a point exactly when its ``u <= alpha_q``. The marginal ranks are estimated on the
calibration rows themselves, so validity is approximate (to O(1/m)) rather than exact; the
coverage test checks it.
"""

from __future__ import annotations

import math

import numpy as np
from sklearn.neural_network import MLPRegressor

from models.nn.numpy_mlp import mlp_forward
from models._validation import check_is_fitted
from models.regions import BoxRegions
from models.shapes.base import ShapeEstimator


class EmpiricalCopulaBox(ShapeEstimator):
    """Box regions from per-target scale estimates and an empirical copula.

    Parameters
    ----------
    hidden_layer_sizes : tuple of int, default=(32,)
    alpha : float, default=10.0
        L2 penalty of the scale MLP: strong, because the net learns from a few hundred rows.
    max_iter : int, default=500
    random_state : int, default=0

    Attributes
    ----------
    coefs_, intercepts_ : lists of ndarrays
        The scale MLP (evaluated in numpy).
    sigma_floor_ : ndarray (n,)
        Lower bound on ``sigma_j(x)`` (1 % of the mean ``|r_j|``) so a score never divides by ~0.
    calibration_marginals_ : ndarray (m, n)
        Calibration scores ``s_j``, each column sorted (set by ``prepare_calibration``).
    """

    def __init__(self, hidden_layer_sizes=(32,), alpha: float = 10.0, max_iter: int = 500, random_state: int = 0):
        self.hidden_layer_sizes = hidden_layer_sizes
        self.alpha = alpha
        self.max_iter = max_iter
        self.random_state = random_state

    def fit(self, X, R) -> "EmpiricalCopulaBox":
        import warnings

        from sklearn.exceptions import ConvergenceWarning

        X, R = self._validate_fit(X, R)
        A = np.abs(R)
        mean_abs = np.maximum(A.mean(axis=0), 1e-12)
        mlp = MLPRegressor(hidden_layer_sizes=self.hidden_layer_sizes, alpha=self.alpha,
                           max_iter=self.max_iter, random_state=self.random_state)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            mlp.fit(X, A / mean_abs)  # fit in units of the mean |r_j|: well conditioned
        self.coefs_ = [W.copy() for W in mlp.coefs_]
        self.intercepts_ = [b.copy() for b in mlp.intercepts_]
        self.coefs_[-1] = self.coefs_[-1] * mean_abs
        self.intercepts_[-1] = self.intercepts_[-1] * mean_abs
        self.sigma_floor_ = 0.01 * mean_abs
        self.calibration_marginals_ = None
        return self

    def predict_scale(self, X) -> np.ndarray:
        """Per-target scales of checked rows.

        Parameters
        ----------
        X : ndarray of shape (N, d)
            Checked standardised features.

        Returns
        -------
        ndarray of shape (N, n)
            ``sigma_j(x)``, at least ``sigma_floor_``.
        """
        out = mlp_forward(X, self.coefs_, self.intercepts_)
        return np.maximum(out.reshape(X.shape[0], -1), self.sigma_floor_)

    def normalised_scores(self, X, R) -> np.ndarray:
        """Per-target residuals in units of their predicted scale.

        Parameters
        ----------
        X : ndarray of shape (N, d)
            Checked standardised features.
        R : ndarray of shape (N, n)
            Residuals.

        Returns
        -------
        ndarray of shape (N, n)
            ``|r_j| / sigma_j(x)``.
        """
        return np.abs(R) / self.predict_scale(X)

    def prepare_calibration(self, X, R) -> None:
        """Store the sorted per-target calibration scores: the empirical marginals.

        Parameters
        ----------
        X : ndarray of shape (k, d)
            Checked standardised features of the calibration rows.
        R : ndarray of shape (k, n)
            Their residuals.
        """
        self.calibration_marginals_ = np.sort(self.normalised_scores(X, R), axis=0)

    def conformity_scores(self, X, R) -> np.ndarray:
        """The copula scores of checked rows.

        Parameters
        ----------
        X : ndarray of shape (N, d)
            Checked standardised features.
        R : ndarray of shape (N, n)
            Residuals.

        Returns
        -------
        ndarray of shape (N,)
            ``u = max_j F_j(s_j)`` with ``F_j(s) = #{calibration s_j < s} / m``.

        Raises
        ------
        NotFittedError
            Called before :meth:`prepare_calibration`.
        """
        check_is_fitted(self, "calibration_marginals_", "scored (call prepare_calibration first)")
        S = self.normalised_scores(X, R)
        marg = self.calibration_marginals_
        ranks = np.stack([np.searchsorted(marg[:, j], S[:, j], side="left") for j in range(S.shape[1])], axis=1)
        return ranks.max(axis=1) / marg.shape[0]

    def thresholds(self, alpha_q: float) -> np.ndarray:
        """Per-target thresholds for a calibrated rank level.

        Parameters
        ----------
        alpha_q : float
            The calibrated threshold on copula scores (a rank level in [0, 1], or ``+inf``).

        Returns
        -------
        ndarray of shape (n,)
            ``a_j``, the calibration marginal at that rank; ``+inf`` where the rank is past the last score.

        Raises
        ------
        NotFittedError
            Called before :meth:`prepare_calibration`.
        """
        check_is_fitted(self, "calibration_marginals_", "asked for thresholds")
        m = self.calibration_marginals_.shape[0]
        if not math.isfinite(alpha_q):
            return np.full(self.n_targets_, np.inf)
        idx = int(round(alpha_q * m))
        if idx >= m:
            return np.full(self.n_targets_, np.inf)
        return self.calibration_marginals_[idx]

    def to_arrays(self):
        arrays = {"sigma_floor": self.sigma_floor_, "calibration_marginals": self.calibration_marginals_}
        arrays.update({f"coef_{i}": W for i, W in enumerate(self.coefs_)})
        arrays.update({f"intercept_{i}": b for i, b in enumerate(self.intercepts_)})
        return {"n_layers": len(self.coefs_), "n_features": self.n_features_in_}, arrays

    @classmethod
    def from_arrays(cls, params, arrays):
        est, k = cls(), int(params["n_layers"])
        est.coefs_ = [np.asarray(arrays[f"coef_{i}"], float) for i in range(k)]
        est.intercepts_ = [np.asarray(arrays[f"intercept_{i}"], float) for i in range(k)]
        est.sigma_floor_ = np.asarray(arrays["sigma_floor"], float)
        est.calibration_marginals_ = np.asarray(arrays["calibration_marginals"], float)
        est.n_features_in_, est.n_targets_ = int(params["n_features"]), est.sigma_floor_.shape[0]
        return est

    def region(self, X, centers, alpha_q: float, coverage: float) -> BoxRegions:
        """Calibrated boxes around the centres.

        Parameters
        ----------
        X : ndarray of shape (N, d)
            Checked standardised features.
        centers : array-like of shape (N, n)
            The centre's predictions.
        alpha_q : float
            The calibrated threshold.
        coverage : float
            The level the boxes report.

        Returns
        -------
        BoxRegions
            Half widths ``a_j sigma_j(x)``.
        """
        a = self.thresholds(alpha_q)
        return BoxRegions(centers=np.asarray(centers, dtype=np.float64),
                          half_widths=a * self.predict_scale(X), coverage=float(coverage), alpha_q=float(alpha_q))
