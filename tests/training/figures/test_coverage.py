"""training/figures/walk.py's intervals: ``binomial`` is scipy's exact binomial test for whole hits and extends
it to real-valued ones; ``coverage_interval`` counts rows, or groups when given, and says where the level lies."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import binomtest

from training.figures.coverage import binomial, coverage_interval, shortfall_tolerance, units_to_tell


@pytest.mark.parametrize("hits,n,level", [(0, 10, 0.9), (10, 10, 0.9), (165, 200, 0.9), (7, 20, 0.5),
                                          (18, 20, 0.9), (499, 500, 0.95)])
def test_binomial_is_scipys_exact_test_for_whole_hits(hits, n, level):
    got = binomial(hits, n, level)
    ci = binomtest(hits, n, level).proportion_ci(0.95, method="exact")
    assert got["interval"] == pytest.approx([ci.low, ci.high], abs=1e-12)
    assert got["p_value"] == pytest.approx(binomtest(hits, n, level, alternative="less").pvalue, rel=1e-9)


def test_binomial_of_real_hits_lies_between_its_whole_neighbours():
    lower, mid, upper = (binomial(h, 20, 0.9) for h in (16, 16.5, 17))
    for k in (0, 1):
        assert lower["interval"][k] < mid["interval"][k] < upper["interval"][k]
    assert lower["p_value"] < mid["p_value"] < upper["p_value"]


def test_rows_count_each_row():
    inside = np.r_[np.ones(165, bool), np.zeros(35, bool)]
    got = coverage_interval(inside, 0.9)
    assert (got["unit"], got["n"], got["estimate"]) == ("rows", 200, 0.825)
    assert got["interval"] == binomial(165, 200, 0.9)["interval"] and got["verdict"] == "short"


def test_groups_count_each_group_once_and_weigh_groups_equally():
    # 20 positions of 10 readings, 16 wholly inside and 4 wholly outside: 20 draws, not 200
    groups = np.repeat(np.arange(20), 10)
    inside = np.repeat(np.arange(20) < 16, 10)
    got = coverage_interval(inside, 0.9, groups)
    assert (got["unit"], got["n"], got["estimate"]) == ("groups", 20, 0.8)
    assert got["interval"] == binomial(16, 20, 0.9)["interval"] and got["verdict"] == "inconclusive"
    # the same rows counted one by one are "short": what the report must not claim
    assert coverage_interval(inside, 0.9)["verdict"] == "short"
    # groups of unequal size weigh the same: one row of group 0 outside, 99 of group 1 inside
    got = coverage_interval(np.r_[False, np.ones(99, bool)], 0.5, np.r_[0, np.ones(99, int)])
    assert got["estimate"] == 0.5 and got["n"] == 2
    # labels of any kind (strings), in any order
    labels = np.array(["b", "a", "b", "a"])
    assert coverage_interval(np.array([True, False, True, True]), 0.9, labels)["estimate"] == 0.75


@pytest.mark.parametrize("share,n,level,verdict", [(0.5, 100, 0.9, "short"), (0.85, 100, 0.9, "inconclusive"),
                                                    (0.95, 100, 0.9, "within"), (0.85, 400, 0.9, "short"),
                                                    (1.0, 400, 0.98, "above"), (1.0, 100, 0.98, "inconclusive"),
                                                    (0.9, 400, 0.9, "within"), (0.89, 1000, 0.9, "within"),
                                                    (1.0, 3, 0.9, "inconclusive")])
def test_the_verdict_says_where_the_level_lies(share, n, level, verdict):
    got = coverage_interval(np.arange(n) < round(share * n), level)
    low, high = got["interval"]
    assert got["verdict"] == verdict
    assert (high < level) == (verdict == "short") and (low > level) == (verdict == "above")
    # "within" only where the interval rules out a shortfall beyond the tolerance; "inconclusive" says how many would
    within = high >= level >= low >= level - shortfall_tolerance(level)
    assert (verdict == "within") == within
    assert (got["needed"] is not None) == (verdict == "inconclusive")


def test_an_inconclusive_part_says_how_many_units_would_tell():
    # three test positions, all covered: 29.2-100 %, which a 90 % target and an 80 % coverage both fit
    got = coverage_interval(np.ones(15, bool), 0.9, np.repeat(np.arange(3), 5))
    assert got["verdict"] == "inconclusive" and got["interval"][0] == pytest.approx(0.292, abs=1e-3)
    n = got["needed"]
    assert n == units_to_tell(0.9) and shortfall_tolerance(0.9) == pytest.approx(0.05)
    # the smallest size whose interval, at a coverage on target, ends at or above 85 %
    assert binomial(0.9 * n, n, 0.9)["interval"][0] >= 0.85 > binomial(0.9 * (n - 1), n - 1, 0.9)["interval"][0]
    # at that size a coverage on target reads "within"; one size less, "inconclusive"
    assert coverage_interval(np.arange(10 * n) % 10 != 0, 0.9, np.repeat(np.arange(n), 10))["verdict"] == "within"
    assert shortfall_tolerance(0.98) == pytest.approx(0.01) and units_to_tell(0.98) > units_to_tell(0.9)
