"""training/pipeline/site_weights.py: calibrating for the site, each position weighted by its share of it."""

from __future__ import annotations

import numpy as np
import pytest

from models.exceptions import InputError

XS, YS = [2.0, 6.0, 10.0, 30.0], [3.0, 9.0, 15.0, 21.0]
#: the Voronoi cells of that grid within [0, 40] x [0, 24]: columns 4, 4, 12 and 20 m wide, rows 6 m tall
SHARE_X, SHARE_Y = np.array([4, 4, 12, 20]) / 40, np.array([6, 6, 6, 6]) / 24
BOUNDARY = np.array([[0.0, 0.0], [40.0, 0.0], [40.0, 24.0], [0.0, 24.0]])


@pytest.fixture(scope="module")
def uneven_survey():
    """16 positions bunched at the west end of a 40 x 24 m floor, 8 readings each."""
    from training.data.datasets import Dataset, group_by_position
    from training.data.synthetic import survey_at

    P = np.array([(x, y) for x in XS for y in YS])
    X, Y, _, _ = survey_at(P, readings=8, n_beacons=8, survey_seed=0, seed=1)
    return group_by_position(Dataset("uneven", X, Y, [f"b{i}" for i in range(8)], ["x_m", "y_m"], "-"), auto=True)


@pytest.mark.slow
def test_each_position_weighs_its_share_of_the_site(uneven_survey):
    from training.pipeline import TrainConfig, train

    config = TrainConfig(seed=0, methods=("ge",), centre="knn", calibrate_for="site", site_boundary=BOUNDARY,
                         typicality=False, primary_folds=0)
    result = train(uneven_survey, config)
    cal = result.model.methods["ge"].calibrator_
    per_group = np.bincount(cal._codes, weights=cal.weights_)  # group codes follow the sorted positions
    cal_rows = result.split.calibration
    labels, codes = np.unique(np.asarray(result.dataset.groups)[cal_rows], return_inverse=True)
    positions = np.array([uneven_survey.Y[cal_rows][codes.ravel() == k][0] for k in range(len(labels))])
    if len(positions) == 16:  # every position calibrates: the cells are the grid's rectangles
        want = np.array([SHARE_X[XS.index(x)] * SHARE_Y[YS.index(y)] for x, y in positions])
    else:  # Monte Carlo over the floor, independent of the implementation's grid
        U = np.random.default_rng(0).uniform([0, 0], [40, 24], size=(400_000, 2))
        near = np.argmin(((U[:, None, :] - positions[None]) ** 2).sum(-1), axis=1)
        want = np.bincount(near, minlength=len(positions)) / len(U)
    assert len(per_group) == len(positions) >= 8
    np.testing.assert_allclose(per_group, want, rtol=0.06, atol=0.002)  # 40,000 grid points: cells to about 0.2 m
    record = result.calibration["weights"]
    assert record["positions"] == len(positions) and record["extent"] == "the boundary given"
    assert record["effective_positions"] == pytest.approx(1 / np.sum(per_group**2), rel=0.05)
    assert "uniform over the site" in result.calibration["guarantee"]
    assert result.calibration["terms"]["form"] == "approximate" and result.calibration["terms"]["bound"] is None
    plain = train(uneven_survey, TrainConfig(seed=0, methods=("ge",), centre="knn", typicality=False,
                                             primary_folds=0))
    same = plain.model.methods["ge"].calibrator_
    np.testing.assert_array_equal(same.scores_, cal.scores_)  # the same scores, weighed otherwise
    assert result.model.methods["ge"].alpha_q_ == cal.quantile(0.9)
    assert "weights" not in plain.calibration


def test_site_calibration_is_refused_where_there_is_no_site(uneven_survey):
    from dataclasses import replace

    from training.pipeline import TrainConfig, train

    with pytest.raises(InputError, match="does not combine with floor_column") as info:
        train(uneven_survey, TrainConfig(methods=("ge",), calibrate_for="site", floor_column="floor"))
    assert info.value.field == "calibrate_for"
    with pytest.raises(InputError, match="calibrate_for must be one of survey, site"):
        train(uneven_survey, TrainConfig(methods=("ge",), calibrate_for="users"))
    rows = replace(uneven_survey, groups=None, grouping=None)
    with pytest.raises(InputError, match="needs rows grouped by position") as info:
        train(rows, TrainConfig(methods=("ge",), centre="knn", calibrate_for="site", use_groups=False,
                                typicality=False, primary_folds=0))
    assert info.value.field == "calibrate_for"


def test_lmve_train_reads_the_site_boundary_only_with_calibrate_for_site(tmp_path):
    from training.commands.train_args import build_parser, config_from_args

    (tmp_path / "site.csv").write_text("x,y\n0,0\n40,0\n40,24\n0,24\n")
    args = build_parser("").parse_args(["--csv", "s.csv", "--targets", "x,y", "--calibrate-for", "site",
                                        "--site-boundary", str(tmp_path / "site.csv")])
    config = config_from_args(args)
    assert config.calibrate_for == "site"
    np.testing.assert_array_equal(config.site_boundary, BOUNDARY)
    args = build_parser("").parse_args(["--site-boundary", str(tmp_path / "site.csv")])
    with pytest.raises(InputError, match="--site-boundary is the site of --calibrate-for site"):
        config_from_args(args)
