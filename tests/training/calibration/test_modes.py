"""training/calibration/modes.py: the calibration mode chosen once in ``plan()`` (held-out rows, positions or units;
the cross-fit over positions or units), and what the stages get from it."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from models.exceptions import InputError
from tests.training.calibration.test_across import survey as phone_survey
from tests.training.calibration.test_cross_fit import survey as position_survey
from training.calibration.modes import CrossFitMode, HeldOutMode, choose_mode, default_split
from training.calibration.splits import paper_split
from training.data.datasets import load_dataset
from training.pipeline import TrainConfig
from training.pipeline.meter import StageMeter
from training.pipeline.stages import centre_stage, fit_method, plan, preprocess_stage


@pytest.mark.parametrize(("make", "config", "kind", "rule", "units", "across"), [
    (lambda: load_dataset("synthetic", n_samples=400), {}, HeldOutMode, "rows", False, False),
    (lambda: position_survey(400), {}, HeldOutMode, "group-subsample", True, False),
    (lambda: position_survey(30), {}, CrossFitMode, "group-pooled", True, False),
    (lambda: phone_survey(8), {"calibrate_across": ("PHONEID",)}, CrossFitMode, "group-weighted", True, True),
    (lambda: phone_survey(12), {"calibrate_across": ("PHONEID",), "across_mode": "held-out"}, HeldOutMode,
     "group-weighted", True, True),  # a few held-out phones: the pooled rule
], ids=["rows", "many-positions", "few-positions", "across-cross-fit", "across-held-out"])
def test_the_mode_follows_the_data_and_the_configuration(make, config, kind, rule, units, across):
    ds = make()
    mode = choose_mode(ds, TrainConfig(seed=0, centre="knn", **config), None, 0.9)
    assert type(mode) is kind and mode.rule == rule and mode.across is across
    assert (mode.groups is not None) is units
    assert mode.cross_fitted is (kind is CrossFitMode)
    # a calibration row's typicality leaves out its own unit across units and in a cross-fit, never for rows
    assert (mode.typicality_units() is not None) is (across or kind is CrossFitMode)
    if kind is CrossFitMode and not across:  # every training position calibrates, scored out of fold
        assert np.array_equal(mode.split.calibration, mode.split.train)
    else:
        assert not np.intersect1d(mode.split.train, mode.split.calibration).size


def test_a_callers_split_is_kept_and_its_rule_checked():
    ds = load_dataset("synthetic", n_samples=400)
    split = paper_split(len(ds.X), seed=3)
    mode = choose_mode(ds, TrainConfig(seed=0), split, 0.9)
    assert mode.split is split and isinstance(mode, HeldOutMode)
    with pytest.raises(InputError, match="needs groups") as err:
        choose_mode(ds, TrainConfig(seed=0, calibration="group-subsample"), split, 0.9)
    assert err.value.field == "calibration"


def test_the_default_split_is_the_modes_split_when_no_mode_moves_it():
    ds, config = position_survey(400), TrainConfig(seed=4, centre="knn")
    mode, split = choose_mode(ds, config, None, 0.9), default_split(ds, config)
    for part in ("train", "calibration", "test"):
        assert np.array_equal(getattr(mode.split, part), getattr(split, part))


def _planned(ds, **config):
    """The plan, the preprocess stage's result, the centre stage's, and the meter they ran under."""
    p, meter = plan(ds, TrainConfig(seed=0, centre="knn", methods=("ge",), **config)), StageMeter()
    x = preprocess_stage(p, meter)
    return p, x, centre_stage(p, x, meter), meter


def test_held_out_scores_are_the_served_models_on_the_calibration_rows():
    p, x, c, meter = _planned(position_survey(400))
    assert c.cross_fit is None and "cross-fit" not in meter.stages
    reg, folds, figures = fit_method(p, x, c, "ge")
    assert folds is None and figures == []
    cal = p.split.calibration
    by_hand = reg.shape_.conformity_scores(x.Xs[cal], p.Y[cal] - c.centers[cal])
    # group-subsample: one of each calibration position's own scores, drawn at random
    stored, groups = reg.calibrator_.scores_, p.groups_of(cal)
    assert len(stored) == len(np.unique(groups)) and np.isin(stored, by_hand).all()


def test_a_cross_fitted_mode_scores_with_fold_models_and_gives_their_figures():
    p, x, c, meter = _planned(position_survey(30))
    assert c.cross_fit is not None and "cross-fit" in meter.stages and c.k == len(c.cross_fit.folds_)
    reg, _, folds = fit_method(p, x, c, "ge")
    cal = p.split.calibration
    served = reg.shape_.conformity_scores(x.Xs[cal], p.Y[cal] - c.centers[cal])
    assert not np.array_equal(np.sort(reg.calibrator_.scores_), np.sort(served))  # not the served model's scores
    # each fold shape's figures of the train rows it never saw
    assert len(folds) == c.k
    seen = np.concatenate([f[0] for f in folds])
    assert np.array_equal(np.sort(seen), np.arange(len(p.split.train)))


def test_across_units_a_surveys_automatic_grouping_holds_no_positions_out_a_named_one_does():
    """A new phone reads at the survey's positions: an automatic grouping by position does not make the across
    split ask for a new position too; positions the user grouped (``--groups``) are held out as before."""
    from training.calibration.modes import holds_positions
    from training.data.datasets import group_by_position

    named = phone_survey(8)  # grouped by position, as --groups x,y groups it
    automatic = group_by_position(replace(named, groups=None, grouping=None), auto=True)
    config = TrainConfig(calibrate_across=("PHONEID",))
    assert holds_positions(named, config) and not holds_positions(automatic, config)
    assert not holds_positions(named, replace(config, use_groups=False))
    held, kept = default_split(named, config), default_split(automatic, config)
    assert held.across["held_out_groups"] > 0
    assert not np.intersect1d(named.groups[held.calibration], named.groups[held.train]).size
    assert kept.across["held_out_groups"] is None and kept.across["rows"]["set_aside"] == 0
    assert "position" not in kept.across["guarantee"] and "not in the training data" in held.across["guarantee"]
