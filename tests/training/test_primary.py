"""``--primary``: the served method chosen on held-out rows, never on calibration rows."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from models.bundle import load_bundle, save_bundle
from models.exceptions import BundleError, InputError
from training.datasets import load_dataset
from training.pipeline import Split, TrainConfig, default_split, train

from tests.conftest import FAST_TRAIN_LMVE

CONFIG = TrainConfig(seed=0, methods=("ge", "nle", "lmve", "copula"), method_params={"lmve": FAST_TRAIN_LMVE})


@pytest.fixture(scope="module")
def survey():
    ds = load_dataset("synthetic", n_samples=800, seed=1)
    from training.datasets import group_by_position

    ds = group_by_position(ds)
    return ds, default_split(ds, CONFIG)


@pytest.fixture(scope="module")
def trained(survey):
    ds, split = survey
    return train(ds, CONFIG, split=split)


def test_auto_serves_the_method_of_smallest_held_out_volume(trained, survey):
    ds, split = survey
    model, sel = trained.model, trained.model.selection
    held = sel["held_out"]
    assert sorted(sel["order"]) == ["ge", "lmve", "nle"] and "copula" in held  # boxes are figures, never served
    assert held["copula"]["volume"] is None and held["copula"]["threshold"] is None
    volumes = [held[m]["volume"] for m in sel["order"]]
    assert volumes == sorted(volumes) and sel["rule"] == "auto" and sel["primary"] == sel["order"][0]
    assert model.primary_method == sel["primary"] and model.served_methods == tuple(sel["order"])
    assert sel["folds"] == 3 and sel["n_rows"] == len(split.train) + len(split.test)
    assert sel["rows"] == f"3-fold cross-fit of the train part ({len(split.train)} rows) and the test part"
    X, Y = ds.X[split.test], ds.Y[split.test]
    for name in held:  # the report-only figures are the calibrated regions' on the test part
        assert held[name]["coverage"] == pytest.approx(trained.metrics[name]["coverage"])
        assert held[name]["volume_calibrated"] == pytest.approx(trained.metrics[name]["volume"])
    # the plain route's answer is the primary's
    assert model.predict_region(X[:3]).method == sel["primary"]


def test_the_ge_figures_are_its_out_of_fold_and_test_scores_by_hand(trained, survey):
    """GE's shape is the second moment of its training residuals, so its cross-fitted scores can be
    written out: each fold's Mahalanobis distances under the other folds' moment, pooled with the
    test rows' under the served one; the threshold is their order statistic and the volume
    ``q * pi * mean sqrt(det C)`` (n = 2)."""
    from models.centres.stack import fold_splits

    ds, split = survey
    model = trained.model
    Xs = model.standardise(ds.X)
    centers = model.predict_center(ds.X)
    train_groups = ds.groups[split.train]
    # the train rows' residuals are the out-of-fold centres' (cross_fit=5 by groups), as the shapes saw them
    from training.selection import out_of_fold_centers

    oof = out_of_fold_centers(Xs[split.train], ds.Y[split.train], replace(CONFIG, centre="paper"), 5, train_groups)
    R = ds.Y[split.train] - oof
    scores, dets = [], []
    for rest, fold in fold_splits(len(split.train), 3, CONFIG.seed, train_groups):
        C = R[rest].T @ R[rest] / len(rest)
        scores.append(np.einsum("ij,jk,ik->i", R[fold], np.linalg.inv(C), R[fold]))
        dets += [np.sqrt(np.linalg.det(C))] * len(fold)
    C = model.methods["ge"].shape_.covariance_
    Rt = ds.Y[split.test] - centers[split.test]
    scores.append(np.einsum("ij,jk,ik->i", Rt, np.linalg.inv(C), Rt))
    dets += [np.sqrt(np.linalg.det(C))] * len(Rt)
    s = np.concatenate(scores)
    q = np.sort(s)[int(np.ceil(0.9 * (len(s) - 1)))]
    ge = trained.model.selection["held_out"]["ge"]
    assert ge["threshold"] == pytest.approx(q, rel=1e-9)
    assert ge["volume"] == pytest.approx(q * np.pi * np.mean(dets), rel=1e-9)


def test_folds_zero_chooses_on_the_test_part_alone(survey):
    ds, split = survey
    result = train(ds, replace(CONFIG, primary_folds=0), split=split)
    model, sel = result.model, result.model.selection
    assert sel["rows"] == "test part" and sel["n_rows"] == len(split.test) and sel["folds"] == 0
    X, Y = ds.X[split.test], ds.Y[split.test]
    scores = model.score_points(X, Y)
    for name in sel["order"]:  # the figures are what they say: recomputed here from the test rows alone
        s = scores[name]
        q = sel["held_out"][name]["threshold"]
        assert np.mean(s <= q) >= 0.9 and q in s  # an order statistic
        region = model.methods[name].shape_.region(model.standardise(X), model.predict_center(X), q, 0.9)
        assert sel["held_out"][name]["volume"] == pytest.approx(np.mean(region.volume("lebesgue")))


@pytest.mark.parametrize("folds", [1, -2, 2.5, True])
def test_bad_fold_counts_are_refused_before_fitting(survey, folds):
    ds, split = survey
    with pytest.raises(InputError, match="--primary-folds must be 0") as err:
        train(ds, replace(CONFIG, primary_folds=folds), split=split)
    assert err.value.field == "primary_folds"


def test_auto_never_reads_calibration_rows(trained, survey):
    """Change the calibration rows (their labels, and which rows they are): the choice and every figure
    it read stay; the calibrated thresholds move, so the calibration did change."""
    ds, split = survey
    rng = np.random.default_rng(7)
    Y = ds.Y.copy()
    Y[split.calibration] += rng.normal(0.0, 5.0, size=(len(split.calibration), 2))
    cal_groups = np.unique(ds.groups[split.calibration])
    kept = split.calibration[np.isin(ds.groups[split.calibration], cal_groups[: len(cal_groups) * 3 // 4])]
    fewer = Split(train=split.train, calibration=kept, test=split.test)
    for data, part in ((replace(ds, Y=Y), split), (ds, fewer)):
        other = train(data, CONFIG, split=part)
        assert other.model.selection["order"] == trained.model.selection["order"]
        for name in trained.model.selection["order"]:  # Copula's score is built on calibration ranks:
            f, again = trained.model.selection["held_out"][name], other.model.selection["held_out"][name]
            assert (again["volume"], again["threshold"]) == (f["volume"], f["threshold"])
        assert other.model.methods["ge"].alpha_q_ != trained.model.methods["ge"].alpha_q_


def test_forced_primary_goes_first_and_the_rest_keep_their_rank(trained, survey):
    ds, split = survey
    auto = trained.model.selection["order"]
    forced = auto[-1]
    sel = train(ds, replace(CONFIG, primary=forced), split=split).model.selection
    assert sel["rule"] == "forced" and sel["order"] == [forced, *auto[:-1]]


@pytest.mark.parametrize("primary", ["copula", "svr", ""])
def test_a_primary_that_cannot_serve_is_refused_before_fitting(survey, primary):
    ds, split = survey
    with pytest.raises(InputError, match="--primary must be auto or an ellipsoid method") as err:
        train(ds, replace(CONFIG, primary=primary), split=split)
    assert err.value.field == "primary"


def test_the_selection_travels_with_the_bundle(trained, tmp_path):
    save_bundle(trained.model, tmp_path / "b")
    model = load_bundle(tmp_path / "b")
    assert model.selection == json.loads(json.dumps(trained.model.selection))
    assert model.primary_method == trained.model.primary_method
    assert model.served_methods == trained.model.served_methods
    # a recalibration keeps the order
    assert trained.model.recalibrated(np.zeros((12, 16)) - 70, np.zeros((12, 2))).served_methods \
        == trained.model.served_methods


def test_a_selection_naming_a_missing_method_is_a_bundle_error(trained, tmp_path):
    save_bundle(trained.model, tmp_path / "b")
    path = tmp_path / "b" / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["selection"]["order"] = ["mystery", "ge"]
    path.write_text(json.dumps(manifest))
    with pytest.raises(BundleError, match="selection.order must list methods of the bundle"):
        load_bundle(tmp_path / "b")


def test_without_a_selection_the_registry_order_serves(trained):
    model = replace(trained.model, selection={})
    assert model.served_methods == ("lmve", "nle", "ge") and model.primary_method == "lmve"
    ranked = replace(trained.model, selection={"order": ["ge", "lmve", "nle"]})
    assert ranked.served_methods == ("ge", "lmve", "nle")
    assert [n for n, _ in ranked._candidates(None, None)] == ["ge", "lmve", "nle"]
    assert [n for n, _ in ranked._candidates("lmve", None)] == ["lmve", "nle"]
