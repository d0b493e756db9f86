"""Compiled selections over rows of distances: the ``k``-th smallest entry, and the columns at most that far.

Written with numba rather than numpy because one request's row of a few thousand distances costs numpy
several calls (a partition, a comparison, ``flatnonzero``) whose fixed cost exceeds the work; here it is
one pass with a bounded heap. The answers are numpy's, exactly: the ``k``-th value counting repeats, as
``np.partition`` gives it, and columns in ascending order. The loops release the GIL.
"""

from __future__ import annotations

import numba
import numpy as np

from models.centres._pruned import _sift_down, _sift_up

_JIT = {"cache": True, "nogil": True}
#: up to this ``k`` the ``k``-th value is found by a heap (beyond, numpy's partition is faster)
HEAP_K = 16
#: ... for at most this many rows
HEAP_ROWS = 4


@numba.njit(**_JIT)
def _kth(row, k, heap):
    """The ``k``-th smallest of ``row`` (``1 <= k <= len(row)``, ``k <= HEAP_K``), counting repeats: a max-heap
    of the ``k`` smallest so far."""
    m = row.shape[0]
    for j in range(k):  # a max-heap of the first k
        heap[j] = row[j]
        _sift_up(heap, j)
    for j in range(k, m):
        if row[j] < heap[0]:  # replaces the largest of the k smallest so far
            heap[0] = row[j]
            _sift_down(heap, k)
    return heap[0]


@numba.njit(**_JIT)
def kth_values(D, k):
    """(c,) the ``k``-th smallest entry of each row of ``D`` (c, m), counting repeats (``k <= HEAP_K``)."""
    out = np.empty(D.shape[0], dtype=D.dtype)
    heap = np.empty(k, dtype=D.dtype)
    for i in range(D.shape[0]):
        out[i] = _kth(D[i], k, heap)
    return out


def kth(D, k):
    """(c,) the ``k``-th smallest entry of each row of ``D`` (c, m), ``k <= m``, counting repeats: for a
    request's few rows and ``k`` up to ``HEAP_K`` the compiled heap (one call), else numpy's partition (a
    heap's inserts grow with ``k``, and with distances that fall along the row, as a survey's order can)."""
    if k <= HEAP_K and D.shape[0] <= HEAP_ROWS:
        return kth_values(D, k)
    return np.partition(D, k - 1, axis=1)[:, k - 1]


def within_kth(D, k, every_tie):
    """Per row of ``D`` (c, m), the columns (ascending) of entries below its ``k``-th smallest value, and of
    those equal to it: all of them (``every_tie``), else the first so that the row has ``k``. Returns
    ``(columns, counts)``: the rows' columns one after another, and how many each row has."""
    return _within(D, kth(D, k), k, every_tie)


@numba.njit(**_JIT)
def _within(D, kth, k, every_tie):
    """:func:`within_kth` given each row's ``k``-th value ``kth``: one pass a row, and without
    ``every_tie`` the last of its entries equal to the ``k``-th value dropped so that it has ``k``."""
    c, m = D.shape
    counts = np.zeros(c, dtype=np.intp)
    size = c * k + m
    out = np.empty(size, dtype=np.intp)
    n = 0
    for i in range(c):
        if n + m > size:  # room for a whole row of ties
            size = 2 * size + m
            grown = np.empty(size, dtype=np.intp)
            grown[:n] = out[:n]
            out = grown
        row = D[i]
        t = kth[i]
        start = n
        for j in range(m):
            if row[j] <= t:
                out[n] = j
                n += 1
        excess = n - start - k
        if not every_tie and excess > 0:  # ties at t: keep the first of them, so that the row has k
            equal = 0
            for p in range(start, n):
                if row[out[p]] == t:
                    equal += 1
            w, seen = start, 0
            for p in range(start, n):
                j = out[p]
                if row[j] == t:
                    seen += 1
                    if seen > equal - excess:
                        continue
                out[w] = j
                w += 1
            n = w
        counts[i] = n - start
    return out[:n], counts


@numba.njit(**_JIT)
def dense_distances(X, rows_t, norms):
    """(c, m) ``|r|^2 - 2 q.r`` of the queries ``X`` (c, d) to the reference rows ``rows_t`` (d, m), squared
    norms ``norms``: per entry the products summed over the columns in ascending order, then the norm added,
    so a query's distances are the same bits in any batch (a BLAS product's order depends on the batch)."""
    c, d = X.shape
    m = norms.shape[0]
    D = np.empty((c, m), dtype=np.float64)
    for q in range(c):
        out = D[q]
        for r in range(m):
            out[r] = 0.0
        for i in range(d):
            a = -2.0 * X[q, i]
            row = rows_t[i]
            for r in range(m):
                out[r] += a * row[r]
        for r in range(m):
            out[r] += norms[r]
    return D
