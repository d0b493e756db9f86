"""The fingerprint centre: readings taken back from the standardised features, the representations, the
leave-units-out search that chooses the configuration, and the bundle round trip."""

import numpy as np
import pytest
from sklearn.preprocessing import StandardScaler

from models.centres.fingerprint import TEXTBOOK, FingerprintCentre, leave_out_neighbours, tune
from models.centres.representations import REPRESENTATIONS, ReadingSpace, represent
from models.exceptions import InputError
from models.preprocessing import RSSIFloor

AUTO = {"representation": "auto", "cutoff_db": "auto", "n_neighbors": "auto", "weights": "auto"}


def _survey(device_sd_db=8.0, seed=0):
    """A synthetic survey whose phones differ by ``device_sd_db``, readings at or under -95 dBm not heard (+100)."""
    from training.data.synthetic import make_survey

    X, Y, point, device, _, _ = make_survey(n_points=60, readings=10, n_beacons=16, n_devices=6,
                                            device_sd_db=device_sd_db, seed=seed)
    return np.where(X <= -95, 100.0, X), Y, point, device


def _space(X, representation="dbm"):
    step = RSSIFloor(representation=representation).fit(X)
    out = step.transform(X)
    scaler = StandardScaler().fit(out)
    return step, scaler, scaler.transform(out), ReadingSpace.of(step, scaler)


@pytest.mark.parametrize("step_representation", ["dbm", "relative", "powed", "exponential"])
def test_the_space_gives_back_the_readings_the_step_saw(step_representation):
    X, _, _, _ = _survey()
    step, _, Xs, space = _space(X, step_representation)
    readings = RSSIFloor(representation="relative" if step_representation == "relative" else "dbm").fit(X).transform(X)
    R = space.readings(Xs)
    heard = R > space.floor
    np.testing.assert_array_equal(heard, readings[:, step.columns_] > step.floor_)
    np.testing.assert_array_equal(R[~heard], step.floor_)  # "not heard" exactly the floor
    # the scaler's round trip (and the step's exp/log or power) rounds by a few ulps of the readings
    np.testing.assert_allclose(R, readings[:, step.columns_], rtol=0, atol=1e-9 * 120)
    assert ReadingSpace.of(None, None) is None


def test_every_representation_is_zero_where_nothing_is_heard_and_the_textbook_is_exponential():
    R = np.array([[-40.0, -109.0, -90.0], [-109.0, -109.0, -109.0], [-101.0, -60.0, -109.0]])
    for rep in REPRESENTATIONS:
        F = represent(R, rep, cutoff=-109.0, floor=-109.0, reference=-50.0)
        assert (F[R == -109.0] == 0).all() and (F[R > -109.0] > 0).all(), rep
    # Torres-Sospedra et al.'s exponential about the floor, less its constant: the same distances
    F = represent(R, "exponential", -109.0, -109.0, -50.0)
    paper = np.exp((R + 109.0) / 24) / np.exp(109.0 / 24)
    np.testing.assert_allclose(F - F[1], paper - paper[1], rtol=1e-12)
    # a cutoff 9 dB above -109 drops the -101 reading: row 2 hears only -60
    assert np.count_nonzero(represent(R, "dbm", -100.0, -109.0, -50.0)[2]) == 1
    # relative: a phone 10 dB stronger reads the same
    np.testing.assert_allclose(represent(R[:1] + np.array([10.0, 0.0, 10.0]), "relative", -109.0, -109.0, -50.0),
                               represent(R[:1], "relative", -109.0, -109.0, -50.0))
    with pytest.raises(InputError, match="representation must be one of"):
        represent(R, "cosine", -109.0, -109.0, -50.0)


def test_leave_out_neighbours_are_brute_forces_among_the_other_units():
    rng = np.random.default_rng(1)
    F, units = rng.normal(size=(300, 7)), rng.integers(0, 5, 300)
    near, dist = leave_out_neighbours(F, units, 4)
    D = np.linalg.norm(F[:, None] - F[None], axis=2)
    D[units[:, None] == units[None, :]] = np.inf
    want = np.argsort(D, axis=1)[:, :4]
    np.testing.assert_array_equal(near, want)
    assert (units[near] != units[:, None]).all()
    # float32 distances: |x|^2 ~ 7 x 4, eps 2^-24 scaled by the squared norms
    np.testing.assert_allclose(dist, np.take_along_axis(D, want, axis=1), rtol=0, atol=1e-3)


def test_held_out_by_phone_the_offset_free_representation_wins_by_position_it_does_not():
    X, Y, point, device = _survey()
    step = RSSIFloor().fit(X)
    R = step.transform(X)[:, step.columns_]
    args = (step.floor_, step.weakest_, step.reference_, AUTO)
    by_phone = tune(R, Y, device, *args)
    by_position = tune(R, Y, point, *args)
    assert by_phone["chosen"]["representation"] == "relative"  # the phones' 8 dB offsets cancel
    assert by_position["chosen"]["representation"] != "relative"  # at a known phone, gain is information
    for record in (by_phone, by_position):
        assert record["error"] <= record["textbook"]  # the textbook is a candidate
        errors = [c["error"] for c in record["candidates"]]
        assert errors == sorted(errors) and record["error"] == errors[0]
        assert {c["n_neighbors"] for c in record["candidates"]} == {1, 3, 5, 7, 9, 11}
    assert by_phone["units"] == 6 and by_position["units"] == 60
    assert by_phone["held_out"] == "each unit" and by_position["held_out"] == "5 folds of units"
    # a given value is kept: only the rest is searched
    fixed = tune(R, Y, device, step.floor_, step.weakest_, step.reference_, {**AUTO, "n_neighbors": 3})
    assert {c["n_neighbors"] for c in fixed["candidates"]} == {3}
    with pytest.raises(InputError, match="at least two units"):
        tune(R, Y, np.zeros(len(R)), *args)


def test_a_re_expression_must_beat_the_readings_by_more_than_the_units_spread():
    """Held out by phone (six phones), ``relative`` has the lowest error in both surveys. Phones 3 dB apart: it
    leads dbm's best by less than one standard error of the phones' paired differences, and dbm is kept; 8 dB
    apart: by more, and it is chosen. With many units (positions, folds) the rule does not apply."""
    for sd, expected in ((3.0, "dbm"), (8.0, "relative")):
        X, Y, point, device = _survey(device_sd_db=sd, seed=2)
        step = RSSIFloor().fit(X)
        R = step.transform(X)[:, step.columns_]
        args = (step.floor_, step.weakest_, step.reference_, AUTO)
        record = tune(R, Y, device, *args)
        rule = record["rule"]
        assert rule["name"] == "one standard error" and rule["units"] == 6
        assert rule["lowest"]["representation"] == "relative"
        assert rule["lowest"]["error"] == record["candidates"][0]["error"]
        assert (rule["difference"] <= rule["standard_error"]) == (expected == "dbm")
        assert record["chosen"]["representation"] == expected
        first = next(c for c in record["candidates"] if c["representation"] == expected)
        assert record["chosen"] == {key: first[key] for key in TEXTBOOK} and record["error"] == first["error"]
        assert tune(R, Y, point, *args)["rule"] is None


def test_the_one_standard_error_rule_reads_the_paired_per_unit_differences():
    from models.centres.fingerprint import _plainest

    candidates = [{"representation": "relative", "cutoff_db": 0.0, "n_neighbors": 3, "weights": "distance",
                   "error": 1.0, "index": 0},
                  {"representation": "dbm", "cutoff_db": 0.0, "n_neighbors": 5, "weights": "distance",
                   "error": 1.2, "index": 1}]
    steady = [np.ones(4), np.full(4, 1.2)]  # dbm behind by 0.2 at every unit: a standard error of 0
    chosen, rule = _plainest(candidates, steady)
    assert chosen["representation"] == "relative" and rule["standard_error"] == 0.0
    assert rule["difference"] == pytest.approx(0.2, rel=1e-12)
    spread = [np.ones(4), np.array([0.6, 1.8, 0.6, 1.8])]  # differences -0.4, 0.8, -0.4, 0.8: mean 0.2, se 0.3464
    chosen, rule = _plainest(candidates, spread)
    assert chosen["representation"] == "dbm"
    assert rule["standard_error"] == pytest.approx(np.sqrt(0.48) / 2, rel=1e-12)


def test_k_grows_with_the_readings_noise():
    """Positions along a corridor, three transmitters fading along it: quiet readings want few neighbours,
    noisy ones an average of many."""
    rng = np.random.default_rng(0)
    y = np.sort(rng.uniform(0, 100, 400))
    Y = np.column_stack([y, np.zeros_like(y)])
    clean = np.column_stack([-40 - 0.5 * y, -90 + 0.5 * y, -60 - 0.2 * y])
    fixed = {**AUTO, "representation": "dbm", "cutoff_db": 0.0}
    k = {sd: tune(clean + rng.normal(0, sd, clean.shape), Y, None, -120.0, -95.0, -50.0, fixed)["chosen"]["n_neighbors"]
         for sd in (0.1, 3.0)}
    assert k[0.1] < k[3.0] == 11


def test_the_centre_searches_the_readings_not_the_scaled_columns_and_round_trips():
    X, Y, point, device = _survey()
    X = np.column_stack([X, np.arange(len(X)) * 1000.0])  # an identifier: never part of a fingerprint
    step, scaler, Xs, space = _space(X)
    centre = FingerprintCentre(space=space, **TEXTBOOK).fit(Xs, Y)
    assert centre.tuning_ is None and centre.chosen_ == TEXTBOOK
    F = represent(space.readings(Xs), "exponential", step.floor_, step.floor_, step.reference_)
    from models.centres import KNNCentre

    np.testing.assert_allclose(centre.predict(Xs[:50]), KNNCentre(n_neighbors=3, max_rows=None).fit(F, Y).predict(F[:50]),
                               rtol=0, atol=1e-12)
    again = FingerprintCentre.from_arrays(*centre.to_arrays())
    np.testing.assert_array_equal(again.predict(Xs), centre.predict(Xs))
    assert again.n_features_in_ == X.shape[1]
    tuned = FingerprintCentre(space=space).fit(Xs, Y, groups=device)
    assert tuned.chosen_ == tuned.tuning_["chosen"] and tuned.tuning_["held_out"] == "each unit"
    np.testing.assert_array_equal(FingerprintCentre.from_arrays(*tuned.to_arrays()).predict(Xs), tuned.predict(Xs))


def test_without_readings_the_centre_is_a_knn_on_the_features():
    from models.centres import KNNCentre

    rng = np.random.default_rng(2)
    X, Y = rng.normal(size=(200, 4)), rng.normal(size=(200, 2))
    centre = FingerprintCentre(representation="dbm", cutoff_db=0.0, n_neighbors=5, weights="uniform").fit(X, Y)
    np.testing.assert_allclose(centre.predict(X[:40] + 0.1),
                               KNNCentre(n_neighbors=5, weights="uniform").fit(X, Y).predict(X[:40] + 0.1),
                               rtol=0, atol=1e-12)
    with pytest.raises(InputError, match="needs readings"):
        FingerprintCentre(representation="exponential").fit(X, Y)
    with pytest.raises(InputError, match="n_neighbors"):
        FingerprintCentre(n_neighbors=0).fit(X, Y)
    with pytest.raises(InputError, match="weights"):
        FingerprintCentre(weights="gaussian").fit(X, Y)
