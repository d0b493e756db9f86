"""The compiled loop of :func:`models.centres.search.distance_weighted_mean`.

Written with numba rather than numpy because a row's answer must not depend on the rows served beside it:
numpy's einsum sums a gathered row in an order set by where it lies in memory, so one row alone and the
same row in a batch could differ in the last bit. Here every sum runs in one fixed order (the columns in
ascending order, then the neighbours in the order given), and no numpy call's fixed cost is paid per group
of rows. The loop releases the GIL, so parts of a batch run on several threads.

Fingerprints are mostly "not heard": given each reference row's columns that differ from a base row (the
not-heard value), a distance visits only the columns where the query or the neighbour differs from it. The
columns it skips add ``(b - b)^2 = +0.0``, which leaves a float64 sum unchanged, so the sparse and the dense
loop give the same bits.
"""

from __future__ import annotations

import math

import numba
import numpy as np


@numba.njit(cache=True, nogil=True)
def _dense(x, row):
    """The squared Euclidean distance, the columns summed in ascending order."""
    s = 0.0
    for j in range(np.uint64(x.shape[0])):
        t = row[j] - x[j]
        s += t * t
    return s


@numba.njit(cache=True, nogil=True)
def _sparse(x, heard, h, base, cols, vals):
    """:func:`_dense` over the union of the query's columns ``heard[:h]`` and the row's ``cols`` (values
    ``vals``; elsewhere the row holds ``base``), both ascending."""
    s = 0.0
    p = 0
    q = 0
    n = cols.shape[0]
    while p < h or q < n:
        if q == n or (p < h and heard[p] < cols[q]):
            j = heard[p]
            t = base[j] - x[j]
            p += 1
        else:
            j = cols[q]
            t = vals[q] - x[j]
            if p < h and heard[p] == j:
                p += 1
            q += 1
        s += t * t
    return s


@numba.njit(cache=True, nogil=True)
def weighted_mean(X, X_ref, Y_ref, flat, start, uniform, base, indptr, indices, values):
    """(N, n): row ``i``'s mean of ``Y_ref`` over its neighbours ``flat[start[i]:start[i + 1]]``: equal
    weights (``uniform``), or 1 / Euclidean distance with exact matches (distance 0) averaged alone, as
    scikit-learn's ``KNeighborsRegressor``: ``sum(w * y) / sum(w)``. Every row has at least one neighbour.
    With ``indptr`` non-empty, reference row ``r`` differs from ``base`` only at columns
    ``indices[indptr[r]:indptr[r + 1]]``, where it holds ``values[...]`` (``X_ref`` is then not read)."""
    N = X.shape[0]
    n = np.uint64(Y_ref.shape[1])
    sparse = indptr.shape[0] > 0
    out = np.empty((N, Y_ref.shape[1]), dtype=np.float64)
    most = 0
    for i in range(N):
        most = max(most, start[i + 1] - start[i])
    w = np.empty(most, dtype=np.float64)
    heard = np.empty(X.shape[1], dtype=np.int64)
    for i in range(N):
        x = X[i]
        h = 0
        if sparse and not uniform:
            for j in range(x.shape[0]):
                if x[j] != base[j]:
                    heard[h] = j
                    h += 1
        a = start[i]
        m = np.uint64(start[i + 1] - a)
        exact = 0
        for p in range(m):
            r = np.uint64(flat[a + p])
            if uniform:
                w[p] = 1.0
            elif sparse:
                w[p] = math.sqrt(_sparse(x, heard, h, base, indices[indptr[r]:indptr[r + 1]],
                                         values[indptr[r]:indptr[r + 1]]))
            else:
                w[p] = math.sqrt(_dense(x, X_ref[r]))
            exact += w[p] == 0.0
        if not uniform:
            for p in range(m):
                w[p] = (1.0 if w[p] == 0.0 else 0.0) if exact else 1.0 / w[p]
        total = 0.0
        for p in range(m):
            total += w[p]
        for t in range(n):
            acc = 0.0
            for p in range(m):
                acc += w[p] * Y_ref[np.uint64(flat[a + p]), t]
            out[i, t] = acc / total
    return out
