"""Exact nearest-neighbour search on fingerprints as sparse vectors.

RSSI fingerprints after the "not detected" step are mostly one value per column (the floor): on
UJIIndoorLoc 3.5 % of the entries differ from it. Distances do not change when every row is moved by
the same vector, so rows minus the per-column minimum of the reference rows are sparse vectors with
the same neighbours, whose distances are sparse products. :func:`sparse_offset` decides (and gives
the vector) at fit time; the estimators store it with the search version, so a bundle searches the
way it was calibrated:

- version 3 (new fits): :class:`FingerprintIndex`, the rows as float32 CSR, queries in chunks whose
  distances stay in cache, the ``k`` smallest per query picked without partitioning all of every row,
  rows tied at the ``k``-th distance taken by lowest row index;
- version 2: the same search, with tied rows taken as a per-query partition happened to leave them;
- version 1 (sparse bundles from before ``sparse_search`` was stored): scikit-learn's brute force on
  CSR input.

Dense rows (too few columns, or not sparse enough) are searched by :class:`DenseIndex` from version 3
(recorded as ``dense_search``): the same selection and tie rule on float64 distances from one matrix
product per chunk, prepared when the estimator is fitted or loaded. Dense bundles from before it
(version 1) keep scikit-learn's search (``KNeighborsRegressor`` / ``NearestNeighbors`` with
``algorithm="auto"``).

Rows tied at the ``k``-th distance may be chosen differently by each, so each bundle keeps its own.
"""

from __future__ import annotations

import hashlib
import os
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from contextvars import ContextVar

import numpy as np

from models.centres._select import dense_distances, within_kth

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


#: the search version of new fits
SEARCH_VERSION = 3
#: the first version at which dense rows are searched by :class:`DenseIndex` (before: scikit-learn)
DENSE_VERSION = 3


def offset_arrays(offset: np.ndarray | None, version: int = SEARCH_VERSION) -> dict[str, np.ndarray]:
    """The bundle arrays that record the search: ``sparse_offset`` and ``sparse_search`` (the version)
    when sparse; ``dense_search`` when dense from version 3, nothing for scikit-learn's dense search."""
    if offset is None:
        return {"dense_search": np.array(version)} if version >= DENSE_VERSION else {}
    return {"sparse_offset": offset, "sparse_search": np.array(version)}


def stored_offset(arrays) -> np.ndarray | None:
    """The offset :func:`offset_arrays` stored (``None``: dense search, also for bundles from before it)."""
    return np.asarray(arrays["sparse_offset"], float) if "sparse_offset" in arrays else None


def stored_version(arrays) -> int:
    """The search version a bundle was calibrated with (1: scikit-learn's, from before the version was stored)."""
    for key in ("sparse_search", "dense_search"):
        if key in arrays:
            return int(arrays[key])
    return 1


#: queries per chunk of :class:`FingerprintIndex` (a chunk's float32 distances to 16,000 rows: 4 MB)
CHUNK_ROWS = 64
#: up to this ``k`` the smallest distances are found by repeated ``argmin``
ARGMIN_K = 16
#: up to this many reference rows, each query's distances are searched whole by one partition (version 3)
WHOLE_COLUMNS = 4096
#: up to this ``k`` the ``k``-th smallest distance of a row is found by ``k`` passes of ``argmin``/``min``
#: rather than a partition (:func:`kth_smallest`)
ARGMIN_KTH = 8
#: up to this many queries a version-3 :class:`FingerprintIndex` searches each through the columns it hears
HEARD_ROWS = 8
#: ... when its dense copy of the reference columns takes at most this many bytes
COLUMNS_BYTES = 256 * 2**20
#: beyond this many reference rows, a version-3 :class:`FingerprintIndex` searches through the clusters of
#: :class:`~models.centres.clusters.ClusterIndex` (the same answer, ties included)
CLUSTER_ROWS = 4096
#: ... for ``k`` up to this (beyond, the k-th distance admits most clusters and the brute force is faster)
CLUSTER_K = 32
#: ... once it has searched this many queries a reference row (or :meth:`FingerprintIndex.prepare` built them):
#: building the clusters costs about what the brute force spends on that many (a fold's one-off search does not)
CLUSTER_AFTER = 0.25


def default_search_threads(workers: int = 1) -> int:
    """One thread per core left to each of ``workers`` processes, at least 1 and at most 4."""
    return max(1, min(4, (os.cpu_count() or 1) // max(1, int(workers))))


#: threads that search the chunks of one call (numpy and scipy's sparse product release the GIL);
#: :func:`set_search_threads` changes it (the service: ``LMVE_SEARCH_THREADS``)
SEARCH_THREADS = default_search_threads()
#: the most bytes of distances one :func:`shared_distances` scope keeps (beyond: computed again)
SHARED_BYTES = 64 * 2**20
#: what the current :func:`shared_distances` scope keeps: per index, the query array and its chunks' distances
_shared: ContextVar[dict | None] = ContextVar("lmve_shared_distances", default=None)
_pool: ThreadPoolExecutor | None = None
_lock = threading.Lock()
_indexes: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


@contextmanager
def shared_distances():
    """A scope in which a :class:`FingerprintIndex` searched again with the same query array reuses the
    distances it computed the first time (the kNN centre and NLE of a bundle search the same reference
    rows, :meth:`FingerprintIndex.of`, for the same request), up to ``SHARED_BYTES``; they are dropped
    when the scope ends. Nested scopes share the outer one's."""
    if _shared.get() is not None:
        yield
        return
    token = _shared.set({})
    try:
        yield
    finally:
        _shared.reset(token)


def set_search_threads(n: int) -> None:
    """From now on, search the chunks of one call on ``n`` threads (1: on the calling thread)."""
    global SEARCH_THREADS, _pool
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        from models.exceptions import InputError

        raise InputError(f"search threads must be a positive integer; got {n!r}", field="search_threads",
                         expected="a positive integer", received=repr(n))
    with _lock:
        old, _pool, SEARCH_THREADS = _pool, None, n
    if old is not None:
        old.shutdown(wait=False)


def _after_fork_in_child() -> None:
    """A forked child has none of its parent's threads: it starts its own pool (and lock) when it searches."""
    global _pool, _lock
    _pool, _lock = None, threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


#: set in the search's own threads: a call from one of them runs its chunks there (no pool waits on itself)
_inside = threading.local()


def map_chunks(fn, items: list) -> list:
    """``[fn(i) for i in items]``, on ``SEARCH_THREADS`` threads when there is more than one item (in order; on
    the calling thread when it is one of them)."""
    global _pool
    if len(items) < 2 or SEARCH_THREADS < 2 or getattr(_inside, "yes", False):
        return [fn(i) for i in items]
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(SEARCH_THREADS, thread_name_prefix="lmve-search", initializer=_mark)
    return list(_pool.map(fn, items))


def _mark() -> None:
    _inside.yes = True


#: a batch of at least this many rows is split across the search's threads by :func:`in_parts`
PART_ROWS = 128


def in_parts(fn, X: np.ndarray) -> np.ndarray:
    """``fn(X)`` for a row-wise ``fn`` (each output row depends on its input row alone): a batch of
    ``PART_ROWS`` or more in ``SEARCH_THREADS`` contiguous parts of whole ``CHUNK_ROWS`` chunks on the search's
    threads, stacked."""
    parts = min(SEARCH_THREADS, X.shape[0] // PART_ROWS)
    if parts < 2 or getattr(_inside, "yes", False):
        return fn(X)
    step = -(-X.shape[0] // (parts * CHUNK_ROWS)) * CHUNK_ROWS  # whole chunks: a search's chunks stay the same
    return np.concatenate(map_chunks(fn, [X[i:i + step] for i in range(0, X.shape[0], step)]))


class ExactIndex:
    """Exact brute-force k-nearest-neighbour search over reference rows prepared once (search version >= 2
    sparse, >= 3 dense); subclasses give the distances of a chunk of queries (:meth:`_distances`).

    Chunks of ``CHUNK_ROWS`` queries are searched on ``SEARCH_THREADS`` threads. The ``k`` smallest per
    query: by repeated ``argmin`` when ``k <= ARGMIN_K``; otherwise every query's distances are cut at the
    ``j``-th smallest of an evenly strided sample of them, ``j`` chosen so that about 1.5 ``k`` distances
    fall below the cut, and only those are partitioned (a query with fewer than ``k`` below its cut is
    partitioned whole). Each query's neighbours depend on that query alone, never on the batch it came in
    or the thread that searched it. Rows tied at the ``k``-th distance (fingerprints repeat in surveys):
    from ``version`` 3 those of lowest row index (the first ``k`` of a stable sort), in version 2 as a
    per-query partition leaves them.
    """

    version: int
    n_rows: int
    #: bytes per distance
    itemsize: int
    #: the most bytes of one query array's distances this index keeps for a second search (with ``SHARED_BYTES``)
    share_bytes: float = float("inf")

    @classmethod
    def of(cls, X_ref: np.ndarray, offset: np.ndarray | None, version: int = SEARCH_VERSION) -> "ExactIndex":
        """The index of ``X_ref`` (about ``offset`` when sparse, :class:`FingerprintIndex`; dense when ``None``,
        :class:`DenseIndex`): one object for identical rows, offset and version while any holder lives (a
        bundle's kNN centre and NLE keep the same train rows), so that :func:`shared_distances` lets the second
        search reuse the first's distances."""
        X_ref = np.ascontiguousarray(X_ref, dtype=np.float64)
        digest = hashlib.blake2b(X_ref.data, digest_size=16)
        if offset is not None:
            offset = np.ascontiguousarray(offset, dtype=np.float64)
            digest.update(offset.data)
        kind = DenseIndex if offset is None else FingerprintIndex
        key = (kind.__name__, X_ref.shape, int(version), digest.hexdigest())
        with _lock:
            index = _indexes.get(key)
            if index is None:
                index = _indexes[key] = kind(X_ref, offset, version) if offset is not None else kind(X_ref, version)
        return index

    def prepare(self) -> None:
        """Load the compiled loops a search and the weighted mean use (numba's cache on disk, else compiled:
        seconds, once per machine), so that the first request does not pay for them; a
        :class:`FingerprintIndex` also builds its clusters."""
        compile_loops()

    def __deepcopy__(self, memo) -> "ExactIndex":
        """The index itself: it is never modified after construction (a deep-copied estimator keeps sharing it)."""
        return self

    def _distances(self, X: np.ndarray) -> np.ndarray:  # pragma: no cover - abstract
        """(c, m) ``|r|^2 - 2 q.r`` of the queries ``X`` (c, d) to every reference row (the squared distance
        less the query's own norm, which does not change the order)."""
        raise NotImplementedError

    def _search(self, X: np.ndarray, select) -> list:
        """``select(D)`` per chunk of ``CHUNK_ROWS`` queries of ``X``, in order; ``select`` must leave ``D``
        as it found it. The chunks' distances come from (or go to) the :func:`shared_distances` scope."""
        scope, keep = _shared.get(), False
        if scope is not None:
            hit = scope.get(self)
            if hit is not None and hit[0] is X:
                return map_chunks(select, hit[1])
            if hit is not None:  # another query array: its distances replace these
                del scope[self]
            kept = sum(D.nbytes for _, chunks in scope.values() for D in chunks)
            keep = kept + self.itemsize * X.shape[0] * self.n_rows <= min(SHARED_BYTES, self.share_bytes)

        def task(start):  # a chunk's distances outlive it only to be shared: all of them are (N, m)
            D = self._distances(X[start:start + CHUNK_ROWS])
            return (D if keep else None), select(D)

        done = map_chunks(task, list(range(0, X.shape[0], CHUNK_ROWS)))
        if scope is not None and keep:
            scope[self] = (X, [D for D, _ in done])
        return [out for _, out in done]

    def kneighbors(self, X: np.ndarray, k: int) -> np.ndarray:
        """(N, k) indices of the ``k`` reference rows nearest to each row of ``X`` (N, d), in no order."""
        m = self.n_rows
        if k >= m:
            return np.tile(np.arange(m), (X.shape[0], 1))
        if not X.shape[0]:
            return np.empty((0, k), dtype=np.intp)
        return np.concatenate(self._search(X, lambda D: _smallest(D, k, self.version)))

    def neighbourhoods(self, X: np.ndarray, k: int) -> np.ndarray | list[np.ndarray]:
        """Per row of ``X``, the indices of the reference rows at most as far as its ``k``-th nearest:
        ``k`` rows, or more when rows tie at the ``k``-th distance, all of which are included, so that
        the answer does not depend on the order of the reference rows (a fingerprint with nothing
        detected is equally near every reference row with nothing detected). An (N, k) array (ascending
        indices) when no row has ties, else a list of index arrays."""
        m = self.n_rows
        if k >= m:
            return np.broadcast_to(np.arange(m), (X.shape[0], m))

        def select(D):
            columns, counts = within_kth(D, k, True)
            if columns.size == D.shape[0] * k:  # every row has exactly k: no ties
                return columns.reshape(D.shape[0], k)
            return np.split(columns, np.cumsum(counts[:-1]))

        chunks = self._search(X, select) if X.shape[0] else [np.empty((0, k), dtype=np.intp)]
        if all(isinstance(chunk, np.ndarray) for chunk in chunks):
            return np.concatenate(chunks) if len(chunks) > 1 else chunks[0]
        return [near for chunk in chunks for near in chunk]


class FingerprintIndex(ExactIndex):
    """Sparse reference rows (search versions 2 and 3): the rows minus ``offset`` as float32 CSR with their
    squared norms; a chunk's distances come from one sparse product. float32 rounding can swap rows whose
    distances agree to about 7 significant digits.

    Version 3 searches up to ``HEARD_ROWS`` queries one by one through the columns each query hears
    (:meth:`_heard`), with the same answer (rows and ties) as the chunked search."""

    itemsize = 4

    def __init__(self, X_ref: np.ndarray, offset: np.ndarray, version: int = SEARCH_VERSION):
        from scipy.sparse import csr_matrix

        self.version = int(version)
        self.offset = np.asarray(offset, dtype=np.float64)
        self.rows = csr_matrix((X_ref - self.offset).astype(np.float32))
        self.norms = np.asarray(self.rows.multiply(self.rows).sum(axis=1), dtype=np.float32).ravel()
        self.n_rows = self.rows.shape[0]
        norms = self.norms.astype(np.float64)
        #: the largest |r| and |r|^2 of the reference rows: the scale of :meth:`_heard`'s error bound
        self._largest = (float(np.sqrt(norms.max(initial=0.0))), float(norms.max(initial=0.0)))
        self._columns: np.ndarray | None = None
        #: the ClusterIndex once built (False: the rows do not fit one), and the queries searched so far
        self._cluster_index, self._queries = None, 0

    def _query(self, X: np.ndarray) -> np.ndarray:
        """(c, d) float32 ``-2 (x - offset)`` of the queries ``X`` (c, d), as every search computes it."""
        q = np.subtract(X, self.offset, order="C").astype(np.float32)  # C order: each query's columns together
        q *= -2.0
        return q

    def _distances(self, X: np.ndarray) -> np.ndarray:
        """(c, m) float32 ``|r|^2 - 2 q.r`` of the queries ``X`` (c, d) to every reference row."""
        q = self._query(X)
        P = self.rows @ np.ascontiguousarray(q.T)  # (m, c): -2 q.r
        D = np.empty((P.shape[1], P.shape[0]), dtype=np.float32)
        return np.add(P.T, self.norms, out=D)  # the transpose and the norms in one pass

    # ------------------------------------------------------------------ many reference rows: the clusters
    def prepare(self) -> None:
        """Build what a search of this index will use (:meth:`_clusters`, and its compiled loop), so that the
        first request does not pay for it."""
        super().prepare()
        clusters = self._clusters(force=True)
        if clusters is not None:
            clusters.search(np.zeros((1, self.rows.shape[1]), dtype=np.float32), 1, True)

    def _clusters(self, force: bool = False):
        """The :class:`~models.centres.clusters.ClusterIndex` of the rows when version 3 searches them that way
        (more than ``CLUSTER_ROWS`` rows), else ``None``. Built with ``force`` (:meth:`prepare`, and a search
        that has brought the queries searched to ``CLUSTER_AFTER`` times the reference rows: by then the brute
        force has cost about what the build does) and kept for the index's life."""
        if self.version < 3 or self.n_rows <= CLUSTER_ROWS or self._cluster_index is False:
            return None
        if self._cluster_index is None and force:
            with _lock:
                if self._cluster_index is None:
                    from models.centres.clusters import ClusterIndex

                    self._cluster_index = ClusterIndex.build(self.rows, self.norms) or False
        return self._cluster_index or None

    def _pruned(self, X: np.ndarray, k: int, ties: bool):
        """Per query of ``X``, :class:`~models.centres.clusters.ClusterIndex`'s rows (``None`` when it does not
        search ``X``): an (N, k) array when every query has ``k``, else a list."""
        if k >= self.n_rows or k > CLUSTER_K or not X.shape[0]:
            return None
        self._queries += X.shape[0]
        clusters = self._clusters(force=self._queries >= CLUSTER_AFTER * self.n_rows)
        if clusters is None:
            return None
        from models.centres.clusters import CHUNK

        Q = self._query(X)
        parts = map_chunks(lambda s: clusters.search(Q[s:s + CHUNK], k, ties), list(range(0, len(Q), CHUNK)))
        if all(len(rows) == k * (len(ptr) - 1) for ptr, rows, _ in parts):
            near = np.concatenate([rows for _, rows, _ in parts]).reshape(len(Q), k)
            nearest_first = self.n_rows > WHOLE_COLUMNS and k <= ARGMIN_K  # the chunked search's order
            return near if ties or nearest_first else np.sort(near, axis=1)
        return [rows[a:b] for ptr, rows, _ in parts for a, b in zip(ptr[:-1].tolist(), ptr[1:].tolist())]

    # ------------------------------------------------------------------ a few queries: the heard columns
    def kneighbors(self, X: np.ndarray, k: int) -> np.ndarray:
        near = self._pruned(X, k, ties=False)
        if near is not None:
            return near
        if self._by_heard(X, k):
            return np.stack([self._heard(q, D, k, ties=False) for q, D in self._approximate(X)])
        return super().kneighbors(X, k)

    def neighbourhoods(self, X: np.ndarray, k: int) -> np.ndarray | list[np.ndarray]:
        near = self._pruned(X, k, ties=True)
        if near is not None:
            return near
        if self._by_heard(X, k):
            near = [self._heard(q, D, k, ties=True) for q, D in self._approximate(X)]
            return np.stack(near) if all(len(n) == k for n in near) else near
        return super().neighbourhoods(X, k)

    def _by_heard(self, X: np.ndarray, k: int) -> bool:
        """Whether :meth:`_heard` searches ``X``: version 3, 1 to ``HEARD_ROWS`` queries, ``k`` below the
        rows, and the dense column copy within ``COLUMNS_BYTES``."""
        return (self.version >= 3 and 0 < X.shape[0] <= HEARD_ROWS and k < self.n_rows
                and 4 * (self.rows.shape[1] + 1) * self.n_rows <= COLUMNS_BYTES)

    def _dense_columns(self) -> np.ndarray:
        """(d + 1, m) float32: the reference rows' columns, dense and contiguous, then their squared norms;
        built on first use and kept for the index's life."""
        if self._columns is None:
            with _lock:
                if self._columns is None:
                    d = self.rows.shape[1]
                    columns = np.zeros((d + 1, self.n_rows), dtype=np.float32)
                    self.rows.T.toarray(out=columns[:d])
                    columns[d] = self.norms
                    self._columns = columns
        return self._columns

    def _approximate(self, X: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per query of ``X``: ``(q, D~)``, its ``-2 (x - offset)`` and the (m,) float32 distances of one BLAS
        product over the columns it hears plus the norms (``[q_H, 1] @ [columns_H; norms]``), which differ
        from the exact ones only by rounding (:meth:`_heard` bounds it). Within :func:`shared_distances` a
        second search of the same query array reuses them."""
        scope = _shared.get()
        key = (self, "heard")
        if scope is not None and (hit := scope.get(key)) is not None and hit[0] is X:
            return list(zip(self._query(X), hit[1]))
        columns, d, queries = self._dense_columns(), self.rows.shape[1], self._query(X)
        out = []
        for q in queries:
            heard = np.flatnonzero(q)
            out.append(np.append(q[heard], np.float32(1.0)) @ columns.take(np.append(heard, d), axis=0))
        if scope is not None:
            scope[key] = (X, out)
        return list(zip(queries, out))

    def _heard(self, q: np.ndarray, D: np.ndarray, k: int, ties: bool) -> np.ndarray:
        """One query's neighbours from its approximate distances ``D`` (:meth:`_approximate`): those of the
        exact search (:meth:`ExactIndex.kneighbors`, or with ``ties`` :meth:`ExactIndex.neighbourhoods`), in
        its order (ascending rows; ``kneighbors`` of up to ``ARGMIN_K`` among more than ``WHOLE_COLUMNS`` rows
        nearest first), so that sums over them (NLE's) are the same to the last bit.

        Each approximate distance is within ``E = c (|q| max|r| + max|r|^2)`` of the exact float32 one,
        ``c = (2 h + 8) 2^-24`` for ``h`` heard columns: both sum the same float32 products, in another
        order and with the norm, and a sum of ``n`` terms in float32 is off by at most ``n 2^-24`` times the
        sum of their magnitudes, here at most ``|q||r| + |r|^2`` (Cauchy-Schwarz). So with ``T~`` the
        ``k``-th smallest approximate distance, the exact ``k``-th lies within ``E`` of it: rows below
        ``T~ - 2E`` are neighbours, rows above ``T~ + 2E`` are not, and only the rows between (ties, and
        rows within rounding of the ``k``-th) get their exact distances (:meth:`_exact`), which settle
        them by the exact search's rule."""
        heard = np.count_nonzero(q)
        q64 = q.astype(np.float64)
        qn = float(np.sqrt(np.dot(q64, q64)))
        E = (2 * heard + 8) * 2.0 ** -24 * 1.01 * (qn * self._largest[0] + self._largest[1]) + 1e-30
        T = float(kth_smallest(D[None], k)[0, 0])
        slack = 2.0 ** -21 * (abs(T) + 2 * E)  # float32 thresholds: rounded outward by more than their ulp
        hi, lo = np.float32(T + 2 * E + slack), np.float32(T - 2 * E - slack)
        near = np.flatnonzero(D <= hi)  # ascending; every row at or under the exact k-th distance
        if len(near) > k:
            keep = D[near] < lo  # certainly nearer than the k-th
            open_ = near[~keep]
            exact = self._exact(open_, q)
            need = k - int(keep.sum())
            if ties:
                chosen = exact <= np.partition(exact, need - 1)[need - 1]
            else:
                chosen = np.zeros(len(open_), dtype=bool)
                chosen[np.searchsorted(open_, _first_k(exact[None], open_[None], need)[0])] = True
            keep[~keep] = chosen
            near = near[keep]
        if not ties and k <= ARGMIN_K and self.n_rows > WHOLE_COLUMNS:  # the chunked search's order: nearest first
            near = near[np.argsort(D[near], kind="stable")]
            if np.any(np.diff(D[near].astype(np.float64)) <= 2 * E + slack):  # within rounding: the exact order
                near = near[np.lexsort((near, self._exact(near, q)))]
        return near

    def _exact(self, rows: np.ndarray, q: np.ndarray) -> np.ndarray:
        """The exact float32 distances of reference ``rows`` to one query ``q`` (:meth:`_query`): the same
        sparse product as :meth:`_distances`, on those rows alone."""
        P = self.rows[rows] @ q[:, None]
        return np.add(P[:, 0], self.norms[rows])


class DenseIndex(ExactIndex):
    """Dense reference rows (search version 3): the rows transposed (d, m) and their squared norms in
    float64, kept for the index's life; a chunk's distances are one compiled pass
    (:func:`~models.centres._select.dense_distances`: a query's distances are the same bits in any batch, which
    a BLAS product's are not). They agree with the exact ones to about ``1e-15 |q|^2``; identical reference
    rows get identical distances.

    Replaces scikit-learn's ``NearestNeighbors.kneighbors`` on the request path (its validation and
    dispatch cost per call dominate one row); the library stays the reference its tests compare with."""

    itemsize = 8
    #: a batch's distances are kept for the second search only while they fit in a core's cache: beyond,
    #: computing them again (one pass over a few columns) is faster than reading them back from
    #: memory
    share_bytes = 2**20

    def __init__(self, X_ref: np.ndarray, version: int = SEARCH_VERSION):
        X_ref = np.asarray(X_ref, dtype=np.float64)
        self.version = int(version)
        self.rows_t = np.ascontiguousarray(X_ref.T)
        self.norms = np.einsum("ij,ij->i", X_ref, X_ref)
        self.n_rows = X_ref.shape[0]

    def _distances(self, X: np.ndarray) -> np.ndarray:
        """(c, m) float64 ``|r|^2 - 2 q.r`` of the queries ``X`` (c, d)."""
        return dense_distances(np.ascontiguousarray(X, dtype=np.float64), self.rows_t, self.norms)


def kth_smallest(D: np.ndarray, k: int) -> np.ndarray:
    """(c, 1) the ``k``-th smallest entry of each row of ``D`` (c, m), ``k <= m``, counting repeats (what
    ``np.partition(D, k - 1, axis=1)[:, k - 1:k]`` gives); ``D`` is left as it was. Up to :data:`ARGMIN_KTH`:
    ``k - 1`` passes of ``argmin`` that set each row's smallest aside, then a ``min`` (faster than a
    partition for small ``k``); beyond, or for fewer than 16 rows of at most ``WHOLE_COLUMNS``
    entries, the partition."""
    if k > ARGMIN_KTH or (D.shape[0] < 16 and D.shape[1] <= WHOLE_COLUMNS):  # few short rows: each pass's
        return np.partition(D, k - 1, axis=1)[:, k - 1:k]                     # fixed cost outweighs the partition
    rows = np.arange(D.shape[0])
    taken = np.empty((k - 1, D.shape[0]), dtype=np.intp)
    saved = np.empty((k - 1, D.shape[0]), dtype=D.dtype)
    for j in range(k - 1):
        taken[j] = a = D.argmin(axis=1)
        saved[j] = D[rows, a]
        D[rows, a] = np.inf
    kth = D.min(axis=1, keepdims=True)
    for j in reversed(range(k - 1)):  # the first value taken from a column is the one it held
        D[rows, taken[j]] = saved[j]
    return kth


def _smallest(D: np.ndarray, k: int, version: int = SEARCH_VERSION) -> np.ndarray:
    """(c, k) column indices of the ``k`` smallest entries of each row of ``D`` (c, m), ``k < m``;
    ``D`` is left as it was. Ties at the ``k``-th value: the lowest columns (version 3, and always up
    to ``ARGMIN_K``, where repeated ``argmin`` takes the first), else as a partition leaves them (2).
    Version 3 with at most ``WHOLE_COLUMNS`` columns: one partition of each whole row (ascending columns)."""
    c, m = D.shape
    if version >= 3 and m <= WHOLE_COLUMNS:  # few reference rows: each whole row at once
        return within_kth(D, k, False)[0].reshape(c, k)  # what _first_k returns, compiled
    if k <= ARGMIN_K:
        out = np.empty((c, k), dtype=np.intp)
        rows = np.arange(c)
        saved = np.empty((k, c), dtype=D.dtype)
        for j in range(k):
            out[:, j] = a = D.argmin(axis=1)
            saved[j] = D[rows, a]
            D[rows, a] = np.inf
        for j in range(k):
            D[rows, out[:, j]] = saved[j]
        return out
    # version 3's answer does not depend on the cut, only its speed: a sample of about k distances, not 4k
    step = max(1, m // ((4 if version < 3 else 1) * k))
    sample = D[:, ::step]
    j = min(sample.shape[1] - 1, (3 * k) // (2 * step) + 8)
    cut = np.partition(sample, j, axis=1)[:, j]
    if version < 3:
        out = np.empty((c, k), dtype=np.intp)
        for i in range(c):
            candidates = np.flatnonzero(D[i] <= cut[i])
            if candidates.size < k:
                candidates = np.arange(m)
            out[i] = candidates[np.argpartition(D[i, candidates], k - 1)[:k]]
        return out
    below = D <= cut[:, None]
    counts = below.sum(axis=1)
    short = np.flatnonzero(counts < k)  # too few under the cut: searched whole, below
    below[short], counts[short] = False, 0
    flat = np.flatnonzero(below)  # row by row, columns ascending
    rows = np.repeat(np.arange(c), counts)
    width = max(k, int(counts.max()))
    into = rows * width + (np.arange(flat.size) - np.repeat(np.cumsum(counts) - counts, counts))
    values = np.full(c * width, np.inf, dtype=D.dtype)
    values[into] = D.ravel()[flat]
    columns = np.full(c * width, m, dtype=np.intp)  # padding sorts after every real column
    columns[into] = flat - rows * m
    out = _first_k(values.reshape(c, width), columns.reshape(c, width), k)
    for i in short:
        out[i] = _first_k(D[i:i + 1], np.arange(m)[None], k)[0]
    return out


def _first_k(values: np.ndarray, columns: np.ndarray, k: int) -> np.ndarray:
    """(r, k): per row, the ``columns`` of the ``k`` smallest ``values``, ties at the ``k``-th value taken
    in the order of ``columns`` (ascending along each row); every row holds at least ``k`` candidates."""
    kth = np.partition(values, k - 1, axis=1)[:, k - 1:k]
    take = values <= kth  # at least k per row
    if take.sum() != len(values) * k:  # ties at the k-th value: the first of them in the order of columns
        less = values < kth
        tied = take & ~less
        take = less | (tied & (np.cumsum(tied, axis=1) <= k - less.sum(axis=1, keepdims=True)))
    return columns[take].reshape(len(values), k)


def numpy_search(offset: np.ndarray | None, version: int) -> bool:
    """Whether a search recorded as (``offset``, ``version``) uses an :class:`ExactIndex` (sparse from version
    2, dense from version 3) rather than scikit-learn."""
    return version >= (2 if offset is not None else DENSE_VERSION)


def neighbour_index(X_ref: np.ndarray, offset: np.ndarray | None, version: int, n_neighbors: int):
    """The index a bundle searches ``X_ref`` with: an :class:`ExactIndex` (:func:`numpy_search`), or a fitted
    scikit-learn ``NearestNeighbors`` (a bundle from before: dense, or sparse version 1 by brute force on CSR)."""
    if numpy_search(offset, version):
        return ExactIndex.of(X_ref, offset, version)
    from sklearn.neighbors import NearestNeighbors

    return NearestNeighbors(n_neighbors=n_neighbors, algorithm=algorithm(offset)).fit(search_input(X_ref, offset))


def kneighbors(index, X: np.ndarray, k: int, offset: np.ndarray | None) -> np.ndarray:
    """(N, k) indices of the reference rows nearest to each row of ``X`` in an index of :func:`neighbour_index`."""
    if isinstance(index, ExactIndex):
        return index.kneighbors(X, k)
    return index.kneighbors(search_input(X, offset), n_neighbors=k, return_distance=False)


def compile_loops() -> None:
    """Compile (or load from numba's on-disk cache) every compiled loop a served search uses, for the types
    it uses them with: the selections, the dense distances, the weighted mean and the clusters' walk."""
    from models.centres._select import kth_values
    from models.centres.clusters import compile_search

    X = np.random.default_rng(0).normal(size=(4, 3))
    for D in (dense_distances(X, np.ascontiguousarray(X.T), np.ones(4)), X.astype(np.float32)):
        within_kth(D, 2, True), kth_values(D, 2)
    for reference in (None, differing(X, X.min(axis=0))):
        distance_weighted_mean(X, X, X, np.zeros((4, 1), dtype=np.intp), "distance", reference)
    compile_search()


def differing(X_ref: np.ndarray, base: np.ndarray) -> tuple[np.ndarray, ...]:
    """``(base, indptr, indices, values)``: per row of ``X_ref``, the columns (ascending) where it differs from
    ``base`` and its values there, for :func:`distance_weighted_mean`'s ``reference``."""
    mask = X_ref != base
    indptr = np.zeros(len(X_ref) + 1, dtype=np.int64)
    np.cumsum(np.count_nonzero(mask, axis=1), out=indptr[1:])
    indices = np.nonzero(mask)[1].astype(np.int64)
    return np.ascontiguousarray(base, dtype=np.float64), indptr, indices, np.ascontiguousarray(X_ref[mask], np.float64)


_DENSE = (np.zeros(0), np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0))


def distance_weighted_mean(X: np.ndarray, X_ref: np.ndarray, Y_ref: np.ndarray, neighbours, weights: str,
                           reference: tuple | None = None) -> np.ndarray:
    """(N, n) mean of ``Y_ref`` over each row's neighbours (``neighbours[i]``: indices into the reference
    rows, any number per row), by scikit-learn's ``KNeighborsRegressor`` rule: ``"uniform"``, or
    ``"distance"`` (weights 1 / Euclidean distance, computed in float64; a row with neighbours at
    distance 0 averages those alone). ``reference``: :func:`differing` of ``X_ref``, which makes mostly
    not-heard fingerprints cheaper and changes no bit. A row's answer is the same to the last bit whatever
    rows come with it (:mod:`models.centres._weighted`)."""
    from models.centres._weighted import weighted_mean

    if isinstance(neighbours, np.ndarray):  # (N, k): every row the same count
        flat = np.ascontiguousarray(neighbours, dtype=np.intp).reshape(-1)
        start = np.arange(0, flat.size + 1, max(1, neighbours.shape[1]) if len(neighbours) else 1, dtype=np.intp)
    else:
        sizes = np.fromiter(map(len, neighbours), dtype=np.intp, count=len(neighbours))
        flat = np.concatenate(neighbours).astype(np.intp, copy=False) if len(neighbours) else np.empty(0, np.intp)
        start = np.concatenate([[0], np.cumsum(sizes)]).astype(np.intp)
    return weighted_mean(np.ascontiguousarray(X, dtype=np.float64), np.ascontiguousarray(X_ref, dtype=np.float64),
                         np.ascontiguousarray(Y_ref, dtype=np.float64), flat, start, weights == "uniform",
                         *(reference or _DENSE))
