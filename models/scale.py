"""A survey's served regions against its extent: how much of the site a region covers.

A region that holds the true position with probability 0.9 is only useful when it is small against the
place being located in. :func:`scale_record` puts a mean region area beside the surveyed positions'
bounding box and convex hull (:func:`extent`), and words a warning when the mean exceeds
:data:`WARN_SHARE` of the bounding box: a region that large places a reading in a quarter of the site or
more, which tells a room-level application little. Training computes the record over the survey's rows;
a recalibration recomputes its mean area over the fresh rows against the same extent (:func:`rescaled`).
"""

from __future__ import annotations

import numpy as np

#: the share of the surveyed positions' bounding box above which the report and ``GET /model`` warn
WARN_SHARE = 0.25


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


def scale_record(method: str, mean_area: float, rows: int, positions: int, ext: dict) -> dict:
    """The scale of ``method`` 's regions, whose mean area over ``rows`` rows is ``mean_area``, on a survey of
    ``positions`` positions with extent ``ext`` (:func:`extent`): ``share_of_bbox``, ``share_of_hull`` (None
    against an area of 0), ``warn_share`` and ``warning`` (:func:`warning`)."""
    out = {"method": method, "mean_area": float(mean_area), "rows": int(rows), "positions": int(positions),
           "bbox_area": ext["bbox_area"], "hull_area": ext["hull_area"],
           "share_of_bbox": _share(mean_area, ext["bbox_area"]), "share_of_hull": _share(mean_area, ext["hull_area"]),
           "warn_share": WARN_SHARE, "bbox": ext["bbox"], "hull": ext["hull"]}
    out["warning"] = warning(out)
    return out


def rescaled(scale: dict | None, model, features, centers=None) -> dict | None:
    """``scale`` (a survey's record) with its mean area taken again over ``features`` (the fresh rows of a
    recalibration, at most the first 2,000) under ``model`` 's served method, against the same extent;
    ``over: "fresh rows"``. None without a ``scale`` or its extent."""
    if not scale or "bbox" not in scale:
        return None
    rows = slice(0, 2000)
    regions = model.predict_region(np.asarray(features)[rows], method=model.primary_method,
                                   centers=None if centers is None else np.asarray(centers)[rows],
                                   typicality=False).regions
    ext = {k: scale[k] for k in ("bbox", "bbox_area", "hull", "hull_area")}
    return {**scale_record(model.primary_method, float(regions.volume().mean()), len(regions.centers),
                           scale["positions"], ext), "over": "fresh rows"}


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
