"""A centre's error criteria, over rows or with each unit (phone, user) weighing the same.

Across units the guarantee is for a new unit, each unit weighing the same, so a centre chosen for it is scored
the same way: a unit of 4,000 rows counts as much as one of 200. :func:`criterion` is written once and serves
the fingerprint centre's configuration search (:func:`models.centres.fingerprint.tune`) and the choice among
centres (``training.pipeline.centre_selection``).
"""

from __future__ import annotations

import numpy as np

#: the criteria a centre is chosen by
CRITERIA = ("rmse", "quantile")


def unit_codes(units) -> tuple[np.ndarray, np.ndarray]:
    """``(codes, sizes)``: each row's unit as an index ``0..u-1`` and each unit's row count."""
    codes = np.unique(np.asarray(units), return_inverse=True)[1].ravel()
    return codes, np.bincount(codes)


def criterion(e: np.ndarray, key: str, level: float | None = None, codes: np.ndarray | None = None,
              sizes: np.ndarray | None = None) -> float:
    """The criterion ``key`` of Euclidean errors ``e`` (m,).

    Parameters
    ----------
    e : ndarray of shape (m,)
        Each row's Euclidean error.
    key : {"rmse", "quantile"}
        ``"rmse"``: the root mean squared error or, with ``codes``, each unit's RMSE averaged over the units;
        ``"quantile"``: the errors' ``level`` quantile (linear interpolation) or, with ``codes``, the smallest
        error at or above which the units' weights ``1 / size`` reach ``level`` of their sum.
    level : float, optional
        The quantile's level (needed for ``"quantile"``).
    codes : ndarray of shape (m,), optional
        Each row's unit as an index (:func:`unit_codes`); ``None``: every row weighs the same.
    sizes : ndarray, optional
        Each unit's row count (default ``numpy.bincount(codes)``); a unit of size 0 counts for nothing.

    Returns
    -------
    float
        The criterion, in the errors' units.
    """
    e = np.asarray(e, dtype=np.float64)
    if codes is None:
        return float(np.sqrt(np.mean(e ** 2))) if key == "rmse" else float(np.quantile(e, level))
    sizes = np.bincount(codes) if sizes is None else np.asarray(sizes)
    if key == "rmse":
        present = sizes > 0
        return float(np.mean(np.sqrt(np.bincount(codes, e ** 2, minlength=len(sizes))[present] / sizes[present])))
    w = 1.0 / sizes[codes]
    order = np.argsort(e, kind="stable")
    cum = np.cumsum(w[order]) / w.sum()
    return float(e[order][min(int(np.searchsorted(cum, level)), len(e) - 1)])
