"""An exact k-nearest-neighbour index over sparse fingerprints that scores only the rows that can be near.

A fingerprint hears a few of a survey's transmitters, and the rows that share them are still a third of the
survey: scoring every reference row for every query (:class:`~models.centres.search.FingerprintIndex`'s brute
force) spends most of its time on rows that cannot be neighbours. :class:`ClusterIndex` groups the reference rows
into clusters (scikit-learn's k-means on the sparse rows); each row keeps its distance to its cluster's centre.
A query visits the cluster of nearest bound first, then only clusters, and within them only rows, that the
triangle inequality leaves within reach of its ``k``-th distance found so far. The rows it scores get the float32
distance the brute force computes, to the last bit (:mod:`models.centres._pruned`); every row it skips is proven
farther by more than that distance's rounding error. So the answer, ties included, is the brute force's; the
clusters only decide how fast it comes. Each cluster keeps its rows' values as a dense block over the columns its
rows hear, so that a query's heard columns are multiplied in by vector instructions.
"""

from __future__ import annotations

import numpy as np

#: the most bytes the clusters' blocks may take (beyond: the index is not built, the brute force searches)
BLOCK_BYTES = 256 * 2**20
#: reference rows per cluster, about
ROWS_PER_CLUSTER = 64
#: queries per call of the compiled search (each call on one of the search threads)
CHUNK = 128


class ClusterIndex:
    """Reference rows as float32 CSR ``rows`` (m, d) with their float32 squared norms ``norms``, searched exactly.

    Parameters
    ----------
    rows : scipy.sparse.csr_matrix of shape (m, d), float32
        The reference rows (minus the sparse offset), canonical (sorted column indices).
    norms : ndarray of shape (m,), float32
        Their squared norms, as the brute force adds them.
    labels : ndarray of shape (m,)
        Each row's cluster (:meth:`build`: scikit-learn's k-means, which decides the speed, never the answer).
    """

    @classmethod
    def build(cls, rows, norms: np.ndarray, seed: int = 0) -> "ClusterIndex | None":
        """The index of ``rows`` clustered by scikit-learn's k-means (about ``ROWS_PER_CLUSTER`` rows each), or
        ``None`` when its blocks would take more than ``BLOCK_BYTES``."""
        from sklearn.cluster import KMeans

        rows = rows.tocsr().astype(np.float32)
        rows.sort_indices()
        C = int(np.clip(rows.shape[0] // ROWS_PER_CLUSTER, 1, 1024))
        labels = KMeans(C, init="random", n_init=1, max_iter=10, random_state=seed).fit(
            rows.astype(np.float64)).labels_
        heard = _heard_counts(rows, labels, C)
        if 4 * int(np.bincount(labels, minlength=C) @ (heard > 0).sum(axis=1)) + 16 * C * rows.shape[1] > BLOCK_BYTES:
            return None
        return cls(rows, norms, labels)

    def __init__(self, rows, norms: np.ndarray, labels: np.ndarray):
        rows = rows.tocsr().astype(np.float32)
        rows.sort_indices()
        m, d = rows.shape
        labels = np.asarray(labels, dtype=np.intp)
        C = int(labels.max(initial=0)) + 1
        R64 = rows.astype(np.float64)
        counts = np.bincount(labels, minlength=C)
        centres = np.asarray((_indicator(labels, C) @ R64).todense()) / np.maximum(counts, 1)[:, None]
        dr = _distances_to(R64, centres, labels)
        order = np.lexsort((dr, labels))  # each cluster's rows, nearest its centre first
        self.cptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self.orig = order.astype(np.int64)
        self.dr = dr[order]
        self.norms = np.ascontiguousarray(np.asarray(norms, dtype=np.float32)[order])
        self.radius = np.zeros(C)
        np.maximum.at(self.radius, labels, dr)
        self.centres_t = np.ascontiguousarray(centres.T)
        self.cnorm = np.einsum("ij,ij->i", centres, centres)
        low, high = _ranges(rows, labels, C)
        self.low_t, self.high_t = np.ascontiguousarray(low.T), np.ascontiguousarray(high.T)
        self.low_sq = np.einsum("ij,ij->i", low.astype(np.float64), low.astype(np.float64))
        self.rmax = float(np.sqrt(np.asarray(R64.multiply(R64).sum(axis=1)).max(initial=0.0)))
        self.maxnnz = int(np.diff(rows.indptr).max(initial=0))
        sorted_rows = rows[order]
        self.colpos = np.full(C * d, -1, dtype=np.int32)
        blocks, self.bptr, used = [], np.zeros(C, dtype=np.int64), 0
        for c in range(C):  # the cluster's rows as a dense block over the columns they hear, column-major
            block = sorted_rows[self.cptr[c]:self.cptr[c + 1]]
            heard = np.unique(block.indices)
            self.colpos[c * d + heard] = np.arange(len(heard), dtype=np.int32)
            blocks.append(np.ascontiguousarray(block[:, heard].toarray().T).ravel())
            self.bptr[c] = used
            used += blocks[-1].size
        self.blocks = np.concatenate(blocks).astype(np.float32) if blocks else np.empty(0, np.float32)
        self.n_rows, self.n_clusters = m, C

    @property
    def nbytes(self) -> int:
        """Bytes the index holds beyond the rows themselves."""
        return sum(a.nbytes for a in (self.blocks, self.colpos, self.centres_t, self.dr, self.orig, self.norms))

    def search(self, Q: np.ndarray, k: int, ties: bool):
        """``(ptr, rows, distances)`` of :func:`models.centres._pruned.search` for queries ``Q`` (N, d) float32."""
        from models.centres._pruned import search

        return search(np.ascontiguousarray(Q, dtype=np.float32), int(k), bool(ties), self.cptr, self.bptr,
                      self.blocks, self.colpos, self.norms, self.orig, self.dr, self.centres_t, self.cnorm,
                      self.radius, self.low_t, self.high_t, self.low_sq, self.rmax, self.maxnnz)


def _indicator(labels: np.ndarray, C: int):
    """(C, m) sparse 0/1: row ``i`` of the reference in cluster ``labels[i]``."""
    from scipy.sparse import csr_matrix

    m = len(labels)
    return csr_matrix((np.ones(m), (labels, np.arange(m))), shape=(C, m))


def _heard_counts(rows, labels: np.ndarray, C: int) -> np.ndarray:
    """(C, d) how many rows of each cluster hold an entry in each column."""
    out = np.zeros((C, rows.shape[1]), dtype=np.int64)
    np.add.at(out, (labels[np.repeat(np.arange(rows.shape[0]), np.diff(rows.indptr))], rows.indices), 1)
    return out


def _ranges(rows, labels: np.ndarray, C: int) -> tuple[np.ndarray, np.ndarray]:
    """(C, d) float32 per-column minimum and maximum over each cluster's rows, a row without an entry counting
    as 0 (0 and 0 for a cluster no row of which holds the column)."""
    at = (labels[np.repeat(np.arange(rows.shape[0]), np.diff(rows.indptr))], rows.indices)
    low = np.full((C, rows.shape[1]), np.inf, dtype=np.float32)
    high = np.full((C, rows.shape[1]), -np.inf, dtype=np.float32)
    np.minimum.at(low, at, rows.data)
    np.maximum.at(high, at, rows.data)
    counts = np.bincount(labels, minlength=C)[:, None]
    everyone = (_heard_counts(rows, labels, C) == counts) & (counts > 0)
    low = np.where(everyone, low, np.minimum(low, 0.0))
    high = np.where(everyone, high, np.maximum(high, 0.0))
    return low.astype(np.float32), high.astype(np.float32)


def _distances_to(R64, centres: np.ndarray, labels: np.ndarray, block: int = 2048) -> np.ndarray:
    """(m,) float64 Euclidean distance of each row of ``R64`` to its cluster's centre, from the differences
    themselves (no cancellation), ``block`` rows at a time."""
    out = np.empty(R64.shape[0])
    for start in range(0, R64.shape[0], block):
        diff = R64[start:start + block].toarray()
        diff -= centres[labels[start:start + block]]
        out[start:start + block] = np.sqrt(np.einsum("ij,ij->i", diff, diff))
    return out


def compile_search() -> None:
    """Compile (or load from numba's on-disk cache) the search's loop, on a few random rows."""
    from scipy.sparse import random as sparse_random

    rows = sparse_random(64, 16, density=0.2, format="csr", dtype=np.float32, random_state=0)
    norms = np.asarray(rows.multiply(rows).sum(axis=1), dtype=np.float32).ravel()
    ClusterIndex(rows, norms, np.arange(64) % 4).search(np.zeros((1, 16), dtype=np.float32), 3, True)
