"""The mean of the training targets as the centre: a reference that uses no feature."""

from __future__ import annotations

import numpy as np

from models.centres.base import Centre


class ConstantCentre(Centre):
    """``mu(x) = mean of the training targets``: a reference centre (no features used)."""

    def fit(self, X, Y) -> "ConstantCentre":
        X, Y = self._fit_input(X, Y)
        return self.set_fitted(Y.mean(axis=0), X.shape[1])

    def predict(self, X) -> np.ndarray:
        return np.broadcast_to(self.mean_, (np.shape(X)[0], self.n_targets_)).copy()

    def to_arrays(self):
        return {"n_features": self.n_features_in_}, {"mean": self.mean_}

    @classmethod
    def from_arrays(cls, params, arrays):
        return cls().set_fitted(arrays["mean"], int(params["n_features"]))

    def set_fitted(self, mean, n_features: int) -> "ConstantCentre":
        """Set the fitted state directly.

        Parameters
        ----------
        mean : array-like of shape (n,)
            The centre of every row.
        n_features : int
            The features a row has.

        Returns
        -------
        self : ConstantCentre
        """
        self.mean_ = np.asarray(mean, float)
        self.n_features_in_, self.n_targets_ = n_features, self.mean_.shape[0]
        return self
