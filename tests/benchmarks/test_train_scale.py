"""benchmarks/train_scale.py: the replicated UJIIndoorLoc keeps what a survey detects, the growth exponents,
and the summary's verdict on each stage."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from benchmarks import train_scale


def test_the_exponent_is_the_slope_on_log_log_axes():
    assert train_scale.exponent(2.0, 32.0, 20_000, 320_000) == pytest.approx(1.0)
    assert train_scale.exponent(1.0, 256.0, 20_000, 320_000) == pytest.approx(2.0)
    assert train_scale.exponent(None, 3.0, 1, 2) is None and train_scale.exponent(0.0, 3.0, 1, 2) is None


def test_uji_is_replicated_with_fresh_noise_on_detected_readings_only(tmp_path):
    rng = np.random.default_rng(0)
    rssi = np.where(rng.random((50, 3)) < 0.5, 100, rng.integers(-100, -30, (50, 3)))
    frame = pd.DataFrame(rssi, columns=["WAP001", "WAP002", "WAP003"])
    frame["LONGITUDE"], frame["LATITUDE"] = rng.normal(size=50), rng.normal(size=50)
    (tmp_path / "indoor_localization").mkdir()
    frame.to_csv(tmp_path / "indoor_localization" / "TrainingData.csv.gz", index=False)
    out = train_scale.uji_frame(120, tmp_path)
    assert len(out) >= 120 and list(out.columns) == list(frame.columns)
    waps = out[["WAP001", "WAP002", "WAP003"]].to_numpy()
    first, copy = waps[:50], waps[50:100]
    np.testing.assert_array_equal(first, rssi)  # the first copy is the survey itself
    np.testing.assert_array_equal(copy == 100, rssi == 100)  # what was not detected stays so
    seen = rssi != 100
    assert (copy[seen] != rssi[seen]).any() and (copy[seen] >= -104).all() and (copy[seen] <= 0).all()
    np.testing.assert_array_equal(out["LONGITUDE"].to_numpy()[50:100], frame["LONGITUDE"].to_numpy())
    assert len(train_scale.uji_frame(20, tmp_path)) == 20  # below the survey's rows: a subset


def test_the_summary_flags_a_stage_that_grows_faster_than_its_target():
    rows = [{"dataset": "survey", "rows": n, "wall_s": 10.0 * n / 20_000, "peak_mib": 100.0, "features": 200,
             "stages": {"centre selection": 5.0 * n / 20_000, "nle": 1.0 * (n / 20_000) ** 2}}
            for n in (20_000, 80_000, 320_000)]
    text = train_scale.summarise(rows, None, [])
    line = {l.split("|")[1].strip(): l for l in text.splitlines() if l.startswith("| ")}
    assert line["centre selection"].rstrip(" |").endswith("1.00") and "**2.00**" in line["nle"]
    assert math.isclose(float(line["wall"].split("|")[-2]), 1.0)
