"""How accurate an answer is, as the service reports it: a region's true area, ``sqrt det C`` and accuracy
radius (on the ground with a CRS), and a walk's positioning errors (mean, median, RMSE, the 75th percentile,
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



def region_sizes(region, crs) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
    """``(area, ground_area, accuracy)`` per row of ``region``: the true area in target units, with a ``crs``
    (2-D targets) the area on the ground in m^2 (else ``None``), and the accuracy radius (the semi-major axis;
    with a CRS the GeoJSON answer's ``accuracy_m`` in ground metres). Unbounded rows get ``inf``."""
    from models import geometry
    from models.geo import ellipse_figures

    centers, shapes = region.centers, region.shapes
    n_rows, n = centers.shape
    bounded = np.isfinite(shapes).all(axis=(1, 2))
    accuracy = np.full(n_rows, np.inf)
    ground = None
    if n == 2 and crs is not None:
        ground = np.full(n_rows, np.inf)
        if bounded.any():
            figures = ellipse_figures(centers[bounded], shapes[bounded], crs)
            ground[bounded], accuracy[bounded] = figures["area_m2"], figures["accuracy_m"]
    elif bounded.any():  # the semi-major axis: the answer's closed form in 2-D
        b = shapes[bounded]
        accuracy[bounded] = geometry.ellipse_2d(b)[1][:, 0] if n == 2 else geometry.axes(b)[0].max(axis=1)
    return np.asarray(region.volume("lebesgue"), dtype=np.float64), ground, accuracy
