"""Request checks and the vectorised computations behind the region routes.

Checks name the field, what was expected and what came (``features[3]: expected 16 values,
received 15``). The maths runs once per request over the whole batch: no per-row Python
beyond turning arrays into JSON lists.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import numpy as np

from models import geometry
from models._validation import all_finite
from models.conformal import conformal_rank
from service.errors import APIError

ELLIPSOID_METHODS = ("lmve", "nle", "ge")


def matrix(rows: list[list[float]], field: str, n_columns: int, max_rows: int,
           what: str | Callable[[], str]) -> np.ndarray:
    """``rows`` as an (N, n_columns) float array, or a 413/422 naming the field, what was expected
    (``what`` describes the columns: a string, or a callable built only when a row is wrong) and
    what came."""
    if len(rows) == 0:
        raise APIError(422, "Invalid input", f"{field} is empty; send at least one row",
                       field=field, expected="at least 1 row", received="0 rows")
    if len(rows) > max_rows:
        raise APIError(413, "Too many rows", f"{field} has {len(rows)} rows; the limit is {max_rows} "
                       "(LMVE_MAX_ROWS): split the batch", field=field, expected=f"at most {max_rows} rows",
                       received=f"{len(rows)} rows")
    for i, row in enumerate(rows):
        if len(row) != n_columns:
            columns = what() if callable(what) else what
            raise APIError(422, "Invalid input", f"{field}[{i}] has {len(row)} values, but the bundle expects "
                           f"{n_columns} ({columns})", field=f"{field}[{i}]", expected=f"{n_columns} values",
                           received=f"{len(row)} values")
    A = np.asarray(rows, dtype=np.float64)
    if not all_finite(A):
        i, j = (int(v) for v in np.argwhere(~np.isfinite(A))[0])
        raise APIError(422, "Invalid input", f"{field}[{i}][{j}] is {A[i, j]}; only finite numbers are accepted",
                       field=f"{field}[{i}][{j}]", expected="a finite number", received=str(A[i, j]))
    return A


def check_coverage(coverage: float | None, n_calibration: int) -> float | None:
    if coverage is None:
        return None
    if not (0.0 < coverage < 1.0) or not math.isfinite(coverage):
        raise APIError(422, "Invalid input", f"coverage must lie in the open interval (0, 1); got {coverage}",
                       field="coverage", expected="a number in (0, 1)", received=str(coverage))
    if conformal_rank(n_calibration, coverage) > n_calibration:
        top = n_calibration / (n_calibration + 1)
        raise APIError(422, "Coverage not attainable",
                       f"coverage {coverage} needs more than the bundle's {n_calibration} calibration scores: "
                       f"the region would be the whole space. The highest attainable level is {top:.6g} "
                       "(m / (m + 1))", field="coverage", expected=f"at most {top:.6g}", received=str(coverage))
    return coverage


def choose_method(model, requested: str | None) -> tuple[str, bool, str | None]:
    """(method, fallback, reason). ``requested`` None means the primary route."""
    if requested is not None:
        if requested not in ELLIPSOID_METHODS or requested not in model.methods:
            available = [m for m in ELLIPSOID_METHODS if m in model.methods]
            raise APIError(404, "Unknown method", f"method {requested!r} is not served; available: "
                           f"{', '.join(available)}", field="method", expected=" | ".join(available),
                           received=requested)
        return requested, False, None
    primary = model.primary_method
    if primary != "lmve":
        return primary, True, "the bundle has no LMVE network"
    return primary, False, None


def predict_regions(model, X: np.ndarray, method: str, coverage: float | None, boundary_points: int | None,
                    metrics=None) -> tuple[list[dict], str, bool, str | None]:
    t0 = time.perf_counter()
    region = model.predict_region(X, method=method, coverage=coverage)
    fallback_reason = None
    finite = all_finite(region.shapes)
    if method == "lmve" and not finite:
        method, fallback_reason = "nle", "LMVE produced non-finite shapes for this batch"
        region = model.predict_region(X, method=method, coverage=coverage)
        finite = all_finite(region.shapes)
    centers, shapes = region.centers, region.shapes
    if centers.shape[1] == 2 and finite:  # closed forms: the localisation case
        volumes, semi_axes, orientation = geometry.ellipse_2d(shapes)
    else:
        volumes = region.volume("lebesgue")
        semi_axes, directions = geometry.axes(shapes)  # one eigh for the axes and the orientation
        orientation = geometry.major_axis_angle(directions) if centers.shape[1] == 2 else None
    boundary = geometry.boundary_points(centers, shapes, boundary_points, closed=True) if boundary_points else None
    if metrics is not None:
        metrics.child(metrics.inference, method).observe(time.perf_counter() - t0)
    # numpy rows go straight to orjson (service.errors.FastJSONResponse): no tolist() round trip
    semi_axes = np.ascontiguousarray(semi_axes)
    eta = region.coverage
    regions = [{"center": centers[i], "shape": shapes[i], "volume": volumes[i], "coverage": eta, "method": method,
                "semi_axes": semi_axes[i], "orientation": None if orientation is None else orientation[i],
                "boundary": None if boundary is None else boundary[i]} for i in range(len(centers))]
    return regions, method, fallback_reason is not None, fallback_reason
