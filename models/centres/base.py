"""What every centre shares: the interface and the target standardisation.

A centre ``mu(x)`` has ``fit(X, Y) -> self`` (checked input), ``predict(X) -> (N, n)`` (rows checked by
the caller) and, to be stored in a bundle, ``to_arrays() -> (params, arrays)`` and the classmethod
``from_arrays(params, arrays)``; :mod:`models.registry` names the centres a user can choose.
"""

from __future__ import annotations

import numpy as np


def target_scaling(Y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(mean, scale)`` (n,) that standardise targets ``Y`` (m, n): ``(Y - mean) / scale``; a
    constant target keeps scale 1."""
    sd = Y.std(axis=0)
    return Y.mean(axis=0), np.where(sd > 0, sd, 1.0)
