import math

import numpy as np
import pytest

from models.calibration.conformal import (
    SplitConformalCalibrator,
    UncalibratableWarning,
    conformal_quantile,
    conformal_rank,
)
from models.exceptions import InputError, NotFittedError


@pytest.mark.parametrize(
    "m, eta, k",
    [(9, 0.9, 9), (10, 0.9, 10), (99, 0.9, 90), (100, 0.9, 91), (9, 0.7, 7), (19, 0.95, 19), (1, 0.4, 1)],
)
def test_rank_is_ceil_m_plus_one_eta(m, eta, k):
    assert conformal_rank(m, eta) == k


def test_quantile_is_the_kth_smallest_score():
    scores = np.random.default_rng(0).permutation(np.arange(1.0, 100.0))  # 1..99, m = 99
    assert conformal_quantile(scores, 0.9) == 90.0  # k = ceil(100 * 0.9) = 90
    assert conformal_quantile(scores, 0.5) == 50.0


def test_quantile_is_infinite_when_rank_exceeds_m():
    with pytest.warns(UncalibratableWarning, match="whole space"):
        assert conformal_quantile([1.0, 2.0, 3.0], 0.9) == math.inf  # k = ceil(3.6) = 4 > 3


def test_calibrator_answers_other_levels_without_refit():
    cal = SplitConformalCalibrator().fit(np.arange(1.0, 20.0))  # m = 19
    assert cal.quantile(0.9) == 18.0
    assert cal.quantile(0.5) == 10.0
    with pytest.warns(UncalibratableWarning):
        assert cal.quantile(0.99) == math.inf
    assert cal.coverage_bounds(0.9) == pytest.approx((0.9, 0.95))


def test_p_value_formula():
    cal = SplitConformalCalibrator().fit([1.0, 2.0, 3.0, 4.0])
    # p = (1 + #{alpha_i >= s}) / (m + 1)
    np.testing.assert_allclose(cal.p_value([0.5, 2.0, 2.5, 4.0, 9.0]), [5 / 5, 4 / 5, 3 / 5, 2 / 5, 1 / 5])


def test_p_values_are_super_uniform_on_exchangeable_scores():
    # P[p <= t] <= t holds marginally over calibration draws: average over 400 of them
    rng = np.random.default_rng(1)
    p = np.concatenate([
        SplitConformalCalibrator().fit(rng.exponential(size=99)).p_value(rng.exponential(size=100))
        for _ in range(400)
    ])
    for t in (0.05, 0.1, 0.5):
        assert np.mean(p <= t) <= t + 0.012
    assert np.mean(p <= 0.5) >= 0.5 - 0.03  # and not grossly conservative


def test_quantile_and_p_value_agree():
    # y is inside the eta-region exactly when its p-value exceeds 1 - eta (up to the grid)
    rng = np.random.default_rng(2)
    cal = SplitConformalCalibrator().fit(rng.normal(size=199) ** 2)
    s = rng.normal(size=1000) ** 2
    inside = s <= cal.quantile(0.9)
    assert np.array_equal(inside, cal.p_value(s) > 1 - 0.9 + 1e-12)


@pytest.mark.parametrize("eta", [0.0, 1.0, -0.1, 1.5, float("nan"), "0.9", True])
def test_coverage_outside_open_unit_interval_is_refused(eta):
    with pytest.raises(InputError, match="coverage"):
        conformal_quantile([1.0, 2.0], eta)


def test_bad_scores_and_unfitted_calibrator():
    with pytest.raises(InputError, match="empty"):
        conformal_quantile([], 0.9)
    with pytest.raises(InputError, match="NaN"):
        SplitConformalCalibrator().fit([1.0, float("nan")])
    with pytest.raises(NotFittedError, match="conformalize"):
        SplitConformalCalibrator().quantile(0.9)


# ----------------------------------------------------------------------------- grouped calibration
def test_group_subsample_keeps_one_score_per_group_and_ranks_them():
    # 5 groups of sizes 1, 2, 3, 4, 5 with scores 10 g + i: any drawn row of group g lies in [10 g, 10 g + 4]
    scores = np.concatenate([10.0 * g + np.arange(g + 1) for g in range(5)])
    groups = np.concatenate([[f"p{g}"] * (g + 1) for g in range(5)])
    cal = SplitConformalCalibrator("group-subsample", random_state=3).fit(scores, groups)
    assert cal.n_calibration_ == 5 and cal.n_rows_ == 15 and cal.unit == "groups"
    assert [int(s // 10) for s in cal.scores_] == [0, 1, 2, 3, 4]  # one per group, sorted
    # k = ceil(6 * 0.8) = 5: the largest group score; 0.5 -> k = 3
    assert cal.quantile(0.8) == cal.scores_[4] and cal.quantile(0.5) == cal.scores_[2]
    assert cal.max_coverage == 5 / 6
    with pytest.warns(UncalibratableWarning):
        assert cal.quantile(0.9) == math.inf
    # p = (1 + #{group scores >= s}) / (m + 1)
    np.testing.assert_allclose(cal.p_value([0.0, 25.0, 100.0]), [6 / 6, 3 / 6, 1 / 6])
    again = SplitConformalCalibrator("group-subsample", random_state=3).fit(scores, groups)
    np.testing.assert_array_equal(again.scores_, cal.scores_)  # the draw is seeded


def test_group_pooled_weights_every_group_equally():
    # group A: one score 1; group B: scores 2 and 3; group C: four scores 4..7
    scores = np.array([1.0, 2, 3, 4, 5, 6, 7])
    groups = np.array(["A", "B", "B", "C", "C", "C", "C"])
    cal = SplitConformalCalibrator("group-pooled").fit(scores, groups)
    np.testing.assert_allclose(cal.weights_, [1 / 3, 1 / 6, 1 / 6, 1 / 12, 1 / 12, 1 / 12, 1 / 12])
    # pooled CDF: 1/3 at 1, 1/2 at 2, 2/3 at 3, 3/4 at 4, 5/6 at 5, 11/12 at 6, 1 at 7; target eta (m+1)/m
    assert cal.quantile(0.5) == 3.0    # target 2/3
    assert cal.quantile(0.25) == 1.0   # target 1/3
    assert cal.quantile(0.68) == 6.0   # target 0.9067 <= 11/12
    assert cal.quantile(0.7) == 7.0    # target 0.9333 > 11/12
    # p = (1 + m W(alpha >= s)) / (m + 1): W(>= 4) = 1/3, W(>= 0) = 1, W(> 7) = 0
    np.testing.assert_allclose(cal.p_value([4.0, 0.0, 8.0]), [(1 + 1) / 4, 4 / 4, 1 / 4])
    # one row per group: the pooled rule is the row rule
    rows = SplitConformalCalibrator().fit(scores)
    single = SplitConformalCalibrator("group-pooled").fit(scores, np.arange(7))
    for eta in (0.3, 0.5, 0.8):
        assert single.quantile(eta) == rows.quantile(eta)
    np.testing.assert_allclose(single.p_value(scores), rows.p_value(scores))


def test_group_rules_need_groups_and_refuse_levels_past_the_group_count():
    with pytest.raises(InputError, match="needs the calibration rows' groups") as info:
        SplitConformalCalibrator("group-subsample").fit([1.0, 2.0])
    assert info.value.field == "groups"
    with pytest.raises(InputError, match="one label per calibration row"):
        SplitConformalCalibrator("group-pooled").fit([1.0, 2.0], ["a"])
    cal = SplitConformalCalibrator("group-pooled").fit(np.arange(40.0), np.repeat(np.arange(4), 10))
    with pytest.raises(InputError, match=r"needs more than the 4 calibration groups.*highest attainable level is 0\.8"):
        cal.check_level(0.9)
    with pytest.raises(InputError, match="calibration rule must be one of"):
        SplitConformalCalibrator("bogus").fit([1.0])


def test_level_of_inverts_the_quantile():
    from models.calibration.conformal import SplitConformalCalibrator

    cal = SplitConformalCalibrator().fit(np.arange(1.0, 20.0))  # m = 19
    for eta in (0.1, 0.5, 0.9, 0.95):
        q = cal.quantile(eta)
        assert cal.level_of(q) >= eta and cal.level_of(q) - eta < 1 / 20 + 1e-12
    assert cal.level_of(0.5) == 0.0 and cal.level_of(1e9) == pytest.approx(19 / 20)


def weighted_quantile(scores, weights, target) -> float:
    """The smallest score whose cumulative weight (sorted by score) reaches ``target``, by brute force."""
    order = np.argsort(scores, kind="stable")
    cum = np.cumsum(np.asarray(weights, dtype=float)[order]) / np.sum(weights)
    return float(np.asarray(scores)[order][np.flatnonzero(cum >= target - 1e-12)[0]])


@pytest.mark.parametrize("rule", ["group-pooled", "group-subsample"])
def test_reweighed_groups_move_the_threshold_to_the_weighted_quantile(rule):
    rng = np.random.default_rng(0)
    groups = np.repeat(np.arange(12), rng.integers(1, 6, size=12))
    scores = rng.exponential(size=groups.size) * (1 + groups)  # later groups score higher
    cal = SplitConformalCalibrator(rule, random_state=3).fit(scores, groups)
    same = cal.quantile(0.8)
    cal.reweighed(np.ones(12))  # equal weights: the rule's own threshold (the k-th smallest for subsample)
    assert cal.quantile(0.8) == same
    w = np.linspace(3.0, 0.25, 12)  # the hard groups weigh little
    cal.reweighed(w)
    m = 12
    if rule == "group-pooled":
        row_w = w[groups] / np.bincount(groups)[groups]
        want = weighted_quantile(scores, row_w, 0.8 * (m + 1) / m)
    else:
        kept = cal.scores_  # one score per group, sorted; their groups' weights in the same order
        want = weighted_quantile(kept, w[cal._codes], 0.8 * (m + 1) / m)
    assert cal.quantile(0.8) == want
    assert cal.quantile(0.8) < same * (1 + 1e-12)


def test_only_a_grouped_fit_of_this_process_can_be_reweighed_by_a_weight_per_group():
    rows = SplitConformalCalibrator("rows").fit(np.arange(10.0))
    with pytest.raises(InputError, match="only a grouped calibrator") as info:
        rows.reweighed(np.ones(10))
    assert info.value.field == "rule"
    loaded = SplitConformalCalibrator.from_arrays("group-pooled", np.arange(4.0), np.full(4, 0.25), 4, 4)
    with pytest.raises(InputError, match="only a grouped calibrator"):
        loaded.reweighed(np.ones(4))
    cal = SplitConformalCalibrator("group-pooled").fit(np.arange(8.0), np.repeat(np.arange(4), 2))
    for bad in (np.ones(3), [1, 1, -1, 1], np.zeros(4), [1, np.nan, 1, 1]):
        with pytest.raises(InputError, match="group_weights must be 4 non-negative numbers") as info:
            cal.reweighed(bad)
        assert info.value.field == "group_weights"
