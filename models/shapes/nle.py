"""NLE: local ellipsoids from nearest neighbours (Messoudi et al. 2022)."""

from __future__ import annotations

import numpy as np
from models.exceptions import InputError
from models.centres.search import (SEARCH_VERSION, kneighbors, neighbour_index, offset_arrays, sparse_offset, stored_offset,
                               stored_version)
from models.shapes.base import EllipsoidShapeEstimator, second_moment


class NearestNeighbourEllipsoid(EllipsoidShapeEstimator):
    """Normalised Local Ellipsoid.

    ``C(x) = local_weight * (1/k) sum_{i in N_k(x)} r_i r_i^T + (1 - local_weight) * C_GE``,
    where ``N_k(x)`` are the ``k`` training rows nearest to ``x`` in standardised feature space.

    Parameters
    ----------
    n_neighbors : int or None, default=None
        ``k``; ``None`` means ``floor(m / 20)`` (5 % of the training rows), as in the paper.
    local_weight : float, default=0.95
        Weight of the local moment; the rest goes to the global one.
    max_rows : int or None, default=16384
        The neighbours come from at most this many training rows (a seeded random subset beyond them; the
        global moment uses every row), so a query's cost stops growing with the survey. Beyond the cap a
        local moment averages over 800 neighbours or more, which a subset estimates as well. ``None``:
        every row.
    random_state : int, default=0
        Chooses the subset.

    Attributes
    ----------
    X_ref_ : ndarray (m, d), R_ref_ : ndarray (m, n)
        The training rows the neighbours come from (NLE stores its training set).
    sparse_offset_ : ndarray (d,) or None
        Set when the rows are sparse fingerprints, searched as sparse vectors (:mod:`models.centres.search`).
    sparse_search_ : int
        The sparse search version (:mod:`models.centres.search`), stored so that a bundle searches as calibrated.
    global_shape_ : ndarray (n, n)
    n_neighbors_ : int
    """

    def __init__(self, n_neighbors: int | None = None, local_weight: float = 0.95, max_rows: int | None = 16384,
                 random_state: int = 0):
        self.n_neighbors = n_neighbors
        self.local_weight = local_weight
        self.max_rows = max_rows
        self.random_state = random_state

    def fit(self, X, R) -> "NearestNeighbourEllipsoid":
        from models.centres.base import at_most

        X, R = self._validate_fit(X, R)
        self.global_shape_ = second_moment(R)
        X, R = at_most(self.max_rows, self.random_state, X, R)
        m = X.shape[0]
        k = m // 20 if self.n_neighbors is None else int(self.n_neighbors)
        if k < 1 or k > m:
            need = "at least 20 rows (k = floor(m/20) >= 1)" if self.n_neighbors is None else f"at least {k} rows"
            raise InputError(
                f"NearestNeighbourEllipsoid needs {need} to find k = {k} neighbours; X has {m} rows"
            )
        if not 0.0 <= float(self.local_weight) <= 1.0:
            raise InputError(f"local_weight must lie in [0, 1]; got {self.local_weight}")
        self.n_neighbors_ = k
        self.X_ref_ = X
        self.R_ref_ = R
        self._build_index(sparse_offset(X))
        return self

    def _build_index(self, offset: np.ndarray | None, version: int = SEARCH_VERSION) -> None:
        """The neighbour index over ``X_ref_``: dense, or sparse about ``offset`` (:mod:`models.centres.search`)."""
        self.sparse_offset_, self.sparse_search_ = offset, version
        self._index = neighbour_index(self.X_ref_, offset, version, self.n_neighbors_)

    def to_arrays(self):
        return ({"n_neighbors": self.n_neighbors_, "local_weight": float(self.local_weight)},
                {"X_ref": self.X_ref_, "R_ref": self.R_ref_, "global_shape": self.global_shape_,
                 **offset_arrays(self.sparse_offset_, self.sparse_search_)})

    @classmethod
    def from_arrays(cls, params, arrays):
        est = cls(n_neighbors=int(params["n_neighbors"]), local_weight=float(params["local_weight"]))
        est.X_ref_, est.R_ref_ = np.asarray(arrays["X_ref"], float), np.asarray(arrays["R_ref"], float)
        est.n_features_in_, est.n_targets_ = est.X_ref_.shape[1], est.R_ref_.shape[1]
        est.n_neighbors_ = int(params["n_neighbors"])
        est.global_shape_ = np.asarray(arrays["global_shape"], float)
        est._build_index(stored_offset(arrays), stored_version(arrays))
        return est

    #: at most this many (row, neighbour) pairs per block of :meth:`predict_shape`
    BLOCK_PAIRS = 1 << 24

    def _outer_products(self) -> np.ndarray:
        """(m, n*n) the training residuals' outer products ``r r^T``, computed once per ``R_ref_``."""
        cached = getattr(self, "_outer", None)
        if cached is None or cached[0] is not self.R_ref_:
            R = self.R_ref_
            cached = self._outer = (R, (R[:, :, None] * R[:, None, :]).reshape(R.shape[0], -1))
        return cached[1]

    def prepare(self) -> None:
        """Load (or compile) the local moments' loop and the search's, on one row."""
        self.predict_shape(self.X_ref_[:1])

    def predict_shape(self, X) -> np.ndarray:
        """Local shapes: the neighbours' residual outer products, blended with the global shape.

        The training rows' outer products ``r r^T`` are computed once; each row sums its neighbours' in their
        order (:mod:`models.shapes._local`), the same bits alone and in any batch.

        Parameters
        ----------
        X : ndarray of shape (N, d)
            Checked standardised features.

        Returns
        -------
        ndarray of shape (N, n, n)
            ``w (1/k) sum_{j in kNN(x)} r_j r_j^T + (1 - w) G``, ``w = local_weight``, ``G`` the global second moment.
        """
        step = max(1, self.BLOCK_PAIRS // self.n_neighbors_)
        if len(X) > step:  # the (rows, k) neighbour indices a block of rows at a time
            return np.concatenate([self.predict_shape(X[i:i + step]) for i in range(0, len(X), step)])
        idx = kneighbors(self._index, X, self.n_neighbors_, self.sparse_offset_)  # (N, k)
        from models.shapes._local import local_shapes

        n = self.R_ref_.shape[1]
        out = local_shapes(np.ascontiguousarray(idx), self._outer_products(), float(self.n_neighbors_),
                           float(self.local_weight), np.ascontiguousarray(self.global_shape_, dtype=np.float64).ravel())
        return out.reshape(len(idx), n, n)
