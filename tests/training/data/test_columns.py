"""training/data/columns.py: which columns of a user's table are features when --features does not say."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from training.data.columns import infer_features, name_words, not_heard_code, why_not_a_feature


@pytest.mark.parametrize("name, words", [
    ("PHONEID", ["phone", "id"]), ("point_id", ["point", "id"]), ("pointId", ["point", "id"]),
    ("USER ID", ["user", "id"]), ("grid", ["grid"]), ("WAP001", ["wap", "001"]), ("Time-Stamp", ["time", "stamp"])])
def test_a_name_splits_into_its_words(name, words):
    assert name_words(name) == words


def survey(positions: int = 25, repeats: int = 6, seed: int = 0) -> tuple[pd.DataFrame, np.ndarray]:
    """A survey as users have it: readings b1..b4 (dBm, 100 where not heard), and beside them the position's
    number, a time, the phone, the floor, a constant site code, a note; a real-valued temperature and an
    integer orientation that vary within a position (features)."""
    rng = np.random.default_rng(seed)
    pos = np.repeat(np.arange(positions), repeats)
    m = len(pos)
    frame = {f"b{j}": np.where(rng.random(m) < 0.2, 100, rng.integers(-95, -35, m)) for j in range(1, 5)}
    frame.update(point_id=pos, timestamp=1_700_000_000 + np.arange(m) * 7, phone=rng.integers(0, 3, m),
                 FLOOR=pos // 10, site=np.full(m, 7), note=np.where(pos % 2, "corridor", "room"),
                 temperature=rng.normal(21, 1, m), orientation=rng.integers(2, 6, m))
    return pd.DataFrame(frame), pos


def test_identifiers_times_codes_constants_and_text_are_left_out_with_why():
    frame, pos = survey()
    features, left = infer_features(frame, list(frame.columns), pos)
    assert features == ["b1", "b2", "b3", "b4", "temperature", "orientation"]
    assert set(left) == {"point_id", "timestamp", "phone", "FLOOR", "site", "note"}
    assert "constant within each of the 25 positions" in left["point_id"]
    assert "constant within each of the 25 positions" in left["FLOOR"]
    assert "row counter or a time" in left["timestamp"]
    assert "named as an identifier (phone)" in left["phone"]
    assert left["site"] == "constant (7 on every row)" and left["note"].startswith("text ('room'")


def test_without_repeated_positions_values_and_names_still_tell():
    frame, _ = survey(positions=150, repeats=1)
    features, left = infer_features(frame, list(frame.columns), None)
    # point_id now increases and is distinct on every row; FLOOR is a code by its name
    assert "row counter or a time" in left["point_id"] and "named as an identifier (floor)" in left["FLOOR"]
    assert "temperature" in features and "orientation" in features


def test_the_not_heard_code_is_the_one_reading_columns_share():
    heard = [np.array([-60.0, 100.0, -80.0]), np.array([100.0, -50.0, 100.0]), np.array([-70.0, -71.0, 7.0])]
    assert not_heard_code(heard) == 100.0  # two columns vote 100, one votes 7
    assert not_heard_code([np.array([-60.0, -70.0]), np.array([3.0, 4.0])]) is None


def test_a_reading_column_stays_a_feature_even_constant_or_never_heard():
    never = np.full(40, 100.0)  # a transmitter never heard: the table's not-heard code on every row
    assert why_not_a_feature("WAP007", never, never, None, code=100.0) is None
    assert why_not_a_feature("site", never, never, None, code=None) == "constant (100 on every row)"
    steady = np.full(40, -70.0)
    assert why_not_a_feature("b9", steady, steady, None) is None
    # a column of real numbers is never left out for its name alone
    times = np.linspace(0.1, 3.7, 40)[::-1]
    assert why_not_a_feature("time_of_flight", times, times, None) is None
    # a bad cell in what may be a reading is not a reason: the loader names its line
    bad = np.array([-60.0, np.nan, -70.0])
    assert why_not_a_feature("b1", bad, bad, None) is None
