"""The compiled score of a request's few rows for :class:`models.typicality.Typicality`.

Written with numba rather than numpy because one row's score costs numpy a dozen calls (a product, a
partition, a sort, a square root, a sum) whose fixed cost is most of it; here it is one call. Batches keep
the float32 BLAS product, which is faster per row; the two agree to float32's precision on the squared
distances (this loop's are float64 differences, the product's ``|z|^2 + |r|^2 - 2 z.r``).
"""

from __future__ import annotations

import math

import numba
import numpy as np


@numba.njit(cache=True, nogil=True)
def mean_nearest(X, mean, components, minus_2rt, k):
    """(N,) each float64 row ``x`` of ``X`` (N, d) projected, ``z = (x - mean) @ components`` (d, c): its mean
    Euclidean distance to its ``k`` nearest reference rows ``R``, given as ``minus_2rt = -2 R^T`` (c, r, float32).
    The differences ``z - r`` are taken in float64 (``-2`` and ``-0.5`` are exact), so a query near a reference
    row loses nothing to cancellation; the ``k`` smallest are summed in ascending order."""
    N, d = X.shape
    c = components.shape[1]
    m = minus_2rt.shape[1]
    out = np.empty(N, dtype=np.float64)
    z = np.empty(c, dtype=np.float64)
    D = np.empty(m, dtype=np.float64)
    near = np.empty(k, dtype=np.float64)
    for q in range(N):
        z[:] = 0.0
        for i in range(d):
            v = X[q, i] - mean[i]
            for j in range(c):
                z[j] += v * components[i, j]
        D[:] = 0.0
        for j in range(c):
            a = z[j]
            row = minus_2rt[j]
            for r in range(m):
                t = a + 0.5 * np.float64(row[r])
                D[r] += t * t
        size = 0  # near[:size]: the smallest so far, ascending
        for r in range(m):
            v = D[r]
            if size < k:
                i = size
                size += 1
            elif v < near[k - 1]:
                i = k - 1
            else:
                continue
            while i > 0 and near[i - 1] > v:
                near[i] = near[i - 1]
                i -= 1
            near[i] = v
        s = 0.0
        for i in range(k):
            s += math.sqrt(near[i])
        out[q] = s / k
    return out
