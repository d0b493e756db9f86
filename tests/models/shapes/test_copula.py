"""models/shapes/copula.py: the Copula box's numpy forward pass is scikit-learn's MLP's."""

from __future__ import annotations

import warnings

import numpy as np

from models import EmpiricalCopulaBox
from tests.conftest import heteroscedastic


def test_copula_numpy_forward_equals_scikit_learns_mlp():
    from sklearn.neural_network import MLPRegressor

    X, Y = heteroscedastic(300, seed=6)
    R = Y - Y.mean(axis=0)
    est = EmpiricalCopulaBox(max_iter=200).fit(X, R)
    mean_abs = np.abs(R).mean(axis=0)
    with warnings.catch_warnings():  # 200 iterations: scikit-learn may warn that it did not converge
        warnings.simplefilter("ignore")
        mlp = MLPRegressor(hidden_layer_sizes=(32,), alpha=10.0, max_iter=200, random_state=0).fit(X, np.abs(R) / mean_abs)
    Q = np.vstack([X[:50], X[:5] * 3.0])
    expected = np.maximum(mlp.predict(Q) * mean_abs, 0.01 * mean_abs)
    np.testing.assert_allclose(est.predict_scale(Q), expected, rtol=1e-12, atol=1e-14)
