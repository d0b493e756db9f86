"""Shift protocols (python -m benchmarks.bench --protocol): disjoint parts that hold whole units, and both calibrations."""

import numpy as np
import pytest

from models.exceptions import InputError
from models.calibration.conformal import UncalibratableWarning
from training.data.datasets import load_dataset
from benchmarks.harness.shift import run_shift_split, shift_split, shift_tables


@pytest.fixture(scope="module")
def survey():
    ds = load_dataset("synthetic", n_samples=1500, seed=1)
    ds.meta["PHONEID"] = ds.meta["device"]
    return ds


@pytest.mark.parametrize("protocol", ["random", "leave-location-out", "leave-phone-out"])
def test_parts_are_disjoint_and_hold_whole_units(survey, protocol):
    parts = shift_split(survey, protocol, seed=3)
    names = ("test", "cal_groups", "cal_rows", "train")
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            assert not np.intersect1d(parts[a], parts[b]).size, (a, b)
    assert sum(len(parts[n]) for n in names) == len(survey.Y)
    pos = parts["positions"]
    # calibration positions are new to training; row calibration shares positions with it
    assert not np.intersect1d(pos[parts["cal_groups"]], pos[parts["train"]]).size
    assert np.isin(pos[parts["cal_rows"]], pos[parts["train"]]).mean() > 0.9
    if protocol != "random":
        units = parts["units"]
        assert not np.intersect1d(units[parts["test"]], units[parts["train"]]).size


def test_one_split_reports_every_calibration_and_the_table(survey):
    record = run_shift_split(survey, "leave-location-out", 0, ("ge", "nle"), cross_fit=3)
    assert set(record["results"]) == {f"{c}/{m}" for c in ("rows", "groups", "groups-pooled") for m in ("ge", "nle")}
    for key, r in record["results"].items():
        assert 0 <= r["coverage"] <= 1 and r["volume_paper"] > 0
        assert r["n_calibration"] == (record["rows"]["cal_rows"] if key.startswith("rows/") else r["n_calibration"])
    record["task"] = {"dataset": "synthetic"}
    table, md = shift_tables([record], ["rows", "groups"], "python -m benchmarks.bench ...", 1.0)
    assert list(table.columns) == ["dataset", "protocol", "calibration", "method", "n_splits", "coverage_mean",
                                   "coverage_std", "volume_mean", "volume_std"]
    assert len(table) == 4 and "leave-location-out" in md


def test_unknown_protocol_is_named(survey):
    with pytest.raises(InputError, match="protocol must be one of"):
        shift_split(survey, "leave-floor-out", 0)
    with pytest.raises(InputError, match="needs the column USERID"):
        shift_split(survey, "leave-user-out", 0)


def test_across_calibration_holds_its_phones_and_positions_out_of_its_centre(survey):
    with pytest.warns(UncalibratableWarning, match="only m = 4 are available"):  # the exact form, 4 phones
        record = run_shift_split(survey, "leave-phone-out", 1, ("ge",), cross_fit=2)
    across = record["across"]
    assert across["calibration_units"] >= 2 and across["rule"] == "group-weighted"  # 5 phones: few units
    for label in ("across-PHONEID/ge", "across-PHONEID-position-folds/ge"):
        r = record["results"][label]
        assert r["n_calibration"] == across["calibration_units"] and r["rule"] == "group-weighted"
        assert 0 <= r["coverage"] <= 1 and r["volume_paper"] > 0
    assert across["rows"]["train"] + across["rows"]["calibration"] < record["rows"]["train"] + record["rows"]["cal_rows"] \
        + record["rows"]["cal_groups"]  # the held-out phones' rows elsewhere and other phones at its positions wait
    record["task"] = {"dataset": "synthetic"}
    table, _ = shift_tables([record], ["groups", "across"], "python -m benchmarks.bench ...", 1.0)
    cv = across["cv"]  # cross-fitted: every non-test phone calibrates, scored by its unit fold's model
    assert cv["calibration_units"] > across["calibration_units"]
    for label, rule in (("across-PHONEID-cv/ge", "group-weighted"), ("across-PHONEID-cv-subsample/ge", "group-subsample")):
        r = record["results"][label]
        assert r["n_calibration"] == cv["calibration_units"] and r["rule"] == rule
    sub, pooled = record["results"]["across-PHONEID-cv-subsample/ge"], record["results"]["across-PHONEID-cv/ge"]
    assert cv["calibration_units"] < 9 and np.isfinite(pooled["alpha_q"])
    assert sub["alpha_q"] == np.inf and sub["coverage"] == 1.0  # under 9 units at 0.9 the exact form is unbounded
    assert set(table.calibration) == {"groups", "across-PHONEID", "across-PHONEID-position-folds", "across-PHONEID-cv",
                                      "across-PHONEID-cv-subsample"}
