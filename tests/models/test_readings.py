"""models/readings.py: a null reading of an RSSI feature is "not heard" (the bundle's code, or below the weakest
reading the survey saw), a reading the survey never saw is warned about or refused, other features refuse null."""

from __future__ import annotations

import numpy as np
import pytest

from models.exceptions import InputError
from models.preprocessing import RSSIFloor
from models.readings import ReadingRanges, _as_surveyed

NAMES = ["ap1", "ap2", "ap3", "temperature"]


def survey(coded: bool) -> np.ndarray:
    """Three RSSI features (with the not-detected code 100 where ``coded``) and a temperature."""
    rng = np.random.default_rng(0)
    X = np.column_stack([rng.uniform(-90, -40, 50), rng.uniform(-85, -50, 50), rng.uniform(-95, -45, 50),
                         rng.uniform(15, 25, 50)])
    if coded:
        X[::4, 0] = 100.0
        X[1::5, 1] = 100.0
        X[:, 2] = 100.0  # never heard
    return X


def test_without_codes_null_is_below_the_weakest_reading_and_said():
    X = survey(coded=False)
    ranges = ReadingRanges().fit(X)
    assert list(ranges.rssi_) == [True, True, True, False]
    assert ranges.unheard_[0] == np.floor(X[:, 0].min() - 5.0) and np.isnan(ranges.unheard_[3])
    row = np.array([[np.nan, -60.0, -70.0, 20.0]])
    filled, warnings = ranges.check(row.copy(), NAMES)
    assert filled[0, 0] == ranges.unheard_[0] and filled[0, 1:].tolist() == [-60.0, -70.0, 20.0]
    assert len(warnings) == 1 and f"ap1 -> {ranges.unheard_[0]:g}" in warnings[0]
    with pytest.raises(InputError, match=r"features\[0\]\[3\] \(temperature\) is null") as info:
        ranges.check(np.array([[-60.0, -60.0, -70.0, np.nan]]), NAMES)
    assert (info.value.field, info.value.received) == ("features[0][3]", "null")


def test_with_codes_null_is_the_code_and_unseen_readings_are_named_or_refused():
    X = survey(coded=True)
    rssi = RSSIFloor().fit(X)
    ranges = ReadingRanges().fit(X, rssi)
    assert list(ranges.rssi_) == [True, True, True, False] and list(ranges.code_[:3]) == [100.0] * 3
    filled, warnings = ranges.check(np.array([[np.nan, np.nan, np.nan, 20.0]]), NAMES)
    assert filled[0, :3].tolist() == [100.0] * 3 and warnings == []  # the code: nothing to say
    strongest = X[X[:, 0] < 0, 0].max()
    odd = np.array([[strongest + 3.0, -60.0, -70.0, 99.0], [-200.0, -60.0, 100.0, 20.0]])
    _, warnings = ranges.check(odd.copy(), NAMES)
    text = warnings[0]
    assert "ap1 (2 rows, first row 0)" in text and f"stronger than any reading the survey saw of it ({strongest:g}" in text
    assert "ap3 (1 row, first row 0): -70 dBm, but the survey never heard ap3" in text
    assert "temperature" not in text  # not RSSI: no range to hold it to
    _, warnings = ranges.check(np.array([[-200.0, -60.0, 100.0, 20.0]]), NAMES)
    assert "-200 is outside the readings' range" in warnings[0] and "not-detected code (100)" in warnings[0]
    with pytest.raises(InputError, match=r"features\[0\]\[0\] \(ap1\).*LMVE_STRICT_INPUTS") as info:
        ranges.check(odd.copy(), NAMES, strict=True)
    assert info.value.received == f"{strongest + 3.0:g}"
    # what the survey saw passes silently, strict or not
    seen = X[:3].copy()
    assert ranges.check(seen, NAMES, strict=True)[1] == []


@pytest.mark.parametrize("value", [np.nan, "strongest+1", -121.0, 1e300, 100.0, "strongest", -120.0])
def test_the_compiled_pass_is_numpys_band_test_and_what_it_passes_needs_no_word(value):
    """check()'s one compiled pass = numpy's band test with the codes allowed, value by value; a value the
    survey never saw (or a null) fails it, and what it lets through would come back as sent, without a word,
    from the full check too."""
    X = survey(coded=True)
    ranges = ReadingRanges().fit(X, RSSIFloor().fit(X))
    strongest = X[X[:, 0] < 0, 0].max()
    v = {"strongest+1": strongest + 1, "strongest": strongest}.get(value, value)
    for i, j in ((0, 0), (5, 0), (3, 1), (5, 2), (2, 3)):
        rows = X[X[:, 0] < 0][:6].copy()
        rows[:, 2] = 100.0  # never heard: only its code passes
        rows[i, j] = v
        band = ((np.abs(rows - ranges._mid) <= ranges._half) | (rows == ranges.code_)).all()
        assert _as_surveyed(rows, ranges._mid, ranges._half, ranges.code_) == band
        if np.isnan(v) or (j < 3 and value in ("strongest+1", -121.0, 1e300)) or (j == 2 and v != 100.0):
            assert not band
        if band:  # the full check, past the fast path, agrees: nothing to fill or say
            ranges._half, half = np.full_like(ranges._half, -1.0), ranges._half
            out, said = ranges.check(rows.copy(), NAMES)
            ranges._half = half
            assert said == [] and np.array_equal(out, rows)


def test_the_ranges_survive_the_bundle_arrays():
    X = survey(coded=True)
    ranges = ReadingRanges().fit(X, RSSIFloor().fit(X))
    again = ReadingRanges.from_arrays(*ranges.to_arrays())
    for name in ("rssi_", "low_", "high_", "code_", "unheard_"):
        np.testing.assert_array_equal(getattr(again, name), getattr(ranges, name))


def test_a_model_answers_null_as_the_code_and_warns_of_an_unseen_value(trained_synthetic):
    """The synthetic survey never missed a reading: null becomes a value below the weakest reading, said; a
    not-detected code it never used (100) is answered as sent, with a warning, and refused when strict."""
    model = trained_synthetic[0].model
    _, ds = trained_synthetic
    row = ds.X[:1].copy()
    low = model.readings.unheard_[2]
    gap = row.copy()
    gap[0, 2] = np.nan
    listed = [[None if j == 2 else float(v) for j, v in enumerate(row[0])]]
    explicit = row.copy()
    explicit[0, 2] = low
    a, b, c = model.predict_region(gap), model.predict_region(listed), model.predict_region(explicit)
    np.testing.assert_array_equal(a.regions.shapes, c.regions.shapes)
    np.testing.assert_array_equal(b.regions.centers, c.regions.centers)
    assert a.warnings and "beacon" in a.warnings[0] and c.warnings == ()
    assert np.isnan(gap[0, 2])  # the caller's array is left as it was
    loud = row.copy()
    loud[0, 5] = 100.0
    assert "100 is outside the readings' range" in model.predict_region(loud).warnings[0]
    with pytest.raises(InputError) as info:
        model.assess(loud, [[1.0, 1.0]], strict=True)
    assert info.value.field == "features[0][5]"
