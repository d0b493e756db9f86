"""A ReLU MLP evaluated in numpy from scikit-learn's fitted ``coefs_``/``intercepts_``.

Lets a bundle store a fitted ``MLPRegressor`` as plain arrays instead of a pickle.
"""

from __future__ import annotations

import numpy as np


def mlp_forward(X: np.ndarray, coefs: list[np.ndarray], intercepts: list[np.ndarray]) -> np.ndarray:
    """ReLU hidden layers, identity output (``MLPRegressor(activation="relu")``)."""
    h = X
    for i, (W, b) in enumerate(zip(coefs, intercepts)):
        h = h @ W + b
        if i < len(coefs) - 1:
            np.maximum(h, 0.0, out=h)
    return h
