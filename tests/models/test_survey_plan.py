"""models/survey_plan.py: where to survey next, inside the site, the same for a seed, as a short walk."""

from __future__ import annotations

import numpy as np
import pytest

from models.exceptions import InputError
from models.survey_map import Extent, survey_map
from models.survey_plan import _kernel, _unsurveyed, demand, plan, walking_order
from tests.models.test_survey_map import survey


def site(seed: int = 0, hole: bool = False):
    """60 positions over a 40 x 25 floor (optionally none in its north-east quarter), areas growing eastwards."""
    rng = np.random.default_rng(seed)
    P = rng.uniform([0, 0], [40, 25], size=(200, 2))
    if hole:
        P = P[~((P[:, 0] > 20) & (P[:, 1] > 12.5))]
    P = P[:60]
    return survey(P, 10 + P[:, 0], 1 + 0.05 * P[:, 0])


def test_no_proposal_lies_outside_the_extent_hull_or_boundary():
    s = site(1)
    for boundary in (None, np.array([[0, 0], [40, 0], [40, 10], [15, 10], [15, 25], [0, 25]], float)):
        m = survey_map(s, boundary=boundary)
        for seed in range(3):
            p = plan(m, 25, seed=seed)
            assert m.extent.contains(p.positions).all()
        if boundary is not None:
            assert not ((p.positions[:, 0] > 15 + 1e-9) & (p.positions[:, 1] > 10 + 1e-9)).any()
    # candidates outside are dropped and counted, never proposed
    m = survey_map(s)
    C = np.random.default_rng(5).uniform([-20, -20], [60, 45], size=(400, 2))
    p = plan(m, 20, candidates=C, seed=0)
    assert m.extent.contains(p.positions).all() and p.outside == int((~m.extent.contains(C)).sum()) > 0
    np.testing.assert_array_equal(C[p.index], p.positions)
    with pytest.raises(InputError, match="lie inside the site") as info:
        plan(m, 400, candidates=C)
    assert info.value.field == "add"


def test_the_plan_is_deterministic_given_a_seed():
    m = survey_map(site(2))
    a, b, c = plan(m, 15, seed=7), plan(m, 15, seed=7), plan(m, 15, seed=8)
    np.testing.assert_array_equal(a.positions, b.positions)
    np.testing.assert_array_equal(a.gain, b.gain)
    assert not np.array_equal(a.positions, c.positions)  # the candidates' jitter is the seed's


def test_each_pick_is_the_candidate_of_most_weighted_gain_and_gains_fall():
    m = survey_map(site(3))
    C = np.random.default_rng(4).uniform([0, 0], [40, 25], size=(300, 2))
    p = plan(m, 6, candidates=C, seed=0)
    ell = p.length_scale
    w = demand(m)
    left = _unsurveyed(m.centres, m.positions, ell)
    total = float((w * left).sum())
    picks = p.index[np.argsort(-p.gain)]  # chosen in order of falling gain (a submodular objective)
    for k in picks:
        gain = _kernel(C, m.centres, ell) @ (w * left)
        gain[p.index[np.isin(p.index, picks[:list(picks).index(k)])]] = -np.inf
        assert gain[k] == pytest.approx(gain.max(), rel=1e-12)
        assert p.gain[list(p.index).index(k)] == pytest.approx(gain[k] / total, rel=1e-12)
        left = left * (1 - _kernel(C[k:k + 1], m.centres, ell)[0])


def test_the_plan_goes_where_the_survey_has_a_hole():
    s = site(4, hole=True)
    m = survey_map(s, boundary=np.array([[0, 0], [40, 0], [40, 25], [0, 25]], float))
    p = plan(m, 8, seed=0, weight="uniform")
    in_hole = (p.positions[:, 0] > 20) & (p.positions[:, 1] > 12.5)
    assert in_hole.sum() >= 6  # a quarter of the floor, unsurveyed, draws most of the walk


def test_the_walk_is_a_permutation_no_reversal_shortens():
    P = np.random.default_rng(6).uniform(0, 100, size=(40, 2))
    order = walking_order(P)
    assert sorted(order.tolist()) == list(range(40))
    Q = P[order]
    length = np.linalg.norm(np.diff(Q, axis=0), axis=1).sum()
    for i in range(39):
        for j in range(i + 2, 40):
            R = np.concatenate([Q[:i + 1], Q[i + 1:j + 1][::-1], Q[j + 1:]])
            assert np.linalg.norm(np.diff(R, axis=0), axis=1).sum() >= length - 1e-9
    # shorter than visiting in the given order
    assert length < np.linalg.norm(np.diff(P, axis=0), axis=1).sum() / 3


def test_bad_requests_are_refused_by_name():
    m = survey_map(site(5))
    for bad in (0, -3, 2.5, True):
        with pytest.raises(InputError, match="add must be a positive integer") as info:
            plan(m, bad)
        assert info.value.field == "add"
    with pytest.raises(InputError, match="weight must be one of") as info:
        plan(m, 3, weight="most")
    assert info.value.field == "weight"
    with pytest.raises(InputError, match="candidates has 3 columns, but expected 2") as info:
        plan(m, 3, candidates=np.zeros((4, 3)))
    assert info.value.field == "candidates"
    with pytest.raises(InputError, match="first at row 1") as info:
        plan(m, 3, candidates=[[1.0, 2.0], [np.nan, 3.0]])
    assert info.value.field == "candidates[1][0]"
