"""The region routes' computations: a request's size limit, and a model answer turned into JSON rows.

Input checks live in :class:`models.model.RegionModel` (one check per request, errors naming the
field); this module adds only what is the service's own: the row limit (413) and the response
geometry (volume, semi-axes, orientation, boundary) computed once over the whole batch, a floor
bundle's floor sets, and each row's typicality p-value.
"""

from __future__ import annotations

import numpy as np

from models import geometry
from models._validation import all_finite
from service.exceptions import APIError


def check_row_limit(rows: list, field: str, max_rows: int) -> None:
    """413 when a request carries more than ``max_rows`` rows (``LMVE_MAX_ROWS``)."""
    if len(rows) > max_rows:
        raise APIError(413, "Too many rows", f"{field} has {len(rows)} rows; the limit is {max_rows} "
                       "(LMVE_MAX_ROWS): split the batch", field=field, expected=f"at most {max_rows} rows",
                       received=f"{len(rows)} rows")


def region_rows(answer, boundary_points: int | None) -> list[dict]:
    """The JSON rows of a :class:`~models.model.RegionAnswer`'s ellipsoids (numpy values go straight to orjson)."""
    region, method = answer.regions, answer.method
    centers, shapes = region.centers, region.shapes
    finite = all_finite(shapes)
    if centers.shape[1] == 2 and finite:  # closed forms: the localisation case
        volumes, semi_axes, orientation = geometry.ellipse_2d(shapes)
    else:
        volumes = region.volume("lebesgue")
        semi_axes, directions = geometry.axes(shapes)  # one eigh for the axes and the orientation
        orientation = geometry.major_axis_angle(directions) if centers.shape[1] == 2 else None
    boundary = geometry.boundary_points(centers, shapes, boundary_points, closed=True) if boundary_points else None
    semi_axes = np.ascontiguousarray(semi_axes)
    eta = region.coverage
    typicality = typicality_list(answer, len(centers))
    rows = [{"center": centers[i], "shape": shapes[i], "volume": volumes[i], "coverage": eta, "method": method,
             "semi_axes": semi_axes[i], "orientation": None if orientation is None else orientation[i],
             "boundary": None if boundary is None else boundary[i], "typicality": typicality[i]}
            for i in range(len(centers))]
    if answer.floors is not None:  # a floor bundle: each ellipse with its floor set (absent otherwise)
        for row, floors in zip(rows, answer.floors.rows()):
            row["floors"] = floors
    return rows


def typicality_list(answer, rows: int) -> list:
    """The answer's typicality p-values as plain floats (``None`` each for a bundle without the step)."""
    return [None] * rows if answer.typicality is None else answer.typicality.tolist()
