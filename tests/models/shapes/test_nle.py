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


def test_the_neighbours_come_from_at_most_max_rows_rows_and_the_global_moment_from_all():
    from models.centres.base import capped_rows
    from models.shapes.base import second_moment

    rng = np.random.default_rng(5)
    X, R = rng.normal(size=(600, 4)), rng.normal(size=(600, 2))
    capped = NearestNeighbourEllipsoid(max_rows=200, random_state=3).fit(X, R)
    rows = capped_rows(600, 200, seed=3)
    assert capped.X_ref_.shape == (200, 4) and capped.n_neighbors_ == 10  # 5 % of the 200 rows
    np.testing.assert_array_equal(capped.global_shape_, second_moment(R))
    alone = NearestNeighbourEllipsoid(n_neighbors=10, max_rows=None).fit(X[rows], R[rows])
    local = (capped.predict_shape(X[:50]) - 0.05 * capped.global_shape_) / 0.95
    np.testing.assert_allclose(local, (alone.predict_shape(X[:50]) - 0.05 * alone.global_shape_) / 0.95,
                               rtol=1e-12, atol=1e-12)
    assert NearestNeighbourEllipsoid().fit(X, R).X_ref_.shape == (600, 4)  # under the default cap


def test_many_rows_are_shaped_in_blocks_as_at_once(monkeypatch):
    rng = np.random.default_rng(6)
    X, R = rng.normal(size=(400, 3)), rng.normal(size=(400, 2))
    nle = NearestNeighbourEllipsoid().fit(X, R)  # k = 20
    whole = nle.predict_shape(X)
    monkeypatch.setattr(NearestNeighbourEllipsoid, "BLOCK_PAIRS", 20 * 33)  # blocks of 33 rows
    np.testing.assert_allclose(nle.predict_shape(X), whole, rtol=1e-12, atol=1e-14)
