"""models/shapes/nle.py: NLE's local shape is the moment of its neighbours' residuals."""

from __future__ import annotations

import numpy as np

from models import NearestNeighbourEllipsoid


def test_nle_local_shape_formula():
    rng = np.random.default_rng(0)
    X, R = rng.normal(size=(40, 2)), rng.normal(size=(40, 2))
    est = NearestNeighbourEllipsoid().fit(X, R)  # k = 2
    d = np.linalg.norm(X - X[7], axis=1)
    nn = np.argsort(d)[:2]
    local = sum(np.outer(R[i], R[i]) for i in nn) / 2
    expected = 0.95 * local + 0.05 * R.T @ R / 40
    np.testing.assert_allclose(est.predict_shape(X[7:8])[0], expected, rtol=1e-12)
