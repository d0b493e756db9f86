"""models/scale.py: a survey's extent, the share of it a mean region covers, the warning, and the rescale after a
recalibration."""

from __future__ import annotations

import numpy as np
import pytest

from models.bundle import load_bundle
from models.scale import WARN_SHARE, extent, rescaled, scale_record, warning


def test_extent_is_the_bounding_box_and_the_convex_hull():
    square = np.array([[0, 0], [4, 0], [4, 2], [0, 2], [1, 1], [3, 1], [1, 1]], dtype=float)
    ext = extent(square)
    assert ext["bbox"] == [[0, 0], [4, 2]] and ext["bbox_area"] == 8.0
    assert ext["hull_area"] == pytest.approx(8.0) and len(ext["hull"]) == 4
    triangle = extent(np.array([[0, 0], [4, 0], [0, 3], [1, 1]], dtype=float))
    assert triangle["bbox_area"] == 12.0 and triangle["hull_area"] == pytest.approx(6.0)
    # on one line: no hull to speak of, and no failure
    line = extent(np.array([[0, 0], [1, 1], [2, 2]], dtype=float))
    assert line["hull_area"] == 0.0 and line["bbox_area"] == 4.0


def test_the_warning_follows_the_share_of_the_bounding_box():
    scale = {"method": "ball", "mean_area": 30.0, "bbox_area": 100.0, "positions": 20, "warn_share": WARN_SHARE,
             "share_of_bbox": 0.30}
    assert "30 % of the surveyed positions' bounding box" in warning(scale)
    assert warning({**scale, "mean_area": 25.0, "share_of_bbox": WARN_SHARE}) is None  # at the share: no warning
    assert warning({**scale, "share_of_bbox": None}) is None  # a box of no area: nothing to compare


def test_a_recalibration_takes_the_mean_area_again_over_the_fresh_rows(bundle_dir):
    from training.data.synthetic import make_queries

    model = load_bundle(bundle_dir)
    X, Y = make_queries(300, seed=5)
    survey = scale_record(model.primary_method, 1.0, 100, 30, extent(Y))
    again = rescaled(survey, model, X)
    area = model.predict_region(X, method=model.primary_method).regions.volume().mean()
    assert again["mean_area"] == pytest.approx(area) and again["rows"] == 300 and again["over"] == "fresh rows"
    assert again["share_of_bbox"] == pytest.approx(area / survey["bbox_area"])
    assert again["bbox"] == survey["bbox"] and again["positions"] == 30
    assert rescaled(None, model, X) is None and rescaled({"mean_area": 1.0}, model, X) is None
