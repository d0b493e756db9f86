"""What every centre shares: the interface (:class:`Centre`) and the target standardisation."""

from __future__ import annotations

import numpy as np
from sklearn.base import BaseEstimator

from models._validation import check_Xy


class Centre(BaseEstimator):
    """A centre ``mu(x)``: hyperparameters in ``__init__``, ``fit(X, Y) -> self`` (input checked once,
    by :meth:`_fit_input`), ``predict(X) -> (N, n)`` (rows checked by the caller), and, to be stored in a
    bundle as plain arrays, ``to_arrays() -> (params, arrays)`` and the classmethod
    ``from_arrays(params, arrays)``. :data:`models.centres.kinds.KINDS` names those a user can choose.

    The centres declare their hyperparameters as fields of ``@dataclass(eq=False, repr=False)``: the
    generated ``__init__`` stores each as given, which is what scikit-learn's ``get_params``, ``clone``
    and ``set_params`` read; ``eq=False`` keeps estimators hashable by identity, ``repr=False``
    scikit-learn's repr.
    """

    def _fit_input(self, X, Y, min_rows: int = 1) -> tuple[np.ndarray, np.ndarray]:
        """``X`` (m, d) and ``Y`` (m, n) as float arrays, checked (:func:`models._validation.check_Xy`,
        errors naming the field), with ``n_features_in_`` and ``n_targets_`` recorded."""
        X, Y = check_Xy(X, Y, y_name="Y", min_rows=min_rows)
        self.n_features_in_, self.n_targets_ = X.shape[1], Y.shape[1]
        return X, Y


def target_scaling(Y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(mean, scale)`` (n,) that standardise targets ``Y`` (m, n): ``(Y - mean) / scale``; a
    constant target keeps scale 1."""
    sd = Y.std(axis=0)
    return Y.mean(axis=0), np.where(sd > 0, sd, 1.0)
