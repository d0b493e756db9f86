"""training/calibration/cross_fit.py: the calibration modes of a grouped survey. The cross-fit's scores come from no model
that saw the scored position, ``auto`` picks the mode by the split's calibration groups, and the guarantee says
which form it is."""

from __future__ import annotations

import json

import numpy as np
import pytest

from models.exceptions import InputError
from training.pipeline.config import TrainConfig
from training.calibration.cross_fit import CROSS_FIT_BELOW, CROSS_FIT_RULE, resolve_mode, split_groups
from training.data.datasets import Dataset
from training.pipeline.stages import centre_stage, plan, preprocess_stage, train
from training.pipeline.meter import StageMeter
from training.data.synthetic import make_survey


def survey(n_points: int, readings: int = 5, seed: int = 0, shift: dict | None = None) -> Dataset:
    """A grouped synthetic survey; ``shift``: ``{position: (dx, dy)}`` added to those positions' targets."""
    X, Y, point, device, fn, tn = make_survey(n_points=n_points, readings=readings, n_beacons=8, seed=seed)
    Y = Y.copy()
    for p, d in (shift or {}).items():
        Y[point == p] += d
    return Dataset("survey", X, Y, fn, tn, "x", groups=point, grouping={"by": "position", "n_groups": n_points},
                   meta={"device": device})


def cross_state(dataset: Dataset, **config):
    """The plan and the centre stage's result of a cross-fitted run."""
    p = plan(dataset, TrainConfig(centre="knn", calibration_mode="cross-fit", **config))
    meter = StageMeter()
    return p, centre_stage(p, preprocess_stage(p, meter), meter)


def test_every_training_position_calibrates_from_models_that_never_saw_it():
    base, centres = cross_state(survey(30))
    split, cf = base.split, centres.cross_fit
    assert base.mode.cross_fitted and np.array_equal(split.calibration, split.train)
    assert not np.isin(split.test, split.train).any() and split.cross_fit["groups"] == 27
    groups = np.asarray(base.groups)
    for rest, fold, scored in cf.folds_:  # the shapes' folds: the scored positions are not among the fitted ones
        assert not np.isin(groups[split.train[rest]], groups[split.calibration[scored]]).any()
        assert np.isin(groups[split.train[fold]], groups[split.calibration[scored]]).all()
    # move one training position's targets far away: no centre that scores it learnt from it, so its rows' centres
    # stay as they were, bit for bit, while a model that saw it would move towards it
    p = int(groups[split.train[0]])
    moved = cross_state(survey(30, shift={p: (30.0, -20.0)}))[1]
    rows = np.flatnonzero(groups[split.calibration] == p)
    assert np.array_equal(moved.cross_fit.score_centres_[rows], cf.score_centres_[rows])
    others = np.flatnonzero(groups[split.calibration] != p)
    assert not np.array_equal(moved.cross_fit.score_centres_[others], cf.score_centres_[others])


def test_auto_cross_fits_below_the_threshold_and_splits_at_or_above_it():
    config = TrainConfig()
    below, above = None, None
    for n in range(40, 600, 20):  # the split's calibration groups grow with the positions
        m = split_groups(np.repeat(np.arange(n), 2), config.seed, config.coverage)
        if m < CROSS_FIT_BELOW:
            below = n
        elif above is None:
            above = n
    assert below is not None and above is not None and below < above
    mode, why = resolve_mode(survey(below, readings=2), config)
    assert mode == "cross-fit" and f"fewer than {CROSS_FIT_BELOW}" in why
    assert resolve_mode(survey(above, readings=2), config)[0] == "split"
    # asked for, either way; rows, floors and --calibrate-across keep the split under auto and refuse cross-fit
    assert resolve_mode(survey(above, readings=2), TrainConfig(calibration_mode="cross-fit"))[0] == "cross-fit"
    assert resolve_mode(survey(30), TrainConfig(calibration_mode="split"))[0] == "split"
    assert resolve_mode(survey(30), TrainConfig(use_groups=False))[0] == "split"
    for bad, words in ((dict(use_groups=False), "not grouped"), (dict(calibrate_across=("device",)), "across"),
                       (dict(floor_column="floor"), "floor")):
        with pytest.raises(InputError, match=words) as err:
            resolve_mode(survey(30), TrainConfig(calibration_mode="cross-fit", **bad))
        assert err.value.field == "--calibration"
    with pytest.raises(InputError, match="calibration mode must be one of auto, split, cross-fit"):
        train(survey(30), TrainConfig(calibration_mode="jackknife"))


def test_a_cross_fitted_model_is_calibrated_on_every_training_position():
    result = train(survey(30), TrainConfig(centre="knn", methods=("ge", "nle")))
    assert result.split.cross_fit["mode"] == "cross-fit"
    for reg in result.model.methods.values():
        cal = reg.calibrator_
        assert cal.rule == CROSS_FIT_RULE and cal.n_calibration_ == 27 and cal.n_rows_ == 135
    # the served method was chosen on the calibration's own unit folds, no fit of its own
    assert "unit folds" in result.model.selection["cross_fit_by"]


@pytest.mark.slow
def test_lmve_train_states_the_cross_fit_guarantee_in_the_report_and_get_model(tmp_path):
    import pandas as pd
    from fastapi.testclient import TestClient

    from service.app import create_app
    from service.settings import ServiceSettings
    from training.commands.train import main

    X, Y, point, _, fn, _ = make_survey(n_points=30, readings=5, n_beacons=8, seed=1)
    frame = pd.DataFrame(X, columns=fn).assign(x=Y[:, 0], y=Y[:, 1])
    frame.to_csv(tmp_path / "survey.csv", index=False)
    out = tmp_path / "run"
    assert main(["--csv", str(tmp_path / "survey.csv"), "--targets", "x,y", "--out", str(out), "--quiet",
                 "--methods", "ge,nle", "--centre", "knn"]) == 0  # the k-NN centre's regions pass the warning's share
    manifest = json.loads((out / "bundle" / "manifest.json").read_text())
    cal = manifest["calibration"]
    assert cal["mode"] == "cross-fit" and cal["exact"] is False
    assert cal["bound"] == {"cross_fit": pytest.approx(0.8), "split": 0.9}
    assert "P ~ 0.9 (approximate, cross-fit)" in cal["guarantee"] and "P >= 0.8" in cal["guarantee"]
    assert "27 positions" in cal["guarantee"]
    report = (out / "report.md").read_text()
    assert cal["guarantee"] in report
    # three test positions cannot tell a shortfall: the report says so instead of "no shortfall"
    assert "inconclusive" in report and "no shortfall" not in report
    app = create_app(ServiceSettings(bundle=out / "bundle"))
    with TestClient(app) as client:
        body = client.get("/model").json()
    # one guarantee, said the same in the report, the terminal and GET /model (one top-level object)
    stated = body["guarantee"]
    assert stated["words"] == cal["guarantee"] and body["calibration"]["mode"] == "cross-fit"
    assert {k: stated[k] for k in ("level", "form", "units", "n_units", "rule", "mode")} == {
        "level": 0.9, "form": "approximate", "units": "positions", "n_units": 27, "rule": "group-pooled",
        "mode": "cross-fit"}
    assert stated["bound"] == pytest.approx(0.8) and "CV+" in stated["bound_of"]
    assert "guarantee" not in body["calibration"] and "n_groups" not in body["calibration"]
    # the scale: the served regions against the survey's extent, warned (30 positions of 8 beacons), with the
    # survey-size estimate; GET /model gives it without the extent's coordinates
    scale = cal["scale"]
    assert scale["warning"] and scale["share_of_bbox"] > scale["warn_share"]
    assert f"WARNING: {scale['warning']}" in report and "survey size: estimate (subsampling" in report
    assert body["scale"] == {k: v for k, v in scale.items() if k not in ("bbox", "hull")}
    assert body["scale"]["survey_size"]["twice_area"] < body["scale"]["mean_area"]
    assert "scale" not in body["calibration"]
    # asked for, the split mode states the exact form on its held-out positions
    split = tmp_path / "split"
    assert main(["--csv", str(tmp_path / "survey.csv"), "--targets", "x,y", "--out", str(split), "--quiet",
                 "--methods", "ge,nle", "--calibration", "split"]) == 0
    held = json.loads((split / "bundle" / "manifest.json").read_text())["calibration"]
    assert held["mode"] == "split" and held["exact"] is True and held["guarantee"].startswith("P >= 0.9")
