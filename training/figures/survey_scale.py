"""A survey's scale at training time: the served regions over the survey's rows against its extent
(:mod:`models.scale`), with the survey-size guidance, in the words the terminal and the report print.
Only for surveys (rows grouped by position, two target coordinates): elsewhere an "extent" of the targets
is not a site.
"""

from __future__ import annotations

import numpy as np

from models.scale import WARN_SHARE, extent, scale_record, warning

__all__ = ["MAX_ROWS", "WARN_SHARE", "extent", "is_survey", "scale_line", "served_areas", "size_line", "survey_scale",
           "warning"]

#: the survey rows the mean area is taken over, at most (a seeded sample beyond: the mean of a few thousand
#: regions is settled to well under 1 %, and a 20,000-row survey need not be predicted whole)
MAX_ROWS = 2000


def is_survey(dataset) -> bool:
    """Whether ``dataset`` is a site survey: rows grouped by position, two target coordinates."""
    return (dataset.grouping or {}).get("by") == "position" and dataset.Y.shape[1] == 2


def served_areas(model, dataset, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``(rows, areas)``: the served method's region areas at up to :data:`MAX_ROWS` of the survey's rows
    (a seeded sample beyond)."""
    rows = np.arange(len(dataset.Y))
    if rows.size > MAX_ROWS:
        rows = np.sort(np.random.default_rng(seed).choice(rows, size=MAX_ROWS, replace=False))
    centers = None if dataset.centers is None else dataset.centers[rows]
    regions = model.predict_region(dataset.X[rows], method=model.primary_method, centers=centers,
                                   typicality=False).regions
    return rows, regions.volume()


def survey_scale(model, dataset, seed: int = 0, size: dict | None = None, areas=None) -> dict | None:
    """The served method's mean region area over the survey's rows against the survey's extent
    (:func:`extent` of its distinct positions): ``mean_area``, ``bbox_area``, ``hull_area``, ``share_of_bbox``,
    ``share_of_hull``, ``warn_share`` and ``warning`` (words, or None), in the targets' units squared; with
    ``size`` (:func:`training.pipeline.survey_size.survey_size`) ``survey_size``: that record with ``half_area`` and
    ``twice_area``; ``areas``: :func:`served_areas` when taken already. None when ``dataset`` is not a survey
    (:func:`is_survey`)."""
    if not is_survey(dataset):
        return None
    rows, areas = served_areas(model, dataset, seed) if areas is None else areas
    out = scale_record(model.primary_method, float(areas.mean()), rows.size,
                       len(np.unique(dataset.Y, axis=0)), extent(dataset.Y))
    if size and size.get("estimate") is None:
        out["survey_size"] = size
    elif size:
        out["survey_size"] = {**size, "half_area": out["mean_area"] * size["half_factor"],
                              "twice_area": out["mean_area"] * size["twice_factor"]}
    return out


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
