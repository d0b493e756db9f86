"""models.floors: the rank map, the classifiers against scikit-learn, the labels and their errors, the
joint score and the floor sets."""

from __future__ import annotations

import numpy as np
import pytest

from models.exceptions import InputError
from models.floors import (FloorLabels, FloorModel, KNNFloors, LogisticFloors, RankMap, all_floor_scores,
                           floor_scores)


def test_rank_map_is_the_training_rank_and_inverts_exactly():
    train = np.array([0.0, 0.0, 0.0, 1.0, 2.0, 2.0, 5.0])
    G = RankMap.fit(train)
    # each distinct score at the share of training scores strictly below it
    np.testing.assert_allclose(G(np.array([0.0, 1.0, 2.0, 5.0])), [0.0, 3 / 7, 4 / 7, 6 / 7])
    assert G(-1.0) == 0.0 and G(0.5) == pytest.approx(1.5 / 7)
    assert G(10.0) == pytest.approx(1.0) and G(15.0) == pytest.approx(2.0)  # linear beyond, width 5
    assert G(np.inf) == np.inf
    s = np.linspace(0.0, 30.0, 301)
    assert np.all(np.diff(G(s)) > 0)  # strictly increasing from the smallest training score on
    for t in (0.0, 0.2, 3 / 7, 0.9, 1.0, 1.7):
        assert G(G.inverse(t)) == pytest.approx(t)
    with pytest.raises(InputError, match="finite"):
        RankMap.fit([np.inf])


def test_floor_scores_put_the_most_probable_class_at_zero():
    P = np.array([[0.7, 0.2, 0.1], [0.3, 0.3, 0.4]])
    np.testing.assert_allclose(all_floor_scores(P), [[0.0, 0.8, 0.9], [0.7, 0.7, 0.0]])
    np.testing.assert_allclose(floor_scores(P, np.array([1, 2])), [0.8, 0.0])


@pytest.fixture(scope="module")
def three_classes():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 4))
    codes = np.argmax(X[:, :3] + 0.5 * rng.normal(size=(300, 3)), axis=1)
    return X, codes


def test_knn_floors_answer_as_kneighborsclassifier(three_classes):
    from sklearn.neighbors import KNeighborsClassifier

    X, codes = three_classes
    ours = KNNFloors(n_neighbors=7).fit(X[:200], codes[:200], 3)
    theirs = KNeighborsClassifier(n_neighbors=7, weights="distance").fit(X[:200], codes[:200])
    np.testing.assert_allclose(ours.predict_proba(X[200:]), theirs.predict_proba(X[200:]), atol=1e-12)
    again = KNNFloors.from_arrays(*ours.to_arrays())
    np.testing.assert_array_equal(again.predict_proba(X[200:]), ours.predict_proba(X[200:]))


@pytest.mark.parametrize("present", [(0, 1, 2), (0, 2), (1,)])
def test_logistic_floors_answer_as_logisticregression(three_classes, present):
    from sklearn.linear_model import LogisticRegression

    X, codes = three_classes
    rows = np.isin(codes, present)
    ours = LogisticFloors().fit(X[rows], codes[rows], 3)
    P = ours.predict_proba(X)
    assert P.shape == (300, 3) and np.allclose(P.sum(axis=1), 1.0)
    absent = [k for k in range(3) if k not in present]
    assert np.all(P[:, absent] == 0.0)
    if len(present) > 1:
        theirs = LogisticRegression(max_iter=300).fit(X[rows], codes[rows]).predict_proba(X)
        np.testing.assert_allclose(P[:, list(present)], theirs, atol=1e-6)
    again = LogisticFloors.from_arrays(*ours.to_arrays())
    np.testing.assert_array_equal(again.predict_proba(X), P)


def test_labels_are_pairs_in_numeric_order_and_refuse_unknown_values():
    labels, codes = FloorLabels.of(["BUILDINGID", "FLOOR"], [1, 0, 0, 2, 1], [10, 2, 1, 0, 10])
    assert labels.roles == ("building", "floor")
    assert [labels.label(k) for k in range(len(labels))] == [
        {"building": 0, "floor": 1}, {"building": 0, "floor": 2}, {"building": 1, "floor": 10},
        {"building": 2, "floor": 0}]
    np.testing.assert_array_equal(codes, [2, 1, 0, 3, 2])
    np.testing.assert_array_equal(labels.encode([10, 1.0, "0"], buildings=[1, 0, 2]), [2, 0, 3])
    with pytest.raises(InputError) as err:
        labels.encode([3], buildings=[0])
    assert err.value.field == "floors[0]" and "0/3" in str(err.value) and "0/1" in err.value.expected
    with pytest.raises(InputError) as err:
        labels.encode([1])
    assert err.value.field == "buildings"
    with pytest.raises(InputError) as err:
        labels.encode([1, 2], buildings=[0])
    assert err.value.field == "buildings" and err.value.received == "1"
    with pytest.raises(InputError) as err:
        labels.encode([True], buildings=[0])
    assert err.value.field == "floors[0]"
    text, codes = FloorLabels.of(["floor"], ["ground", "first", "ground"])
    assert text.label(int(codes[0])) == {"floor": "ground"} and text.numeric == (False,)
    with pytest.raises(InputError) as err:
        text.encode(["ground"], buildings=["a"])
    assert err.value.field == "buildings"
    again = FloorLabels.from_arrays(*labels.to_arrays())
    assert again.columns == labels.columns and again.numeric == labels.numeric
    np.testing.assert_array_equal(again.values, labels.values)


def test_joint_threshold_and_sets_follow_the_calibration(three_classes):
    """The joint quantile is the conformal quantile of max(G_a(a), G_M(M)); sets and ellipse threshold
    are the parts of the region it defines."""
    from models.calibration.conformal import conformal_quantile

    X, codes = three_classes
    labels, _ = FloorLabels.of(["floor"], codes)
    clf = KNNFloors(5).fit(X[:150], codes[:150], 3)
    rng = np.random.default_rng(1)
    fm = FloorModel(clf, labels, RankMap.fit(floor_scores(clf.predict_proba(X[150:200]), codes[150:200])))
    P = clf.predict_proba(X[200:])
    M_train, M_cal = rng.chisquare(2, size=150), rng.chisquare(2, size=100)
    fm.conformalize("ge", M_train, P, codes[200:], M_cal)
    s = np.maximum(fm.floor_map(floor_scores(P, codes[200:])), RankMap.fit(M_train)(M_cal))
    t, alpha = fm.threshold("ge", 0.8)
    assert t == conformal_quantile(s, 0.8)
    assert alpha == pytest.approx(RankMap.fit(M_train).inverse(t))
    member = fm.sets(P, t)
    np.testing.assert_array_equal(member, fm.floor_map(all_floor_scores(P)) <= t)
    assert member[np.arange(len(P)), P.argmax(axis=1)].all()
    inside = member[np.arange(100), codes[200:]] & (M_cal <= alpha)
    np.testing.assert_array_equal(inside, s <= t + 1e-12)
    again = FloorModel.from_arrays(*fm.to_arrays())
    assert again.threshold("ge", 0.8) == (t, alpha)
    np.testing.assert_array_equal(again.sets(P, t), member)
