"""The RSSI "not detected" step: detection rules, the floor, round trips, and bad values."""

import numpy as np
import pytest

from models.exceptions import InputError, NotFittedError
from models.preprocessing import FLOOR_MARGIN_DB, RSSIFloor


def survey(code: float, m: int = 200, d: int = 6, seed: int = 0) -> np.ndarray:
    """RSSI readings in -95..-30 dBm with a share of 'not detected' codes."""
    rng = np.random.default_rng(seed)
    X = rng.integers(-95, -30, size=(m, d)).astype(float)
    X[rng.random((m, d)) < 0.4] = code
    return X


@pytest.mark.parametrize("code", [100.0, -200.0])
def test_codes_are_detected_and_mapped_below_the_weakest_reading(code):
    X = survey(code)
    step = RSSIFloor().fit(X)
    assert step.active and step.columns_.tolist() == list(range(X.shape[1]))
    weakest = X[X != code].min()
    assert step.weakest_ == weakest and step.floor_ == np.floor(weakest - FLOOR_MARGIN_DB)
    assert step.code_ == code
    out = step.transform(X)
    np.testing.assert_array_equal(out[X == code], step.floor_)
    np.testing.assert_array_equal(out[X != code], X[X != code])  # readings untouched
    assert out.max() <= 0 and out.min() == step.floor_
    assert X.max() == code or X.min() == code  # the input is not modified in place


def test_stray_codes_near_the_sentinel_are_mapped_too_and_an_explicit_code_maps_only_itself():
    X = survey(-200.0)
    X[0, 0], X[1, 1] = -199.0, -198.0  # ble_rssi has a few of these
    auto = RSSIFloor().fit(X).transform(X)
    assert auto[0, 0] == auto[1, 1] == RSSIFloor().fit(X).floor_
    # an explicit code: a column holding another out-of-range value is not RSSI
    exact = RSSIFloor(not_detected=-200.0).fit(X)
    assert 0 not in exact.columns_ and 1 not in exact.columns_ and exact.columns_.size == X.shape[1] - 2


def test_non_rssi_columns_are_left_alone():
    rng = np.random.default_rng(1)
    X = np.column_stack([survey(100.0, d=3), rng.uniform(0, 800, 200), rng.normal(size=200)])
    step = RSSIFloor().fit(X)
    assert step.columns_.tolist() == [0, 1, 2]
    out = step.transform(X)
    np.testing.assert_array_equal(out[:, 3:], X[:, 3:])
    # ordinary tabular data (no column is readings-or-codes with a code): the step does nothing
    plain = RSSIFloor().fit(rng.uniform(0, 800, (100, 4)))
    assert not plain.active and "none" in plain.describe()


def test_one_column_is_not_a_fingerprint():
    rng = np.random.default_rng(2)
    X = np.column_stack([survey(100.0, d=1), rng.uniform(1, 5, 200)])
    assert not RSSIFloor().fit(X).active
    assert RSSIFloor(min_columns=1).fit(X).columns_.tolist() == [0]


def test_a_floor_above_the_weakest_reading_is_refused_by_name():
    X = survey(100.0)
    with pytest.raises(InputError, match=r"--rssi-floor must lie below the weakest real reading \(-95 dBm\)") as exc:
        RSSIFloor(floor=-90.0).fit(X)
    assert exc.value.field == "rssi_floor"
    assert RSSIFloor(floor=-110.0).fit(X).floor_ == -110.0


def test_round_trip_through_arrays_and_unfitted_use():
    X = survey(100.0)
    step = RSSIFloor().fit(X)
    params, arrays = step.to_arrays()
    again = RSSIFloor.from_arrays(params, arrays)
    Q = survey(100.0, m=30, seed=5)
    np.testing.assert_array_equal(again.transform(Q), step.transform(Q))
    assert again.describe() == step.describe()
    with pytest.raises(NotFittedError):
        RSSIFloor().transform(Q)


def test_relative_cancels_a_phones_offset_and_keeps_not_detected_below_every_reading():
    X = survey(100.0)
    step = RSSIFloor(representation="relative").fit(X)
    heard = X != 100.0
    tops = np.where(heard, X, -np.inf).max(axis=1)
    assert step.reference_ == np.median(tops[np.isfinite(tops)])
    out = step.transform(X)
    # each heard reading: minus its row's strongest, plus the reference, clipped to the training range
    want = np.clip(X - tops[:, None] + step.reference_, step.weakest_, 0.0)
    np.testing.assert_array_equal(out[heard], want[heard])
    np.testing.assert_array_equal(out[~heard], step.floor_)
    assert out[heard].min() > step.floor_
    # a phone reading 6 dB weaker everywhere (its codes where they were) looks the same
    weaker = np.where(heard, X - 6.0, X)
    np.testing.assert_array_equal(step.transform(weaker), out)
    # a row that hears nothing stays all floor
    assert np.all(step.transform(np.full((1, X.shape[1]), 100.0)) == step.floor_)


@pytest.mark.parametrize("representation", ["powed", "exponential"])
def test_powed_and_exponential_are_monotone_with_not_detected_at_zero(representation):
    X = survey(-200.0)
    step = RSSIFloor(representation=representation).fit(X)
    out = step.transform(X)
    heard = X != -200.0
    np.testing.assert_array_equal(out[~heard], 0.0 if representation == "powed" else
                                  1.0 / np.exp(-step.floor_ / 24.0))
    order = np.argsort(X[heard])
    assert np.all(np.diff(out[heard][order]) >= 0) and np.all(out[heard] > out[~heard].max())
    assert out[heard].max() <= 1.0 + 1e-12


def test_a_bad_representation_is_refused_by_name_and_old_arrays_read_as_dbm():
    with pytest.raises(InputError) as err:
        RSSIFloor(representation="zscore").fit(survey(100.0))
    assert err.value.field == "rssi_representation" and "relative" in str(err.value)
    step = RSSIFloor(representation="relative").fit(survey(100.0))
    params, arrays = step.to_arrays()
    again = RSSIFloor.from_arrays(params, arrays)
    np.testing.assert_array_equal(again.transform(survey(100.0, seed=1)), step.transform(survey(100.0, seed=1)))
    old = {k: v for k, v in params.items() if k not in ("representation", "reference_")}  # a bundle before issue 70
    assert RSSIFloor.from_arrays(old, arrays).representation == "dbm"


@pytest.mark.parametrize("representation", ["dbm", "relative", "powed", "exponential"])
def test_rows_go_through_in_blocks_each_as_it_would_alone(representation, monkeypatch):
    """Many rows are fitted and transformed a block at a time: the fit finds what it finds in one block, every
    row comes out as it does alone, across the blocks' edges, and the input is left as it was."""
    import models.preprocessing as pre

    rng = np.random.default_rng(3)
    X = rng.uniform(-95, -30, (30, 6)).round()
    X[rng.random(X.shape) < 0.4] = 100.0
    X[0, 1] = 127.0  # a second code, rarer (within the sentinel's 10 %)
    X[:, 5] = rng.normal(size=30)  # not an RSSI column
    one = RSSIFloor(representation=representation).fit(X)
    monkeypatch.setattr(pre, "BLOCK_ROWS", 7)
    step = RSSIFloor(representation=representation).fit(X)
    assert one.to_arrays()[0] == step.to_arrays()[0] and (one.columns_ == step.columns_).all()
    assert step.code_ == 100.0 and step.columns_.tolist() == [0, 1, 2, 3, 4]
    before = X.copy()
    whole = step.transform(X)
    alone = np.vstack([step.transform(X[i:i + 1]) for i in range(len(X))])
    np.testing.assert_array_equal(whole, alone)
    np.testing.assert_array_equal(X, before)
    assert (whole[:, 5] == X[:, 5]).all() and not np.array_equal(whole[:, :5], X[:, :5])
