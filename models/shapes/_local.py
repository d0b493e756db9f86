"""The compiled sum of :class:`models.shapes.nle.NearestNeighbourEllipsoid`'s local moments.

Written with numba rather than numpy because numpy either gathers every (row, neighbour) pair's outer
product (a copy of ``N k n^2`` floats) or builds a sparse indicator matrix per call, whose fixed cost is
most of a single row's; here each row streams its neighbours' products into one sum, added in the
neighbours' order, so a row's shape is the same bits alone and in any batch. The loop releases the GIL.
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, nogil=True)
def local_shapes(idx, outer, k_mean, weight, global_shape):
    """(N, q): ``weight * (sum_j outer[idx[i, j]]) / k_mean + (1 - weight) * global_shape`` for each row ``i``
    of ``idx`` (N, k), ``outer`` (m, q) the training rows' flattened outer products, ``global_shape`` (q,)."""
    N, k = idx.shape
    q = outer.shape[1]
    out = np.empty((N, q), dtype=np.float64)
    rest = 1.0 - weight
    for i in range(N):
        for t in range(q):
            out[i, t] = 0.0
        for j in range(k):
            row = outer[np.uint64(idx[i, j])]
            for t in range(q):
                out[i, t] += row[t]
        for t in range(q):
            out[i, t] = weight * (out[i, t] / k_mean) + rest * global_shape[t]
    return out
