"""--calibrate-across (training.across): whole units out of training, the stated guarantee, the errors."""

import json
from dataclasses import replace

import httpx
import numpy as np
import pytest

from models.exceptions import InputError
from training import synthetic
from training.across import across_split, unit_codes
from training.cli import main
from training.datasets import Dataset, group_by_position, load_csv
from training.pipeline import TrainConfig, train


def survey(n_devices: int, n_points: int = 120, readings: int = 10, seed: int = 0) -> Dataset:
    """A survey whose readings carry a phone (``device``) and a user (two users share each phone)."""
    X, Y, _, device, fn, tn = synthetic.make_survey(n_points=n_points, readings=readings, n_devices=n_devices,
                                                     seed=seed)
    user = 2 * device + np.random.default_rng(seed).integers(0, 2, size=device.size)
    return group_by_position(Dataset("survey", X, Y, fn, tn, "x", meta={"PHONEID": device, "USERID": user}))


def shared(ds, column, a, b) -> np.ndarray:
    return np.intersect1d(ds.meta[column][a], ds.meta[column][b])


@pytest.mark.parametrize("columns", [["PHONEID"], ["USERID"], ["PHONEID", "USERID"]])
@pytest.mark.parametrize("seed", [0, 1])
def test_whole_units_and_positions_stay_out_of_training(columns, seed):
    ds = survey(12)
    split = across_split(ds, columns, seed, 0.9)
    parts = (split.train, split.calibration, split.test)
    assert not np.intersect1d(split.train, split.calibration).size and not np.intersect1d(split.train, split.test).size
    assert not np.intersect1d(split.calibration, split.test).size
    for held in (split.calibration, split.test):
        for c in columns:  # no value of any named column is shared with training
            assert not shared(ds, c, held, split.train).size, c
        assert not np.intersect1d(ds.groups[held], ds.groups[split.train]).size  # nor a position
    codes = unit_codes(ds, columns)
    assert not np.intersect1d(codes[split.calibration], codes[split.test]).size  # units: one part each
    a = split.across
    assert a["units"] == {"test": len(np.unique(codes[split.test])), "calibration": len(np.unique(codes[split.calibration])),
                          "train": len(np.unique(codes[split.train]))}
    assert a["rows"]["set_aside"] == len(ds.Y) - sum(map(len, parts)) > 0
    if columns == ["PHONEID", "USERID"]:  # a held-out user's phone leaves training with all its users
        assert not shared(ds, "PHONEID", split.calibration, split.train).size


def test_without_groups_every_other_unit_trains():
    ds = replace(survey(8), groups=None, grouping={})
    split = across_split(ds, ["PHONEID"], 0, 0.9)
    assert split.across["rows"]["set_aside"] == 0 and split.across["held_out_groups"] is None
    assert len(split.train) + len(split.calibration) + len(split.test) == len(ds.Y)
    assert "at a" not in split.across["guarantee"]


def test_guarantee_is_exact_with_enough_units_and_approximate_below():
    few, many = across_split(survey(12), ["PHONEID"], 0, 0.9), across_split(survey(150, 200), ["PHONEID"], 0, 0.9)
    assert few.across["units"]["calibration"] < 9 <= many.across["units"]["calibration"]
    assert (few.across["rule"], few.across["exact"]) == ("group-weighted", False)
    assert (many.across["rule"], many.across["exact"]) == ("group-subsample", True)
    assert few.across["guarantee"].startswith("P ~ 0.9 (approximate) for a reading from a new PHONEID unit at a "
                                              "position not in the training data")
    assert f"on {few.across['units']['calibration']} PHONEID units" in few.across["guarantee"]
    assert "the exact form needs 9 calibration units" in few.across["guarantee"]
    assert many.across["guarantee"].startswith("P >= 0.9 (exact)")
    # the level decides: at 0.5 one calibration unit fewer than 9 is plenty (m / (m + 1) >= 0.5 needs 1)
    assert across_split(survey(12), ["PHONEID"], 0, 0.5).across["rule"] == "group-subsample"


@pytest.mark.parametrize("n_devices", [1, 4])
def test_too_few_units_names_the_column_and_the_count(n_devices):
    ds = survey(n_devices)
    with pytest.raises(InputError, match=rf"--calibrate-across PHONEID: the rows hold {n_devices} distinct PHONEID "
                                         r"value.*at least 5 \(1 for test, 2 for calibration, 2 for training\)") as e:
        across_split(ds, ["PHONEID"], 0, 0.9)
    assert e.value.field == "--calibrate-across" and e.value.received == str(n_devices)


def test_unknown_column_lists_those_there_are():
    with pytest.raises(InputError, match="names FLOOR, which survey does not have .* it has PHONEID, USERID"):
        across_split(survey(8), ["PHONEID", "FLOOR"], 0, 0.9)


def test_train_calibrates_on_the_units_with_the_split_rule():
    ds = survey(12)
    result = train(ds, TrainConfig(methods=("ge", "nle"), centre="knn", calibrate_across=("PHONEID",), seed=2))
    split = result.split
    for reg in result.model.methods.values():
        cal = reg.calibrator_
        assert cal.rule == split.across["rule"] == "group-weighted"
        assert cal.n_calibration_ == split.across["units"]["calibration"]  # m counts phones, not rows or positions
        assert cal.n_rows_ == len(split.calibration)
    exact = train(ds, TrainConfig(methods=("ge",), centre="knn", calibrate_across=("PHONEID",), coverage=0.6))
    assert exact.model.methods["ge"].calibrator_.rule == "group-subsample"


def test_group_weighted_reaches_levels_the_few_units_cannot_with_the_finite_sample_rules():
    from models.calibration.conformal import SplitConformalCalibrator, UnattainableCoverageError

    scores = np.array([1.0, 2.0, 3.0, 4.0, 10.0, 20.0])
    groups = np.array([0, 0, 0, 0, 1, 1])  # unit 0 weighs 1/8 per row, unit 1 1/4 per row
    cal = SplitConformalCalibrator("group-weighted").fit(scores, groups)
    assert cal.max_coverage == 1.0
    assert cal.quantile(0.5) == 4.0 and cal.quantile(0.51) == 10.0 and cal.quantile(0.9) == 20.0
    # containment at level eta <=> p-value > 1 - eta
    for eta in (0.3, 0.5, 0.7, 0.9):
        q = cal.quantile(eta)
        assert cal.p_value([q])[0] > 1 - eta >= cal.p_value([np.nextafter(q, np.inf)])[0]
    assert cal.level_of(4.0) == 0.5 and cal.level_of(100.0) == 1.0
    with pytest.raises(UnattainableCoverageError):
        SplitConformalCalibrator("group-pooled").fit(scores, groups).check_level(0.9)


def test_cli_states_the_guarantee_in_the_report_the_manifest_and_get_model(tmp_path, capsys):
    from tests.service.test_e2e import KEY, free_port, start_server, wait_alive

    ds = survey(10, n_points=80, readings=8)
    header = ",".join([*ds.feature_names, *ds.target_names, "phone"])
    body = np.column_stack([ds.X, ds.Y, ds.meta["PHONEID"]])
    csv = tmp_path / "site.csv"
    csv.write_text(header + "\n" + "\n".join(",".join(f"{v:g}" for v in row) for row in body))
    out = tmp_path / "run"
    assert main(["--csv", str(csv), "--targets", "x_m,y_m", "--calibrate-across", "phone", "--methods", "ge,nle",
                 "--centre", "knn", "--out", str(out), "--quiet"]) == 0
    printed = capsys.readouterr().out
    manifest = json.loads((out / "bundle" / "manifest.json").read_text())
    words = manifest["calibration"]["guarantee"]
    assert words.startswith("P ~ 0.9 (approximate) for a reading from a new phone unit at a position not in the "
                            "training data")
    assert manifest["calibration"]["across"]["columns"] == ["phone"]
    assert manifest["feature_names"] == ds.feature_names  # the label column is no feature
    assert f"guarantee: {words}" in printed and "calibrated across: phone: 10 units" in printed
    assert words in (out / "report.md").read_text()
    port = free_port()
    proc = start_server(out / "bundle", port, tmp_path / "server.log")
    try:
        base = f"http://127.0.0.1:{port}"
        wait_alive(base, proc)
        info = httpx.get(f"{base}/model", headers={"X-API-Key": KEY}).json()
        assert info["calibration"]["guarantee"] == words and info["calibration"]["across"]["exact"] is False
    finally:
        proc.terminate()
        proc.wait(10)


def test_csv_label_columns_are_checked(tmp_path):
    csv = tmp_path / "site.csv"
    csv.write_text("a,b,x,y,phone\n" + "\n".join(f"{i},{i % 7},{i},{i * 2},{'p' + str(i % 6) if i != 40 else ''}"
                                                 for i in range(100)))
    with pytest.raises(InputError, match=r"column 'phone' is empty at line 42") as e:
        load_csv(csv, ["x", "y"], meta_columns=["phone"])
    assert e.value.field == "--calibrate-across"
    with pytest.raises(InputError, match=r"column\(s\) \['handset'\] not found"):
        load_csv(csv, ["x", "y"], meta_columns=["handset"])
