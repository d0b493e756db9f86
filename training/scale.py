"""The served regions against the survey's extent: how much of the site a region covers.

A region that holds the true position with probability 0.9 is only useful when it is small against the
place being located in. :func:`survey_scale` puts the served method's mean region area beside the
surveyed positions' bounding box and convex hull, and words a warning when the mean exceeds
:data:`WARN_SHARE` of the bounding box: a region that large places a reading in a quarter of the site or
more, which tells a room-level application little; more surveyed positions (a finer centre, and more
groups to calibrate on) shrink it. Only for surveys (rows grouped by position, two target coordinates):
elsewhere an "extent" of the targets is not a site.
"""

from __future__ import annotations

import numpy as np

#: the share of the surveyed positions' bounding box above which the report and ``GET /model`` warn
WARN_SHARE = 0.25
#: the survey rows the mean area is taken over, at most (a seeded sample beyond: the mean of a few thousand
#: regions is settled to well under 1 %, and a 20,000-row survey need not be predicted whole)
MAX_ROWS = 2000


def extent(positions: np.ndarray) -> dict:
    """The bounding box (``bbox``: ``[[min...], [max...]]``, ``bbox_area``) and convex hull (``hull``: its
    vertices in order, ``hull_area``) of 2-D ``positions``; a hull of fewer than 3 positions, or of
    positions on one line, has area 0 and the positions as vertices."""
    from scipy.spatial import ConvexHull, QhullError

    P = np.unique(np.asarray(positions, dtype=np.float64), axis=0)
    lo, hi = P.min(axis=0), P.max(axis=0)
    try:
        hull = ConvexHull(P)
        vertices, area = P[hull.vertices], float(hull.volume)
    except (QhullError, ValueError):
        vertices, area = P, 0.0
    return {"bbox": [lo.tolist(), hi.tolist()], "bbox_area": float(np.prod(hi - lo)), "hull": vertices.tolist(),
            "hull_area": area}


def survey_scale(model, dataset, seed: int = 0, size: dict | None = None) -> dict | None:
    """The served method's mean region area over the survey's rows against the survey's extent
    (:func:`extent` of its distinct positions): ``mean_area``, ``bbox_area``, ``hull_area``, ``share_of_bbox``,
    ``share_of_hull``, ``warn_share`` and ``warning`` (words, or None), in the targets' units squared; with
    ``size`` (:func:`training.survey_size.survey_size`) ``survey_size``: that record with ``half_area`` and
    ``twice_area``. None when ``dataset`` is not a survey (not grouped by position, or not two targets)."""
    if (dataset.grouping or {}).get("by") != "position" or dataset.Y.shape[1] != 2:
        return None
    rows = np.arange(len(dataset.Y))
    if rows.size > MAX_ROWS:
        rows = np.sort(np.random.default_rng(seed).choice(rows, size=MAX_ROWS, replace=False))
    centers = None if dataset.centers is None else dataset.centers[rows]
    regions = model.predict_region(dataset.X[rows], method=model.primary_method, centers=centers,
                                   typicality=False).regions
    mean_area = float(regions.volume().mean())
    ext = extent(dataset.Y)
    out = {"method": model.primary_method, "mean_area": mean_area, "rows": int(rows.size),
           "positions": int(len(np.unique(dataset.Y, axis=0))),
           "bbox_area": ext["bbox_area"], "hull_area": ext["hull_area"],
           "share_of_bbox": _share(mean_area, ext["bbox_area"]), "share_of_hull": _share(mean_area, ext["hull_area"]),
           "warn_share": WARN_SHARE, "bbox": ext["bbox"], "hull": ext["hull"]}
    out["warning"] = warning(out)
    if size and size.get("estimate") is None:
        out["survey_size"] = size
    elif size:
        out["survey_size"] = {**size, "half_area": mean_area * size["half_factor"],
                              "twice_area": mean_area * size["twice_factor"]}
    return out


def _share(area: float, of: float) -> float | None:
    return area / of if of > 0 else None


def warning(scale: dict) -> str | None:
    """The warning words when the mean region exceeds ``warn_share`` of the bounding box, else None."""
    share = scale.get("share_of_bbox")
    if share is None or share <= scale["warn_share"]:
        return None
    return (f"the served regions ({scale['method']}) average {scale['mean_area']:.4g} square target units, "
            f"{100 * share:.0f} % of the surveyed positions' bounding box (warned above "
            f"{100 * scale['warn_share']:.0f} %): a region places a reading in a large part of the site. "
            f"{scale['positions']} positions were surveyed; more positions give a finer centre and smaller regions")


def scale_line(scale: dict | None) -> str | None:
    """The scale in one line (terminal and report), the warning after it; None without a scale."""
    if not scale:
        return None
    hull = scale.get("share_of_hull")
    line = (f"served regions average {scale['mean_area']:.4g} square target units: "
            f"{100 * (scale['share_of_bbox'] or 0):.1f} % of the surveyed positions' bounding box "
            f"({scale['bbox_area']:.4g})"
            + (f", {100 * hull:.1f} % of their convex hull ({scale['hull_area']:.4g})" if hull is not None else ""))
    return line + (f". WARNING: {scale['warning']}" if scale.get("warning") else "")


def size_line(scale: dict | None) -> str | None:
    """The survey-size guidance in one line, labelled as an estimate; None without one."""
    size = (scale or {}).get("survey_size")
    if not size:
        return None
    if size.get("estimate") is None:
        return f"no estimate: {size['why']}"
    return (f"estimate (subsampling, not a guarantee): with half the {size['positions']} train positions the served "
            f"regions would average about {size['half_area']:.4g}, with twice about {size['twice_area']:.4g} "
            f"(area ~ positions^-{size['exponent']:.2f}; twice is extrapolated)")
