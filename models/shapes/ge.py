"""GE: one global ellipsoid shape, the second moment of the training residuals."""

from __future__ import annotations

import numpy as np

from models.shapes.base import EllipsoidShapeEstimator, second_moment


class GaussianEllipsoid(EllipsoidShapeEstimator):
    """Gaussian Ellipsoid (the paper's GE baseline): ``C(x) = (1/m) sum_i r_i r_i^T``, constant.

    The moment is taken about the centre (uncentred), as in the paper's formula, so the shape
    describes the spread around ``mu(x)`` even when the centre is biased. Under joint Gaussianity
    with ``mu(x) = E[y|x]`` it estimates the conditional covariance, the optimal shape
    (Theorem 1).

    Attributes
    ----------
    covariance_ : ndarray (n, n)
    """

    def fit(self, X, R) -> "GaussianEllipsoid":
        X, R = self._validate_fit(X, R)
        C = second_moment(R)
        self.covariance_ = C + 1e-12 * np.trace(C) / C.shape[0] * np.eye(C.shape[0])
        return self

    def predict_shape(self, X) -> np.ndarray:
        """The shape of checked rows: the same for every row.

        Parameters
        ----------
        X : ndarray of shape (N, d)
            Checked standardised features.

        Returns
        -------
        ndarray of shape (N, n, n)
            ``covariance_`` for each row.
        """
        return np.broadcast_to(self.covariance_, (np.shape(X)[0],) + self.covariance_.shape).copy()

    def to_arrays(self):
        return {"n_features": self.n_features_in_}, {"covariance": self.covariance_}

    @classmethod
    def from_arrays(cls, params, arrays):
        est = cls()
        est.covariance_ = np.asarray(arrays["covariance"], float)
        est.n_features_in_, est.n_targets_ = int(params["n_features"]), est.covariance_.shape[0]
        return est
