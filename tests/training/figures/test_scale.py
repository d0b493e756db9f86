"""training/figures/survey_scale.py: the served regions against the survey's extent, and the warning when they cover a large
part of it."""

from __future__ import annotations

import numpy as np
import pytest

from training.pipeline.config import TrainConfig
from training.data.datasets import Dataset, group_by_position
from training.pipeline import train
from training.figures.survey_scale import WARN_SHARE, extent, scale_line, survey_scale
from training.data.synthetic import make_survey


def survey(n_points: int, n_beacons: int, seed: int = 0) -> Dataset:
    X, Y, _, _, fn, tn = make_survey(n_points=n_points, readings=5, n_beacons=n_beacons, seed=seed)
    return group_by_position(Dataset("survey", X, Y, fn, tn, "x"), auto=True)


def test_a_small_survey_is_warned_and_a_large_one_is_not():
    config = TrainConfig(centre="knn", methods=("ge", "ball"), fallbacks=False)
    small = survey(20, n_beacons=8)
    scale = survey_scale(train(small, config).model, small)
    assert scale["share_of_bbox"] > WARN_SHARE and scale["warning"] is not None
    assert "WARNING" in scale_line(scale)
    large = survey(200, n_beacons=16)
    model = train(large, config).model
    scale = survey_scale(model, large)
    assert scale["share_of_bbox"] < WARN_SHARE and scale["warning"] is None
    assert "WARNING" not in scale_line(scale)
    # the figures are the served method's regions over the survey's rows, against its positions' extent
    regions = model.predict_region(large.X, method=model.primary_method, typicality=False).regions
    assert scale["mean_area"] == pytest.approx(regions.volume().mean())
    assert scale["share_of_bbox"] == pytest.approx(scale["mean_area"] / extent(large.Y)["bbox_area"])
    assert scale["positions"] == 200 and scale["method"] == model.primary_method


def test_rows_that_are_not_a_survey_have_no_scale():
    ds = survey(30, n_beacons=8)
    rows = Dataset("rows", ds.X, ds.Y, ds.feature_names, ds.target_names, "x")
    model = train(rows, TrainConfig(centre="knn", methods=("ge",), fallbacks=False)).model
    assert survey_scale(model, rows) is None
