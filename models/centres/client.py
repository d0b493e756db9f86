"""The client's own estimate as the centre: a bundle that learned its shapes on the residuals of
the client's estimates."""

from __future__ import annotations

import numpy as np

from models.centres.base import Centre
from models.exceptions import InputError


class ClientCentre(Centre):
    """The client's own estimate as the centre: no model. A bundle with this centre learned its
    shapes and calibration on the residuals of the client's estimates, so every request brings
    them (``centers``, (N, n) in target units); :meth:`predict` refuses to guess."""

    def fit(self, X, Y) -> "ClientCentre":
        X, Y = self._fit_input(X, Y)
        return self

    def predict(self, X) -> np.ndarray:
        """No centre of its own: a client-centre bundle's requests bring theirs.

        Parameters
        ----------
        X : ndarray of shape (N, d)
            Checked standardised features.

        Raises
        ------
        InputError
            Always, naming ``centers``: the request must send its estimates.
        """
        raise InputError("this bundle's centre is the client's own estimate: send `centers`, one estimate per row "
                         f"({self.n_targets_} values each, in target units)", field="centers",
                         expected=f"(N, {self.n_targets_}) estimates", received="none")

    def to_arrays(self):
        return {"n_features": self.n_features_in_, "n_targets": self.n_targets_}, {}

    @classmethod
    def from_arrays(cls, params, arrays):
        est = cls()
        est.n_features_in_, est.n_targets_ = int(params["n_features"]), int(params["n_targets"])
        return est
