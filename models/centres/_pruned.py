"""The compiled loop of :class:`models.centres.clusters.ClusterIndex`: exact k nearest rows, pruned by clusters.

Written with numba rather than numpy because the work per query is a walk over a few dozen clusters whose order
and extent depend on what the walk has found so far: as numpy calls, each step's fixed cost would exceed its work.
The loop releases the GIL, so chunks of queries search on several threads.

Indices in the inner loops are unsigned: numba then emits no negative-index wraparound and LLVM vectorises them.
"""

from __future__ import annotations

import math

import numba
import numpy as np

_JIT = {"cache": True, "nogil": True}


@numba.njit(**_JIT)
def _sift_down(heap, k):
    """Restore the max-heap ``heap[:k]`` after its root was replaced."""
    j = 0
    while True:
        left = 2 * j + 1
        big = j
        if left < k and heap[left] > heap[big]:
            big = left
        if left + 1 < k and heap[left + 1] > heap[big]:
            big = left + 1
        if big == j:
            return
        heap[big], heap[j] = heap[j], heap[big]
        j = big


@numba.njit(**_JIT)
def _sift_up(heap, j):
    """Restore the max-heap after ``heap[j]`` was appended."""
    while j > 0:
        parent = (j - 1) // 2
        if heap[parent] >= heap[j]:
            return
        heap[parent], heap[j] = heap[j], heap[parent]
        j = parent


@numba.njit(**_JIT)
def _bounds(q, heard, dc, lb, box, key, centres, low, high, low_sq, cnorm, radius):
    """Per cluster, two lower bounds on the distance from ``v = -q / 2`` to its rows (float64): ``lb``, the
    distance to the cluster's centre less its radius, and ``box``, the squared distance to the box of its rows'
    per-column ranges; ``key`` is the larger as a squared distance. Fills ``heard`` with the query's columns.
    Returns ``(h, |v|^2, the cluster of smallest key)``."""
    C = cnorm.shape[0]
    uC = np.uint64(C)
    v2 = 0.0
    h = 0
    for c in range(uC):
        dc[c] = 0.0
        box[c] = low_sq[c]
    for j in range(np.uint64(q.shape[0])):
        if q[j] != 0:
            heard[h] = j
            h += 1
            v = -0.5 * np.float64(q[j])
            v2 += v * v
            base = j * uC
            for c in range(uC):
                dc[c] += v * centres[base + c]
                lo_c = np.float64(low[base + c])
                gap = max(lo_c - v, 0.0) + max(v - np.float64(high[base + c]), 0.0)
                box[c] += gap * gap - lo_c * lo_c
    best = 0
    for c in range(C):
        s = v2 + cnorm[c] - 2.0 * dc[c]
        dc[c] = math.sqrt(s) if s > 0.0 else 0.0
        lb[c] = dc[c] - radius[c]
        ball = max(lb[c], 0.0)
        key[c] = max(ball * ball, box[c])
        if key[c] < key[best]:
            best = c
    return h, v2, best


@numba.njit(**_JIT)
def _score(q, heard, h, c, R, dc, cptr, bptr, blocks, colpos, norms, orig, dr, acc, heap, size, U, found_d, found_i,
           n_found):
    """Score the rows of cluster ``c`` whose distance to its centre is within ``R`` of the query's (they are
    sorted by it): each row's float32 distance as the sparse product computes it, the query's heard columns
    multiplied in one at a time across the rows (vector instructions); rows at most ``U`` (the ``k``-th
    distance so far, a max-heap of ``k``) are kept. Returns ``(size, U, n_found)``."""
    a, b = cptr[c], cptr[c + 1]
    lo, hi = a, b
    while lo < hi:
        mid = (lo + hi) // 2
        if dr[mid] < dc[c] - R:
            lo = mid + 1
        else:
            hi = mid
    first, hi = lo, b
    while lo < hi:
        mid = (lo + hi) // 2
        if dr[mid] <= dc[c] + R:
            lo = mid + 1
        else:
            hi = mid
    if lo <= first:
        return size, U, n_found
    ufirst, ulast = np.uint64(first), np.uint64(lo)
    for r in range(ufirst, ulast):
        acc[r] = 0.0
    stride = np.uint64(b - a)
    columns = np.uint64(c) * np.uint64(q.shape[0])
    for t in range(h):
        col = colpos[columns + np.uint64(heard[t])]
        if col >= 0:
            qj = q[heard[t]]
            src = np.uint64(bptr[c]) + np.uint64(col) * stride + (ufirst - np.uint64(a))
            for r in range(ulast - ufirst):
                acc[ufirst + r] += blocks[src + r] * qj
    k = heap.shape[0]
    for r in range(ufirst, ulast):
        D = acc[r] + norms[r]
        if D <= U:
            found_d[n_found] = D
            found_i[n_found] = orig[r]
            n_found += 1
            if size < k:
                heap[size] = D
                _sift_up(heap, size)
                size += 1
                if size == k:
                    U = heap[0]
            elif D < U:
                heap[0] = D
                _sift_down(heap, k)
                U = heap[0]
    return size, U, n_found


@numba.njit(**_JIT)
def _next(cand, nc, lb, box, key, R, R2):
    """Drop the candidate clusters the bounds now exclude (``lb > R`` or ``box > R2``) and take out the one of
    smallest key. Returns ``(cluster or -1, candidates left)``."""
    pick = -1
    keep = 0
    for t in range(nc):
        c = cand[t]
        if lb[c] <= R and box[c] <= R2:
            cand[keep] = c
            if pick < 0 or key[c] < key[cand[pick]]:
                pick = keep
            keep += 1
    if pick < 0:
        return -1, 0
    c = cand[pick]
    cand[pick] = cand[keep - 1]
    return c, keep - 1


@numba.njit(**_JIT)
def search(Q, k, ties, cptr, bptr, blocks, colpos, norms, orig, dr, centres_t, cnorm, radius, low_t, high_t, low_sq,
           rmax, maxnnz):
    """Per query of ``Q`` (N, d) float32 (``-2 (x - offset)``, as :class:`~models.centres.search.FingerprintIndex`
    computes it): the reference rows whose float32 distance ``|r|^2 - 2 v.r`` is at most the ``k``-th smallest,
    with those distances.

    Returns ``(ptr, rows, distances)``: query ``i``'s rows are ``rows[ptr[i]:ptr[i + 1]]``; with ``ties`` every row
    at most the ``k``-th distance (ascending row index), else exactly ``k`` rows in order of (distance, row index).
    Each distance is computed as the sparse product does it (the row's products in ascending column order, summed
    in float32 from zero, then the squared norm added), so the rows are those of the brute-force search. A row is
    skipped only when a bound puts it farther than the ``k``-th distance found so far by more than any distance's
    rounding error (``err``) and the bounds' own (``slack``, ``tol``).
    """
    N, d = Q.shape
    C, m = cnorm.shape[0], norms.shape[0]
    dc, lb, box, key = np.empty(C), np.empty(C), np.empty(C), np.empty(C)
    heap, cand, heard = np.empty(k, np.float32), np.empty(C, np.int64), np.empty(d, np.int64)
    acc, found_d, found_i = np.empty(m, np.float32), np.empty(m, np.float32), np.empty(m, np.int64)
    ptr = np.zeros(N + 1, np.int64)
    rows, dist = np.empty(N * k + 64, np.int64), np.empty(N * k + 64, np.float32)
    centres, low, high = centres_t.ravel(), low_t.ravel(), high_t.ravel()
    for qi in range(N):
        q = Q[qi]
        h, v2, best = _bounds(q, heard, dc, lb, box, key, centres, low, high, low_sq, cnorm, radius)
        vn = math.sqrt(v2)
        # |computed - exact| distance of any row (float32 sums of at most maxnnz + 2 terms, Cauchy-Schwarz); the
        # float64 rounding of the bounds, added to the radius (slack) and to the box bound (tol)
        err = 1.01 * 2.0 ** -24 * (maxnnz + 2) * (2.0 * vn * rmax + rmax * rmax)
        slack = 4e-6 * (vn + rmax) + 2.0 * math.sqrt(1e-12 * (v2 + rmax * rmax))
        tol = 1e-9 * (v2 + rmax * rmax)
        size, n_found, U, R, R2 = 0, 0, np.float32(np.inf), np.inf, np.inf
        c, nc = best, 0  # the cluster of smallest bound first: it sets the first radius
        while c >= 0:
            size, U, n_found = _score(q, heard, h, c, R, dc, cptr, bptr, blocks, colpos, norms, orig, dr, acc, heap,
                                      size, U, found_d, found_i, n_found)
            if size == k:
                R2 = np.float64(U) + err + v2
                R = (math.sqrt(R2) if R2 > 0.0 else 0.0) + slack
                R2 += tol
            if c == best:  # then every other cluster the bounds admit, smallest bound first
                for other in range(C):
                    if other != best and lb[other] <= R and box[other] <= R2:
                        cand[nc] = other
                        nc += 1
            c, nc = _next(cand, nc, lb, box, key, R, R2)
        rows, dist = _emit(qi, k, ties, U, found_d, found_i, n_found, ptr, rows, dist)
    return ptr, rows[:ptr[N]], dist[:ptr[N]]


@numba.njit(**_JIT)
def _emit(qi, k, ties, U, found_d, found_i, n_found, ptr, rows, dist):
    """Append query ``qi``'s rows (those found at most ``U``) to ``rows``/``dist`` (grown when full) and close
    ``ptr[qi + 1]``. Returns the (possibly new) ``rows`` and ``dist``."""
    n_out = 0
    for t in range(n_found):
        if found_d[t] <= U:
            found_d[n_out] = found_d[t]
            found_i[n_out] = found_i[t]
            n_out += 1
    order = np.argsort(found_i[:n_out])
    if not ties:  # the k nearest by (distance, row): a stable sort by distance of the rows in ascending order
        order = order[np.argsort(found_d[:n_out][order], kind="mergesort")][:k]
        n_out = k
    start = ptr[qi]
    if start + n_out > rows.shape[0]:
        cap = max(2 * rows.shape[0], start + n_out)
        grown, grown_d = np.empty(cap, np.int64), np.empty(cap, np.float32)
        grown[:start], grown_d[:start] = rows[:start], dist[:start]
        rows, dist = grown, grown_d
    for t in range(n_out):
        rows[start + t] = found_i[order[t]]
        dist[start + t] = found_d[order[t]]
    ptr[qi + 1] = start + n_out
    return rows, dist
