"""The stacked centre: non-negative blend weights, honest out-of-fold blending, storage."""

import numpy as np
import pytest

from models.exceptions import InputError
from models.centres.stack import StackCentre, blend, fold_splits, stack_weights, stacked_out_of_fold


def test_weights_recover_an_exact_non_negative_blend_per_target():
    rng = np.random.default_rng(0)
    P = [rng.normal(size=(200, 2)) for _ in range(3)]
    W = np.array([[0.3, 0.0], [0.7, 0.2], [0.0, 0.9]])
    Y = blend(P, W)
    np.testing.assert_allclose(stack_weights(P, Y), W, atol=1e-10)
    # a member that only helps with a negative weight gets zero, never less
    assert (stack_weights(P, Y - 0.5 * P[2]) >= 0).all()


def test_all_zero_fit_falls_back_to_the_best_member():
    rng = np.random.default_rng(1)
    P = [rng.normal(size=(100, 1)), rng.normal(size=(100, 1))]
    members = [np.abs(P[0]) + 1, np.abs(P[1]) + 3]  # positive predictions of negative targets
    Y = -1.0 - 0.1 * P[1] ** 2
    np.testing.assert_array_equal(stack_weights(members, Y), [[1.0], [0.0]])  # the nearer member alone


def test_a_folds_blend_never_sees_its_own_targets():
    rng = np.random.default_rng(2)
    P = [rng.normal(size=(150, 2)) for _ in range(3)]
    Y = blend(P, np.array([[0.5, 0.1], [0.4, 0.6], [0.1, 0.3]])) + 0.1 * rng.normal(size=(150, 2))
    folds = fold_splits(150, 5, seed=0)
    out = stacked_out_of_fold(P, Y, folds)
    rest, fold = folds[2]
    Y2 = Y.copy()
    Y2[fold] += 100.0  # only this fold's targets change
    out2 = stacked_out_of_fold(P, Y2, folds)
    np.testing.assert_array_equal(out2[fold], out[fold])
    assert not np.allclose(out2[rest], out[rest])


def test_fold_splits_partition_the_rows_and_keep_groups_whole():
    groups = np.repeat(np.arange(30), 4)
    for g in (None, groups):
        folds = fold_splits(120, 5, seed=3, groups=g)
        assert np.array_equal(np.sort(np.concatenate([f for _, f in folds])), np.arange(120))
        if g is not None:
            for rest, fold in folds:
                assert not set(groups[rest]) & set(groups[fold])


@pytest.mark.slow
def test_stack_centre_blends_refitted_members_and_round_trips():
    from models import registry

    rng = np.random.default_rng(4)
    X = rng.normal(size=(300, 4))
    Y = np.column_stack([np.sin(2 * X[:, 0]) + X[:, 1], np.abs(X[:, 2]) + 0.1 * rng.normal(size=300)])
    c = StackCentre(members=("scaled", "knn", "hgb"), cv=4, random_state=0).fit(X, Y)
    assert (c.weights_ > 0).any(axis=1).all() and len(c.members_) == len(c.member_names_) == len(c.weights_)
    Q = rng.normal(size=(40, 4))
    members = [registry.centre(n).make().fit(X, Y).predict(Q) for n in c.member_names_]
    np.testing.assert_allclose(c.predict(Q), blend(members, c.weights_), rtol=1e-12, atol=1e-12)
    again = StackCentre.from_arrays(*c.to_arrays())
    np.testing.assert_array_equal(again.predict(Q), c.predict(Q))
    assert again.member_names_ == c.member_names_


def test_stack_refuses_bad_members_and_folds():
    X, Y = np.zeros((10, 2)), np.zeros((10, 2))
    with pytest.raises(InputError, match="members must be distinct centre names other than 'stack'"):
        StackCentre(members=("knn", "stack")).fit(X, Y)
    with pytest.raises(InputError, match=r"\(scaled, paper, knn, fingerprint, hgb, mlp, gp\); got \['knn', 'svm'\]") as info:
        StackCentre(members=("knn", "svm")).fit(X, Y)
    assert info.value.field == "members"
    arrays = StackCentre(members=("knn",)).fit(np.arange(20.0).reshape(10, 2), np.ones((10, 2))).to_arrays()
    arrays[0]["fitted"][0]["type"] = "StackCentre"  # a stack inside a stack is not a single kind
    with pytest.raises(InputError, match="a stacked centre's member has an unknown type 'StackCentre'"):
        StackCentre.from_arrays(*arrays)
    with pytest.raises(InputError, match=r"cv must be a fold count in \[2, 10\]; got 11"):
        StackCentre(members=("knn",), cv=11).fit(X, Y)
