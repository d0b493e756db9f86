"""The compiled selections and dense distances against numpy's answers."""

import numpy as np
import pytest

from models.centres._select import HEAP_K, dense_distances, kth, within_kth


def rows_with_ties(seed: int) -> np.ndarray:
    """(40, 300) distances: continuous rows, rows of a few repeated values, and a row all equal."""
    rng = np.random.default_rng(seed)
    D = rng.normal(size=(40, 300))
    D[10:30] = rng.integers(0, 6, size=(20, 300))  # many ties at every k-th value
    D[30] = 1.5
    return D


@pytest.mark.parametrize("k", [1, 2, 9, HEAP_K, HEAP_K + 1, 81, 299, 300])
def test_kth_is_numpys_partition(k):
    """By the heap (a few rows) and by the partition (more), ties counted."""
    D = rows_with_ties(k)
    np.testing.assert_array_equal(kth(D, k), np.partition(D, k - 1, axis=1)[:, k - 1])
    for i in range(len(D)):  # one row at a time: the heap up to HEAP_K
        assert kth(D[i:i + 1], k)[0] == np.partition(D[i], k - 1)[k - 1]
    np.testing.assert_array_equal(kth(D.astype(np.float32), k),
                                  np.partition(D.astype(np.float32), k - 1, axis=1)[:, k - 1])


@pytest.mark.parametrize("k", [1, 5, HEAP_K + 3, 120])
def test_within_kth_takes_every_tie_or_the_first(k):
    D = rows_with_ties(100 + k)
    t = np.partition(D, k - 1, axis=1)[:, k - 1:k]
    columns, counts = within_kth(D, k, True)
    want = [np.flatnonzero(row) for row in D <= t]
    assert counts.tolist() == [len(w) for w in want]
    np.testing.assert_array_equal(columns, np.concatenate(want))
    assert counts[30] == D.shape[1]  # a row all equal: every column ties
    columns, counts = within_kth(D, k, False)
    assert (counts == k).all()
    first = []
    for row, tk in zip(D, t[:, 0]):  # those below, then the lowest columns equal to the k-th value
        below, equal = np.flatnonzero(row < tk), np.flatnonzero(row == tk)
        first.append(np.sort(np.concatenate([below, equal[:k - len(below)]])))
    np.testing.assert_array_equal(columns.reshape(-1, k), np.array(first))


def test_dense_distances_are_the_same_bits_in_any_batch():
    """Each query's distances do not depend on the queries beside it, and equal the BLAS product's to the
    rounding of a 16-term sum."""
    rng = np.random.default_rng(3)
    X_ref, Q = rng.normal(size=(500, 16)), rng.normal(size=(70, 16))
    rows_t, norms = np.ascontiguousarray(X_ref.T), np.einsum("ij,ij->i", X_ref, X_ref)
    D = dense_distances(Q, rows_t, norms)
    alone = np.vstack([dense_distances(Q[i:i + 1], rows_t, norms) for i in range(len(Q))])
    np.testing.assert_array_equal(alone, D)
    blas = (-2.0 * Q) @ rows_t + norms
    scale = norms[None, :] + 2.0 * np.abs(Q) @ np.abs(rows_t)
    assert (np.abs(D - blas) <= 32 * np.finfo(np.float64).eps * scale).all()
    same = dense_distances(Q[:1], np.ascontiguousarray(np.vstack([X_ref[:1], X_ref[:1]]).T), norms[[0, 0]])
    assert same[0, 0] == same[0, 1]  # identical reference rows: identical distances
