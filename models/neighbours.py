"""Exact nearest-neighbour search on fingerprints as sparse vectors.

RSSI fingerprints after the "not detected" step are mostly one value per column (the floor): on
UJIIndoorLoc 3.5 % of the entries differ from it. Distances do not change when every row is moved by
the same vector, so rows minus the per-column minimum of the reference rows are sparse vectors with
the same neighbours, whose distances are sparse products. :func:`sparse_offset` decides (and gives
the vector) at fit time; the estimators store it with the search version, so a bundle searches the
way it was calibrated:

- version 2 (fits since ``sparse_search`` is stored): :class:`FingerprintIndex`, the rows as float32
  CSR, queries in chunks whose distances stay in cache, the ``k`` smallest per query picked without
  partitioning all of every row;
- version 1 (sparse bundles from before): scikit-learn's brute force on CSR input.

Rows tied at the ``k``-th distance may be chosen differently by the two, so each bundle keeps its own.
"""

from __future__ import annotations

import numpy as np

#: the sparse search is used when at most this share of the entries differs from the column minimum
SPARSE_DENSITY = 0.1
#: ... and the rows have at least this many columns (below, dense BLAS is as fast)
SPARSE_MIN_COLUMNS = 64


def sparse_offset(X: np.ndarray) -> np.ndarray | None:
    """The per-column minimum of the reference rows ``X`` (m, d) when ``X`` minus it is sparse enough
    to search as CSR (``SPARSE_DENSITY``, ``SPARSE_MIN_COLUMNS``), else ``None`` (dense search)."""
    if X.ndim != 2 or X.shape[1] < SPARSE_MIN_COLUMNS or X.shape[0] == 0:
        return None
    low = X.min(axis=0)
    return low if np.count_nonzero(X != low) <= SPARSE_DENSITY * X.size else None


def search_input(X: np.ndarray, offset: np.ndarray | None):
    """What the neighbour index sees for rows ``X``: the rows (dense search), or ``X - offset`` as CSR."""
    if offset is None:
        return X
    from scipy.sparse import csr_matrix

    return csr_matrix(X - offset)


def algorithm(offset: np.ndarray | None) -> str:
    """The scikit-learn neighbour algorithm for an index over ``search_input`` rows (CSR: brute force)."""
    return "auto" if offset is None else "brute"


def offset_arrays(offset: np.ndarray | None, version: int = 2) -> dict[str, np.ndarray]:
    """The bundle arrays that record the search: ``sparse_offset`` and ``sparse_search`` (the version)
    when sparse, nothing when dense."""
    return {} if offset is None else {"sparse_offset": offset, "sparse_search": np.array(version)}


def stored_offset(arrays) -> np.ndarray | None:
    """The offset :func:`offset_arrays` stored (``None``: dense search, also for bundles from before it)."""
    return np.asarray(arrays["sparse_offset"], float) if "sparse_offset" in arrays else None


def stored_version(arrays) -> int:
    """The sparse search version a bundle was calibrated with (1: before ``sparse_search`` was stored)."""
    return int(arrays["sparse_search"]) if "sparse_search" in arrays else 1


#: queries per chunk of :class:`FingerprintIndex` (a chunk's float32 distances to 16,000 rows: 4 MB)
CHUNK_ROWS = 64
#: up to this ``k`` the smallest distances are found by repeated ``argmin``
ARGMIN_K = 16


class FingerprintIndex:
    """Exact brute-force k-nearest-neighbour search among sparse reference rows (search version 2).

    The reference rows minus ``offset`` are kept as float32 CSR with their squared norms. For a chunk of
    queries, the squared distances up to each query's own norm, ``|r|^2 - 2 q.r``, come from one sparse
    product. The ``k`` smallest per query: by repeated ``argmin`` when ``k <= ARGMIN_K``; otherwise every
    query's distances are cut at the ``j``-th smallest of an evenly strided sample of them, ``j`` chosen so
    that about 1.5 ``k`` distances fall below the cut, and only those are partitioned (a query with fewer
    than ``k`` below its cut is partitioned whole). Each query's neighbours depend on that query alone,
    never on the batch it came in. Rows tied at the ``k``-th distance (fingerprints repeat in surveys)
    are chosen deterministically but not as scikit-learn chooses them; float32 rounding can swap rows
    whose distances agree to about 7 significant digits.
    """

    def __init__(self, X_ref: np.ndarray, offset: np.ndarray):
        from scipy.sparse import csr_matrix

        self.offset = np.asarray(offset, dtype=np.float64)
        self.rows = csr_matrix((X_ref - self.offset).astype(np.float32))
        self.norms = np.asarray(self.rows.multiply(self.rows).sum(axis=1), dtype=np.float32).ravel()

    def _chunks(self, X: np.ndarray):
        """``(start, D)`` per chunk of ``CHUNK_ROWS`` queries: ``D`` (c, m) float32, ``|r|^2 - 2 q.r``."""
        for start in range(0, X.shape[0], CHUNK_ROWS):
            q = (X[start:start + CHUNK_ROWS] - self.offset).astype(np.float32)
            D = self.rows @ np.ascontiguousarray(q.T)  # (m, c)
            D *= -2.0
            D += self.norms[:, None]
            yield start, np.ascontiguousarray(D.T)

    def kneighbors(self, X: np.ndarray, k: int) -> np.ndarray:
        """(N, k) indices of the ``k`` reference rows nearest to each row of ``X`` (N, d), in no order."""
        m = self.rows.shape[0]
        if k >= m:
            return np.tile(np.arange(m), (X.shape[0], 1))
        out = np.empty((X.shape[0], k), dtype=np.intp)
        for start, D in self._chunks(X):
            out[start:start + len(D)] = _smallest(D, k)
        return out

    def neighbourhoods(self, X: np.ndarray, k: int) -> list[np.ndarray]:
        """Per row of ``X``, the indices of the reference rows at most as far as its ``k``-th nearest:
        ``k`` rows, or more when rows tie at the ``k``-th distance, all of which are included, so that
        the answer does not depend on the order of the reference rows (a fingerprint with nothing
        detected is equally near every reference row with nothing detected)."""
        m = self.rows.shape[0]
        out = []
        for _, D in self._chunks(X):
            if k >= m:
                out += [np.arange(m)] * len(D)
                continue
            idx = _smallest(D, k, keep=True)
            within = D <= np.take_along_axis(D, idx, axis=1).max(axis=1)[:, None]
            tied = within.sum(axis=1) > k
            out += [np.flatnonzero(w) if t else i for i, w, t in zip(idx, within, tied)]
        return out


def _smallest(D: np.ndarray, k: int, keep: bool = False) -> np.ndarray:
    """(c, k) column indices of the ``k`` smallest entries of each row of ``D`` (c, m), ``k < m``;
    overwrites chosen entries of ``D`` unless ``keep``."""
    c, m = D.shape
    out = np.empty((c, k), dtype=np.intp)
    if k <= ARGMIN_K:
        rows = np.arange(c)
        saved = np.empty((k, c), dtype=D.dtype)
        for j in range(k):
            out[:, j] = a = D.argmin(axis=1)
            saved[j] = D[rows, a]
            D[rows, a] = np.inf
        if keep:
            for j in range(k):
                D[rows, out[:, j]] = saved[j]
        return out
    step = max(1, m // (4 * k))
    sample = D[:, ::step]
    j = min(sample.shape[1] - 1, (3 * k) // (2 * step) + 8)
    cut = np.partition(sample, j, axis=1)[:, j]
    for i in range(c):
        candidates = np.flatnonzero(D[i] <= cut[i])
        if candidates.size < k:
            candidates = np.arange(m)
        out[i] = candidates[np.argpartition(D[i, candidates], k - 1)[:k]]
    return out


def fingerprint_search(offset: np.ndarray | None, version: int) -> bool:
    """Whether a search recorded as (``offset``, ``version``) uses :class:`FingerprintIndex`."""
    return offset is not None and version >= 2


def neighbour_index(X_ref: np.ndarray, offset: np.ndarray | None, version: int, n_neighbors: int):
    """The index a bundle searches ``X_ref`` with: a :class:`FingerprintIndex` (sparse, version 2), or a
    fitted scikit-learn ``NearestNeighbors`` (dense, or sparse version 1: brute force on CSR)."""
    if fingerprint_search(offset, version):
        return FingerprintIndex(X_ref, offset)
    from sklearn.neighbors import NearestNeighbors

    return NearestNeighbors(n_neighbors=n_neighbors, algorithm=algorithm(offset)).fit(search_input(X_ref, offset))


def kneighbors(index, X: np.ndarray, k: int, offset: np.ndarray | None) -> np.ndarray:
    """(N, k) indices of the reference rows nearest to each row of ``X`` in an index of :func:`neighbour_index`."""
    if isinstance(index, FingerprintIndex):
        return index.kneighbors(X, k)
    return index.kneighbors(search_input(X, offset), n_neighbors=k, return_distance=False)


def distance_weighted_mean(X: np.ndarray, X_ref: np.ndarray, Y_ref: np.ndarray, neighbours, weights: str,
                           chunk: int = 1024) -> np.ndarray:
    """(N, n) mean of ``Y_ref`` over each row's neighbours (``neighbours[i]``: indices into the reference
    rows, any number per row), by scikit-learn's ``KNeighborsRegressor`` rule: ``"uniform"``, or
    ``"distance"`` (weights 1 / Euclidean distance, computed in float64; a row with neighbours at
    distance 0 averages those alone). Rows with the fewest neighbours (no ties) are computed together,
    ``chunk`` at a time (the gathered neighbours take rows x k x d floats)."""
    out = np.empty((len(neighbours), Y_ref.shape[1]), dtype=np.float64)
    if not len(neighbours):
        return out
    sizes = np.fromiter(map(len, neighbours), dtype=np.intp, count=len(neighbours))
    common = np.flatnonzero(sizes == sizes.min())
    groups = [(rows, np.stack([neighbours[i] for i in rows])) for rows in np.array_split(
        common, -(-len(common) // chunk))]
    groups += [(np.array([i]), np.asarray(neighbours[i])[None]) for i in np.flatnonzero(sizes > sizes.min())]
    for rows, idx in groups:
        if weights == "uniform":
            out[rows] = Y_ref[idx].mean(axis=1)
            continue
        with np.errstate(divide="ignore"):
            w = 1.0 / np.linalg.norm(X[rows, None, :] - X_ref[idx], axis=2)
        exact = np.isinf(w)
        hit = exact.any(axis=1)
        w[hit] = exact[hit]
        out[rows] = np.einsum("nk,nkt->nt", w, Y_ref[idx]) / w.sum(axis=1)[:, None]
    return out
