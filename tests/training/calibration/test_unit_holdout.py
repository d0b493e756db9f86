"""Each unit left out in turn (training.calibration.unit_holdout): thresholds of the other units' scores, by hand."""

from dataclasses import replace

import numpy as np
import pytest

from models.shapes.copula import EmpiricalCopulaBox
from models.shapes.ge import GaussianEllipsoid
from models.shapes.nle import NearestNeighbourEllipsoid
from training.calibration.across import unit_codes
from training.calibration.unit_holdout import leave_unit_out, unit_coverages
from training.pipeline import TrainConfig, train
from tests.training.calibration.test_across import offset_survey


def weighted_threshold(scores, units, eta):
    """Rule group-weighted by hand: every unit weighs the same, shared among its rows; the smallest score whose
    cumulative weight reaches eta."""
    _, codes = np.unique(units, return_inverse=True)
    sizes = np.bincount(codes)
    w = 1.0 / (len(sizes) * sizes[codes])
    order = np.argsort(scores, kind="stable")
    cum = np.cumsum(w[order])
    return scores[order][np.searchsorted(cum, eta - 1e-12)]


def folds_of(shape_type, seed=0, n=240, n_units=6, d=3):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    Y = X[:, :2] * [1.0, 0.5] + rng.normal(size=(n, 2)) * (1 + np.abs(X[:, :1]))
    centres = Y - rng.normal(size=(n, 2)) * (1 + np.abs(X[:, :1]))  # a centre of its own error
    units = rng.integers(0, n_units, size=n)
    folds = []
    for held in ([0, 1], [2, 3], [4, 5]):
        rows = np.flatnonzero(np.isin(units, held))
        rest = np.flatnonzero(~np.isin(units, held))
        shape = shape_type().fit(X[rest], Y[rest] - centres[rest])
        shape.prepare_calibration(X[rows], Y[rows] - centres[rows])
        folds.append((shape, rows))
    return X, Y, centres, units, folds


@pytest.mark.parametrize("shape_type", [GaussianEllipsoid, NearestNeighbourEllipsoid, EmpiricalCopulaBox])
def test_each_unit_meets_the_threshold_of_the_other_units_scores(shape_type):
    X, Y, centres, units, folds = folds_of(shape_type)
    regions, thresholds = leave_unit_out(folds, X, Y, centres, units, "group-weighted", 0, 0.8, alpha_q=1.5)
    scores = np.empty(len(Y))
    for shape, rows in folds:
        scores[rows] = shape.conformity_scores(X[rows], Y[rows] - centres[rows])
    for u in range(6):
        others = units != u
        assert thresholds[u] == weighted_threshold(scores[others], units[others], 0.8)
    # every row in order, its region its fold shape's at its unit's threshold: inside exactly when its score is
    # within it (an ellipsoid; away from the threshold's own rounding)
    assert len(regions) == len(Y) and regions.alpha_q == 1.5
    if regions.kind == "ellipsoid":
        t = np.array([thresholds[u] for u in units])
        clear = np.abs(scores - t) > 1e-9 * t
        assert np.array_equal(regions.contains(Y)[clear], (scores <= t)[clear])
    for shape, rows in folds:
        for u in np.unique(units[rows]):
            at = rows[units[rows] == u]
            one = shape.region(X[at], centres[at], thresholds[u], 0.8)
            np.testing.assert_array_equal(regions.volume()[at], one.volume())
            np.testing.assert_array_equal(regions.centers[at], one.centers)


def test_unit_coverages_weigh_every_unit_the_same():
    inside = np.array([1, 1, 1, 0, 0, 1], dtype=bool)
    units = np.array([3, 3, 3, 3, 7, 7])
    assert unit_coverages(inside, units) == {"lowest": 0.5, "mean": 0.625, "units": 2}


def test_across_units_the_run_has_no_test_part_and_measures_each_unit_left_out():
    ds = offset_survey()
    config = TrainConfig(methods=("ge", "ball"), centre="knn", calibrate_across=("PHONEID",))
    result = train(ds, config)
    split = result.split  # grouped by position: calibration at positions out of training, every phone in both
    assert not len(split.test) and len(split.train) + len(split.calibration) == len(ds.Y)
    units = unit_codes(ds, ["PHONEID"])
    assert len(np.unique(units[split.train])) == len(np.unique(units[split.calibration])) == 8
    rows = result.held_out["rows"]
    assert np.array_equal(rows, split.calibration)
    for name in config.methods:
        m, region = result.metrics[name], result.held_out[name]
        inside = region.contains(ds.Y[rows])
        assert m["coverage"] == inside.mean() and m["n_test"] == len(rows)
        assert m["volume"] == pytest.approx(region.volume().mean(), rel=1e-12)
        assert m["units"] == unit_coverages(inside, units[rows]) and m["units"]["units"] == 8
        # no unit's regions come from a model that saw it: the served model's (which saw every phone) differ
        served = result.model.predict_region(ds.X[rows], method=name, typicality=False).regions
        assert not np.array_equal(served.centers, region.centers)
    assert result.centre["test"]["rmse"] > 0


def test_the_served_method_is_the_smallest_of_those_no_larger_than_the_ball_at_any_unit_left_out():
    ds = offset_survey(n_devices=9, seed=4)
    result = train(ds, TrainConfig(methods=("lmve", "ge", "nle", "ball"), centre="knn", calibrate_across=("PHONEID",),
                                   method_params={"lmve": dict(max_steps=60, eval_every=20, patience=2)}))
    sel, rows = result.model.selection, result.held_out["rows"]
    units = unit_codes(ds, ["PHONEID"])[rows]
    per = {m: np.array([result.held_out[m].volume()[units == u].mean() for u in np.unique(units)])
           for m in ("lmve", "ge", "nle", "ball")}
    safe = [m for m in per if (per[m] <= per["ball"]).all()]
    assert "ball" in safe and sel["primary"] == min(safe, key=lambda m: per[m].mean())
    assert sel["order"][:len(safe)] == sorted(safe, key=lambda m: per[m].mean())
    for m in per:
        assert sel["held_out"][m]["volume"] == pytest.approx(per[m].mean(), rel=1e-12)
        assert sel["held_out"][m]["units_larger_than_ball"] == int(np.sum(per[m] > per["ball"]))
    assert sel["n_rows"] == len(rows) and sel["rows"] == "calibration rows of 9 units, each unit left out in turn"
    # --primary forces its method first, with the same evidence
    forced = train(ds, TrainConfig(methods=("ge", "nle", "ball"), centre="knn", calibrate_across=("PHONEID",),
                                   primary="nle")).model.selection
    assert (forced["rule"], forced["primary"]) == ("forced", "nle")


def test_the_served_region_at_a_new_phone_is_never_larger_than_the_ball_about_the_same_centre():
    """The served method is chosen on each unit left out in turn, the ball among the candidates: at a phone the
    run never saw, its mean area is at most the ball's, calibrated the same way about the same centre."""
    ds = offset_survey(n_devices=9, seed=3)
    codes = ds.meta["PHONEID"]
    for held in np.unique(codes)[:3]:
        keep = codes != held
        part = replace(ds, X=ds.X[keep], Y=ds.Y[keep], groups=ds.groups[keep],
                       meta={k: v[keep] for k, v in ds.meta.items()})
        result = train(part, TrainConfig(methods=("ge", "nle", "ball"), centre="knn", calibrate_across=("PHONEID",)))
        model, X_new = result.model, ds.X[~keep]
        served = model.predict_region(X_new, typicality=False).regions
        ball = model.predict_region(X_new, method="ball", typicality=False).regions
        np.testing.assert_array_equal(served.centers, ball.centers)
        assert served.volume().mean() <= ball.volume().mean() * (1 + 1e-12), (held, model.primary_method)
