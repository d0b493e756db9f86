import numpy as np
import pytest

from models.exceptions import InputError
from models.typicality import Typicality, conformal_p_values


def test_p_values_by_hand():
    cal = np.array([1.0, 2.0, 2.0, 3.0])
    assert conformal_p_values(cal, np.array([0.5, 2.0, 4.0])).tolist() == [1.0, 4 / 5, 1 / 5]
    assert conformal_p_values(cal, np.array([2.0]), u=np.array([0.0])).tolist() == [1 / 5]


def test_scores_are_mean_distances_to_the_nearest_reference_rows_in_the_projection():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 6))
    typ = Typicality(k=3, n_components=6).fit(X)
    Z, R = typ.project(X[:5]), typ.reference_.astype(np.float64)
    D = np.sqrt(((Z[:, None, :] - R[None, :, :]) ** 2).sum(axis=2))
    # float32 products: a distance of 0 (the row itself) comes out within about 1e-3 (its square within 1e-6)
    assert typ.scores(X[:5]) == pytest.approx(np.sort(D, axis=1)[:, :3].mean(axis=1), abs=2e-3)
    assert typ.scores(X[:3]) == pytest.approx(np.sort(D, axis=1)[:3, :3].mean(axis=1), abs=2e-3)  # compiled
    assert typ.scores(X[:5] + 3.0) == pytest.approx(
        np.sort(np.sqrt(((typ.project(X[:5] + 3.0)[:, None, :] - R[None, :, :]) ** 2).sum(axis=2)), axis=1)[:, :3]
        .mean(axis=1), rel=1e-5)  # away from the reference rows, float32 is exact to 1e-5
    assert np.sort(D, axis=1)[:, 0].max() < 1e-3 < np.sort(D, axis=1)[:, 1].min()  # a reference row is its own nearest


def test_a_held_out_query_is_typical_and_an_offset_one_is_not():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(1500, 10))
    typ = Typicality().fit(X[:1000]).calibrate(X[1000:1250])
    p_same, p_moved = typ.p_values(X[1250:]), typ.p_values(X[1250:] + 1.5)
    assert 0.4 < p_same.mean() < 0.6 and p_moved.mean() < 0.1


def test_across_units_a_calibration_row_leaves_its_own_unit_out():
    rng = np.random.default_rng(2)
    units = np.repeat(np.arange(6), 100)
    X = rng.normal(size=(600, 4)) + units[:, None] * 3.0  # each unit its own cloud
    typ = Typicality(k=2).fit(X, groups=units)
    own, other = typ.scores(X[:10]), typ.scores(X[:10], groups=units[:10])
    assert (other > own).all()  # without its own unit's rows, a row is far from everything
    with pytest.raises(InputError, match="fewer than k reference rows outside its own unit"):
        Typicality(k=2).fit(X[:100], groups=np.zeros(100, dtype=int)).calibrate(X[:5], groups=np.zeros(5, dtype=int))


def test_arrays_round_trip():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(400, 8))
    typ = Typicality(k=4, n_components=5, max_reference=100, seed=3).fit(X[:300]).calibrate(X[300:])
    again = Typicality.from_arrays(*typ.to_arrays())
    assert (again.k, again.n_components, again.max_reference, again.seed) == (4, 5, 100, 3)
    assert len(again.reference_) == 100 and again.components_.shape == (8, 5)
    assert np.array_equal(again.p_values(X[:50]), typ.p_values(X[:50]))


@pytest.mark.parametrize("field, value", [("k", 0), ("k", 2.0), ("n_components", 0), ("max_reference", 1)])
def test_bad_parameters_name_the_field(field, value):
    with pytest.raises(InputError) as err:
        Typicality(**{field: value}).fit(np.zeros((50, 3)))
    assert err.value.field == field


def test_edges_come_from_train_rows_and_the_shift_test_uses_them():
    rng = np.random.default_rng(6)
    X = rng.normal(size=(3000, 6))
    typ = Typicality(max_reference=500).fit(X[:2000]).calibrate(X[2000:2500])
    assert 100 < len(typ.edges_) <= 255 and np.all(np.diff(typ.edges_) > 0)
    test = typ.shift_test(delta=0.05)
    assert test.counts_.sum() == 500 and np.array_equal(test.edges, typ.edges_)
    test.update(typ.scores(X[2500:]))
    assert not test.alarm
    small = Typicality(max_reference=500).fit(X[:300])  # every train row a reference row: leave-one-out
    assert len(small.edges_) > 50 and small.edges_[0] > 0.0


@pytest.mark.parametrize("offset_db", [-4.0, 4.0])
def test_a_few_db_offset_of_a_new_phone_raises_the_alarm_and_held_out_positions_do_not(offset_db):
    """A fingerprint survey (training.data.synthetic, 5 phones within 3 dB of each other): the typicality step fitted
    on the train positions, calibrated at held-out positions; 300 readings at other held-out positions keep the
    test quiet, the same readings from a phone 4 dB off raise the alarm."""
    from training.data import synthetic

    X, _, point, _, _, _ = synthetic.make_survey(n_points=200, readings=10, seed=4)
    rng = np.random.default_rng(0)
    order = rng.permutation(200)
    train, cal, test = (np.isin(point, order[a:b]) for a, b in ((0, 140), (140, 170), (170, 200)))
    mean, sd = X[train].mean(axis=0), X[train].std(axis=0)
    typ = Typicality().fit((X[train] - mean) / sd).calibrate((X[cal] - mean) / sd)
    stream = rng.permutation(np.flatnonzero(test))
    quiet, shifted = typ.shift_test(), typ.shift_test()
    quiet.update(typ.scores((X[stream] - mean) / sd))
    shifted.update(typ.scores((X[stream] + offset_db - mean) / sd))
    assert not quiet.alarm and quiet.queries_ == 300
    assert shifted.alarm and shifted.alarm_at_ < 150, shifted.summary()


def test_a_rows_score_does_not_depend_on_its_batch():
    """The same score whether a row comes alone (the compiled loop), among a few hundred (argmin passes) or in
    a batch of several chunks, to float32's precision (each sums the float32 product in its own order); the
    conservative p-value is the by-hand one."""
    rng = np.random.default_rng(5)
    X = rng.normal(size=(2000, 12))
    typ = Typicality(k=5, n_components=8, max_reference=600).fit(X[:1500]).calibrate(X[1500:1700])
    Q = rng.normal(size=(4500, 12)) * 1.3
    whole = typ.scores(Q)
    alone = np.array([typ.scores(Q[i:i + 1])[0] for i in range(0, 4500, 97)])
    np.testing.assert_allclose(alone, whole[::97], rtol=1e-6)
    np.testing.assert_allclose(typ.scores(Q[:4]), whole[:4], rtol=1e-6)
    np.testing.assert_allclose(typ.scores(Q[:300]), whole[:300], rtol=1e-6)
    s, p = typ.assess(Q[:50])
    cal = typ.calibration_
    np.testing.assert_array_equal(s, whole[:50])
    assert p.tolist() == [(np.sum(cal >= v) + 1) / (len(cal) + 1) for v in s]
