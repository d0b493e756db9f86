"""training/data/synthetic.py: the generated data sets."""

import numpy as np
import pytest

from models.exceptions import InputError
from training.data.synthetic import make_visits


def test_extra_visit_features_carry_nothing_and_leave_the_rest_unchanged():
    X0, Y0, s0, names0, _ = make_visits(28, 80, 130, seed=2)
    X, Y, s, names, _ = make_visits(28, 80, 130, seed=2, extra_features=13)
    assert X.shape == (len(Y), 20) and 28 * 80 <= len(Y) <= 28 * 130
    assert names == [*names0, *(f"panel_{i}" for i in range(1, 14))]
    np.testing.assert_array_equal(X[:, :7], X0)
    np.testing.assert_array_equal(Y, Y0)
    np.testing.assert_array_equal(s, s0)
    panel = X[:, 7:]
    within = np.mean([panel[s == g].std(axis=0).mean() for g in range(28)])
    assert within == pytest.approx(0.5, rel=0.1)  # a subject's level plus visit noise of sd 0.5
    # nothing about the targets: no panel column explains more than chance of either target
    r = np.corrcoef(np.column_stack([panel, Y]).T)[:13, 13:]
    assert np.abs(r).max() < 0.25
    with pytest.raises(InputError, match="extra_features >= 0"):
        make_visits(28, extra_features=-1)


def test_heterogeneity_sets_how_far_apart_the_subjects_effects_spread():
    """The subject effect's spread is ``1 + h |z|``: at 0 every subject's effect has the same scale; at 3 the
    largest scales are several times the smallest. The features and the visits do not move."""
    X0, Y0, s0, _, _ = make_visits(400, 4, 4, seed=1)
    mean_free = {}
    for h in (0.0, 0.5, 3.0):
        X, Y, s, _, _ = make_visits(400, 4, 4, seed=1, heterogeneity=h)
        np.testing.assert_array_equal(X, X0)
        np.testing.assert_array_equal(s, s0)
        mean_free[h] = Y - make_visits(400, 4, 4, seed=1, heterogeneity=0.0)[1]  # the effect's excess over h=0
    assert np.abs(mean_free[0.0]).max() == 0.0
    np.testing.assert_array_equal(make_visits(400, 4, 4, seed=1, heterogeneity=0.5)[1], Y0)  # the default
    # the excess is h |z| times the unit effect: its spread across subjects grows with h
    assert np.std(mean_free[3.0]) == pytest.approx(6.0 * np.std(mean_free[0.5]), rel=1e-9)
    with pytest.raises(InputError, match="heterogeneity >= 0"):
        make_visits(28, heterogeneity=-1.0)


def test_new_positions_are_fresh_positions_of_the_same_site():
    from training.data.synthetic import FLOOR, make_new_positions, make_survey

    X, Y, point, device, _, _ = make_survey(n_points=30, readings=5, n_beacons=8, seed=3)
    for where in ("floor", "grid"):
        Xn, Yn, pn, dn = make_new_positions(30, 5, 8, survey_seed=3, seed=1, where=where)
        assert Xn.shape == (150, 8) and np.array_equal(pn, np.repeat(np.arange(30), 5))
        assert ((Yn >= 0) & (Yn <= FLOOR)).all()
        assert not (Yn[:, None, :] == Y[None, :, :]).all(axis=2).any()  # none is a surveyed position
        # another seed, other positions; the same seed, the same readings
        assert not np.array_equal(Yn, make_new_positions(30, 5, 8, survey_seed=3, seed=2, where=where)[1])
        assert np.array_equal(Xn, make_new_positions(30, 5, 8, survey_seed=3, seed=1, where=where)[0])
    # "grid": one position in each cell of the survey's grid, so each lies within a cell of a surveyed one
    _, Yg, _, _ = make_new_positions(30, 1, 8, survey_seed=3, seed=1, where="grid")
    surveyed = Y[::5]
    cell = np.array(FLOOR) / [7, 5]  # 30 points on a 7 x 5 grid over 40 x 25 m
    assert (np.abs(Yg - surveyed) <= 0.6 * cell + 0.01).all()
    with pytest.raises(InputError, match="where must be 'floor' or 'grid'"):
        make_new_positions(5, 1, where="walls")


def test_readings_at_chosen_points_are_taken_there_and_bad_points_are_refused_by_row():
    from training.data.synthetic import survey_at

    P = np.array([[1.0, 2.0], [30.5, 20.25]])
    X, Y, point, device = survey_at(P, readings=3, n_beacons=8, survey_seed=0, seed=1)
    assert X.shape == (6, 8) and np.array_equal(point, [0, 0, 0, 1, 1, 1])
    assert np.array_equal(Y, P[point]) and ((device >= 0) & (device < 5)).all()
    assert np.array_equal(X, survey_at(P, readings=3, n_beacons=8, survey_seed=0, seed=1)[0])
    with pytest.raises(InputError, match="first at row 1") as info:
        survey_at([[1.0, 2.0], [np.inf, 3.0]])
    assert info.value.field == "points[1][0]"
    with pytest.raises(InputError, match="points has 3 columns, but expected 2"):
        survey_at(np.zeros((2, 3)))
