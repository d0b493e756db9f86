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
