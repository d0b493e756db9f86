"""How accurate a walk's positions are: its positioning errors (mean, median, RMSE, the 75th percentile,
CEP and CE95)."""

from __future__ import annotations

import numpy as np

#: the error figures, in the order reports list them
ERROR_KEYS = ("mean", "median", "rmse", "p75", "cep", "ce95")


def error_figures(error: np.ndarray) -> dict:
    """The error summary of :data:`ERROR_KEYS` (CEP: the median; CE95: the 95th percentile)."""
    e = np.asarray(error, dtype=np.float64)
    p50, p75, p95 = np.percentile(e, [50, 75, 95])
    return {"mean": float(e.mean()), "median": float(p50), "rmse": float(np.sqrt(np.mean(e * e))),
            "p75": float(p75), "cep": float(p50), "ce95": float(p95)}
