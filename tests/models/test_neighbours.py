"""Sparse fingerprint search: when it is chosen, and that it finds the same neighbours as dense search."""

import numpy as np
import pytest

from models.centre import KNNCentre
from models.neighbours import SPARSE_MIN_COLUMNS, search_input, sparse_offset
from models.shapes.nle import NearestNeighbourEllipsoid


def fingerprints(m: int, d: int, seed: int = 0, detected: float = 0.04):
    """Standardised-looking fingerprints: each column at its own floor value except a few readings
    (continuous, so no two rows tie), and positions."""
    rng = np.random.default_rng(seed)
    floor = rng.normal(size=d)
    X = np.tile(floor, (m, 1))
    hit = rng.random((m, d)) < detected
    X[hit] += rng.uniform(0.5, 3.0, size=hit.sum())
    return X, rng.normal(size=(m, 2)) * 10


def test_sparse_search_is_chosen_for_sparse_wide_rows_only():
    X, _ = fingerprints(500, 100)
    np.testing.assert_array_equal(sparse_offset(X), X.min(axis=0))
    assert sparse_offset(X[:, : SPARSE_MIN_COLUMNS - 1]) is None  # too few columns: dense BLAS
    assert sparse_offset(np.random.default_rng(0).normal(size=(500, 100))) is None  # dense values
    assert search_input(X, None) is X
    S = search_input(X, X.min(axis=0))
    assert S.shape == X.shape and S.nnz == np.count_nonzero(X != X.min(axis=0))


@pytest.fixture(scope="module")
def data():
    X, Y = fingerprints(1500, 120, seed=1)
    Q, _ = fingerprints(200, 120, seed=2)
    return X, Y, Q


def test_knn_centre_sparse_equals_dense_and_round_trips(data):
    X, Y, Q = data
    sparse = KNNCentre().fit(X, Y)
    assert sparse.sparse_offset_ is not None
    dense = KNNCentre()._index(X, Y, None)
    np.testing.assert_allclose(sparse.predict(Q), dense.predict(Q), rtol=0, atol=1e-9)
    again = KNNCentre.from_arrays(*sparse.to_arrays())
    np.testing.assert_array_equal(again.sparse_offset_, sparse.sparse_offset_)
    np.testing.assert_array_equal(again.predict(Q), sparse.predict(Q))
    params, arrays = sparse.to_arrays()
    arrays.pop("sparse_offset")  # a bundle from before the sparse search: searched dense, as calibrated
    assert KNNCentre.from_arrays(params, arrays).sparse_offset_ is None


def test_nle_sparse_neighbours_equal_dense_and_round_trip(data):
    X, Y, Q = data
    sparse = NearestNeighbourEllipsoid().fit(X, Y)
    assert sparse.sparse_offset_ is not None
    dense = NearestNeighbourEllipsoid.from_arrays(*sparse.to_arrays())
    dense._build_index(None)
    np.testing.assert_allclose(sparse.predict_shape(Q), dense.predict_shape(Q), rtol=1e-12, atol=1e-12)
    again = NearestNeighbourEllipsoid.from_arrays(*sparse.to_arrays())
    np.testing.assert_array_equal(again.predict_shape(Q), sparse.predict_shape(Q))
