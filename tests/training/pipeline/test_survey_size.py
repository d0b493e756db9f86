"""training/pipeline/survey_size.py: the subsampling estimate of the served area with half and twice the positions."""

from __future__ import annotations

import numpy as np
import pytest

from training.pipeline.config import TrainConfig
from training.data.datasets import Dataset, group_by_position
from training.pipeline import train
from training.figures.survey_scale import size_line, survey_scale
from training.pipeline.survey_size import MIN_POSITIONS
from training.data.synthetic import make_survey


def survey(n_points: int, seed: int = 0, readings: int = 5) -> Dataset:
    X, Y, _, _, fn, tn = make_survey(n_points=n_points, readings=readings, n_beacons=8, seed=seed)
    return group_by_position(Dataset("survey", X, Y, fn, tn, "x"), auto=True)


@pytest.mark.parametrize("mode", ["cross-fit", "split"])
def test_the_estimate_is_a_power_law_through_half_the_survey(mode):
    ds = survey(60)
    result = train(ds, TrainConfig(centre="knn", methods=("ge", "ball"), calibration_mode=mode))
    size = result.survey_size
    assert size["estimate"] == "subsampling" and size["method"] == result.model.primary_method
    assert size["positions"] == len(np.unique(ds.groups[result.split.train]))
    # fewer positions locate worse: the half-survey's area is larger, and the power law puts twice below
    assert size["half_area_ratio_measured"] > 1 and size["exponent"] > 0
    assert size["half_factor"] == pytest.approx(2 ** size["exponent"])
    assert size["half_factor"] * size["twice_factor"] == pytest.approx(1.0)
    scale = survey_scale(result.model, ds, size=size)
    got = scale["survey_size"]
    assert got["half_area"] == pytest.approx(scale["mean_area"] * size["half_factor"])
    assert got["twice_area"] < scale["mean_area"] < got["half_area"]
    assert size_line(scale).startswith("estimate (subsampling, not a guarantee)")


def test_no_estimate_where_it_does_not_apply():
    ds = survey(30)
    rows = Dataset("rows", ds.X, ds.Y, ds.feature_names, ds.target_names, "x")
    assert train(rows, TrainConfig(centre="knn", methods=("ge",), use_groups=False)).survey_size is None
    few = survey(8, readings=10)  # fewer than MIN_POSITIONS train positions: a half of 3 says nothing
    result = train(few, TrainConfig(centre="knn", methods=("ge",), coverage=0.8))
    assert len(np.unique(few.groups[result.split.train])) < MIN_POSITIONS and result.survey_size is None


def test_a_served_shape_that_half_the_survey_cannot_fit_says_so():
    ds = survey(20)
    config = TrainConfig(centre="knn", methods=("ge", "lmve"), primary="lmve", calibration_mode="split",
                         method_params={"lmve": {"max_steps": 20}})
    result = train(ds, config)
    size = result.survey_size
    assert size["estimate"] is None and size["method"] == "lmve" and "half the survey" in size["why"]
    line = size_line(survey_scale(result.model, ds, size=size))
    assert line.startswith("no estimate: lmve cannot be fitted on half the survey")


def test_a_large_survey_is_halved_on_a_subset_of_whole_positions(monkeypatch):
    from training.pipeline import survey_size as module

    units = np.repeat(np.arange(100), 5)  # 100 positions of 5 rows
    train = np.arange(500)
    rows, half = module.halved_positions(train, units, seed=0)
    assert rows is train and half == 50.0  # under MAX_ROWS: every row
    monkeypatch.setattr(module, "MAX_ROWS", 120)
    rows, half = module.halved_positions(train, units, seed=0)
    kept = np.unique(units[rows])
    assert 120 <= len(rows) <= 125 and len(rows) == 5 * len(kept) and half == len(kept) / 2  # whole positions
    again, _ = module.halved_positions(train, units, seed=0)
    np.testing.assert_array_equal(again, rows)
    ds = survey(60)
    monkeypatch.setattr(module, "MAX_ROWS", 100)
    size = train_fn(ds)
    assert size["positions_halved"] < size["positions"] and "drawn at random" in size["how"]
    assert size["estimate"] == "subsampling" and size["exponent"] >= 0


def train_fn(ds):
    return train(ds, TrainConfig(centre="knn", methods=("ge", "ball"), calibration_mode="split")).survey_size
