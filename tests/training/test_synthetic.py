"""training/synthetic.py: the generated data sets."""

import numpy as np
import pytest

from models.exceptions import InputError
from training.synthetic import make_visits


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
