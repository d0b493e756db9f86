"""Exact nearest-neighbour search on fingerprints as sparse vectors (scikit-learn's brute force on CSR).

RSSI fingerprints after the "not detected" step are mostly one value per column (the floor): on
UJIIndoorLoc 3.5 % of the entries differ from it. Distances do not change when every row is moved by
the same vector, so rows minus the per-column minimum of the reference rows are sparse vectors with
the same neighbours; scikit-learn's brute-force search on CSR input then computes the distances as
sparse products. :func:`sparse_offset` decides (and gives the vector) at fit time; the estimators
store it, so a bundle searches the way it was calibrated.
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


def offset_arrays(offset: np.ndarray | None) -> dict[str, np.ndarray]:
    """The bundle arrays that record the search: ``sparse_offset`` when sparse, nothing when dense."""
    return {} if offset is None else {"sparse_offset": offset}


def stored_offset(arrays) -> np.ndarray | None:
    """The offset :func:`offset_arrays` stored (``None``: dense search, also for bundles from before it)."""
    return np.asarray(arrays["sparse_offset"], float) if "sparse_offset" in arrays else None
