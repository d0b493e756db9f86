"""Weighted k-nearest-neighbour fingerprinting (scikit-learn's ``KNeighborsRegressor``), stored as
its reference rows and searched by :mod:`models.centres.search`."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from models.centres import search
from models.centres.base import Centre, at_most
from models.exceptions import InputError


@dataclass(eq=False, repr=False)
class KNNCentre(Centre):
    """Weighted k-nearest-neighbour regression (fingerprint matching).

    The centre is the mean position of the ``n_neighbors`` closest training rows, weighted by inverse
    distance. It answers as ``sklearn.neighbors.KNeighborsRegressor`` does, every row tied at the
    ``n_neighbors``-th distance included (scikit-learn would pick among them by row order). A bundle
    stores the reference rows and loading rebuilds the index (:mod:`models.centres.search`: sparse
    fingerprints as sparse vectors, dense rows as dense).

    Parameters
    ----------
    n_neighbors : int, default=3
        Neighbours averaged.
    weights : {"distance", "uniform"}, default="distance"
        Inverse-distance or equal weights.
    max_rows : int or None, default=16384
        Reference rows kept (a seeded random subset beyond them), so that a query's cost stops growing
        with the survey; ``None``: every row.
    seed : int, default=0
        Chooses the subset.

    Attributes
    ----------
    X_fit_, Y_fit_ : ndarray
        The reference rows and their positions.
    sparse_offset_ : ndarray or None
        The "not heard" value sparse search is taken about (``None``: dense search).
    sparse_search_ : int
        The search version the index was built with.
    """

    n_neighbors: int = 3
    weights: str = "distance"
    max_rows: int | None = 16384
    seed: int = 0

    def fit(self, X, Y) -> "KNNCentre":
        X, Y = self._fit_input(X, Y)
        if isinstance(self.n_neighbors, bool) or not isinstance(self.n_neighbors, int) or self.n_neighbors < 1:
            raise InputError(f"n_neighbors must be a positive integer; got {self.n_neighbors!r}", field="n_neighbors",
                             expected="a positive integer", received=repr(self.n_neighbors))
        if self.weights not in ("distance", "uniform"):
            raise InputError(f"weights must be 'distance' or 'uniform'; got {self.weights!r}", field="weights",
                             expected="'distance' or 'uniform'", received=repr(self.weights))
        from models.centres.search import sparse_offset

        X, Y = at_most(self.max_rows, self.seed, X, Y)
        return self._index(X, Y, sparse_offset(X))

    def _index(self, X: np.ndarray, Y: np.ndarray, offset: np.ndarray | None,
               version: int | None = None) -> "KNNCentre":
        from sklearn.neighbors import KNeighborsRegressor

        from models.centres.search import (
            SEARCH_VERSION,
            ExactIndex,
            algorithm,
            numpy_search,
            search_input,
        )

        version = SEARCH_VERSION if version is None else version
        self.X_fit_, self.Y_fit_, self.sparse_offset_, self.sparse_search_ = X, Y, offset, version
        self._differing = None
        self.n_features_in_, self.n_targets_ = X.shape[1], Y.shape[1]
        k = min(self.n_neighbors, X.shape[0])
        if numpy_search(offset, version):
            self.model_ = ExactIndex.of(X, offset, version)
        else:
            self.model_ = KNeighborsRegressor(n_neighbors=k, weights=self.weights,
                                              algorithm=algorithm(offset)).fit(search_input(X, offset), Y)
        return self

    def predict(self, X) -> np.ndarray:
        """The weighted mean positions of each row's neighbours.

        Bundles from before the numpy search keep scikit-learn's ``KNeighborsRegressor.predict``, as calibrated.

        Parameters
        ----------
        X : ndarray of shape (N, d)
            Checked standardised features.

        Returns
        -------
        ndarray of shape (N, n)
            Every row tied at the ``n_neighbors``-th distance included.
        """
        if isinstance(self.model_, search.ExactIndex):
            return search.in_parts(self._searched, X)
        P = self.model_.predict(search.search_input(X, self.sparse_offset_))
        return np.asarray(P, dtype=np.float64).reshape(len(X), self.n_targets_)

    def _searched(self, X: np.ndarray) -> np.ndarray:
        near = self.model_.neighbourhoods(X, self.n_neighbors)
        return search.distance_weighted_mean(X, self.X_fit_, self.Y_fit_, near, self.weights, self._reference())

    def _reference(self) -> tuple | None:
        """The reference rows' heard columns for the weighted mean (sparse fingerprints), built once."""
        if self._differing is None and self.sparse_offset_ is not None:
            self._differing = search.differing(self.X_fit_, self.sparse_offset_)
        return self._differing

    def prepare(self) -> None:
        if isinstance(self.model_, search.ExactIndex):
            self.model_.prepare()
            self._reference()

    def to_arrays(self):
        from models.centres.search import offset_arrays

        return self.get_params(), {"X": self.X_fit_, "Y": self.Y_fit_,
                                   **offset_arrays(self.sparse_offset_, self.sparse_search_)}

    @classmethod
    def from_arrays(cls, params, arrays):
        from models.centres.search import stored_offset, stored_version

        return cls(**params)._index(np.asarray(arrays["X"], float), np.asarray(arrays["Y"], float),
                                    stored_offset(arrays), stored_version(arrays))
