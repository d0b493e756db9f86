import math

import numpy as np
import pytest

from models.conformal import (
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
