"""``lmve-recalibrate``: fresh calibration scores restore coverage under drift; errors write nothing."""

import json

import numpy as np
import pytest

from models.bundle import load_bundle
from training.commands.recalibrate import main
from training.data.synthetic import make_queries


def write_csv(path, model, X, Y, groups=None):
    head = [*model.feature_names, *model.target_names] + (["site"] if groups is not None else [])
    lines = [",".join(head)]
    for i in range(len(X)):
        row = [f"{v:.6g}" for v in (*X[i], *Y[i])] + ([str(groups[i])] if groups is not None else [])
        lines.append(",".join(row))
    path.write_text("\n".join(lines) + "\n")


def drifted(n, seed):
    """Readings between the survey's points after the radio environment drifted: every RSSI 8 dB
    weaker and 6 dB noisier."""
    X, Y = make_queries(n, seed=seed)
    rng = np.random.default_rng(seed + 100)
    return X - 8.0 + rng.normal(0, 6.0, size=X.shape), Y


def coverage(model, X, Y, method="nle"):
    return model.assess(X, Y, method=method).inside.mean()


def test_recalibration_restores_coverage_under_drift_and_keeps_the_parent(bundle_dir, tmp_path, capsys):
    parent = load_bundle(bundle_dir)
    before = {p.name: p.read_bytes() for p in bundle_dir.iterdir()}
    X_fresh, Y_fresh = drifted(400, seed=7)
    X_test, Y_test = drifted(2000, seed=8)
    write_csv(tmp_path / "fresh.csv", parent, X_fresh, Y_fresh)
    out = tmp_path / "recal"
    assert main([str(bundle_dir), str(tmp_path / "fresh.csv"), "--out", str(out)]) == 0
    assert "400 fresh rows" in capsys.readouterr().out
    new = load_bundle(out)
    stale = coverage(parent, X_test, Y_test)
    fresh = coverage(new, X_test, Y_test)
    assert stale < 0.8  # the drift broke the guarantee
    assert fresh >= 0.87  # 400 exchangeable calibration rows restore it (binomial sd at 2,000 rows: 0.7 %)
    rec = new.manifest["training"]["recalibrated"]
    assert rec["parent_bundle_id"] == parent.manifest["bundle_id"] and rec["rows"] == 400
    assert new.manifest["bundle_id"] != parent.manifest["bundle_id"]
    # same shapes and centre, new scores
    np.testing.assert_array_equal(new.predict_center(X_test[:5]), parent.predict_center(X_test[:5]))
    assert {p.name: p.read_bytes() for p in bundle_dir.iterdir()} == before


def test_a_survey_walk_is_grouped_by_position_unless_told_otherwise(bundle_dir, tmp_path, capsys):
    """A walk of 15 positions x 6 readings, recalibrated without --groups, keeps the guarantee for readings at new
    positions (15 groups, one score each), prints it before and after, and --groups none counts 90 rows; a walk of
    5 positions cannot attain 0.9 and is refused naming the highest level it attains."""
    from training.data.synthetic import make_new_positions

    parent = load_bundle(bundle_dir)
    X, Y, _, _ = make_new_positions(15, readings=6, seed=21)
    write_csv(tmp_path / "walk.csv", parent, X, Y)
    out = tmp_path / "grouped"
    assert main([str(bundle_dir), str(tmp_path / "walk.csv"), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "grouping by position (15 positions)" in text
    n_before = parent.methods[parent.primary_method].calibrator_.n_rows_
    assert (f"guarantee before: P >= 0.9 for a new row exchangeable with the calibration rows (calibrated on "
            f"{n_before} calibration rows; rule rows)") in text
    after = ("P >= 0.9 for a reading at a new position, a position drawn like those of walk.csv (calibrated on 15 "
             "fresh groups, 90 rows; rule group-subsample)")
    assert f"guarantee after:  {after}" in text
    calibration = json.loads((out / "manifest.json").read_text())["calibration"]
    assert calibration["guarantee"] == after and calibration["grouped_by"] == "position"
    assert calibration["rule"] == "group-subsample" and calibration["n_calibration"] == 15
    assert main([str(bundle_dir), str(tmp_path / "walk.csv"), "--out", str(tmp_path / "rows"), "--groups", "none"]) == 0
    rows = json.loads((tmp_path / "rows" / "manifest.json").read_text())["calibration"]
    assert rows["rule"] == "rows" and rows["n_calibration"] == 90 and "90 fresh rows; rule rows" in rows["guarantee"]
    X, Y, _, _ = make_new_positions(5, readings=6, seed=22)
    write_csv(tmp_path / "few.csv", parent, X, Y)
    capsys.readouterr()
    assert main([str(bundle_dir), str(tmp_path / "few.csv"), "--out", str(tmp_path / "few")]) == 2
    assert "5 fresh groups attain coverage at most 0.8333, below the bundle's 0.9" in capsys.readouterr().err
    assert not (tmp_path / "few").exists()


def test_every_option_says_what_it_does():
    from training.commands.recalibrate import build_parser

    assert all(action.help for action in build_parser()._actions)


def test_grouped_recalibration_and_too_few_groups(bundle_dir, tmp_path, capsys):
    parent = load_bundle(bundle_dir)
    X, Y = drifted(300, seed=9)
    groups = np.arange(300) % 40
    write_csv(tmp_path / "fresh.csv", parent, X, Y, groups)
    out = tmp_path / "grouped"
    assert main([str(bundle_dir), str(tmp_path / "fresh.csv"), "--out", str(out), "--groups", "site"]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["calibration"]["rule"] == "group-subsample" and manifest["calibration"]["n_calibration"] == 40
    write_csv(tmp_path / "few.csv", parent, X, Y, np.arange(300) % 5)
    bad = tmp_path / "few_out"
    assert main([str(bundle_dir), str(tmp_path / "few.csv"), "--out", str(bad), "--groups", "site"]) == 2
    assert "5 fresh groups attain coverage at most 0.8333" in capsys.readouterr().err
    assert not bad.exists()


@pytest.mark.parametrize("drop", ["feature", "target"])
def test_missing_columns_are_named_and_nothing_is_written(bundle_dir, tmp_path, capsys, drop):
    parent = load_bundle(bundle_dir)
    X, Y = drifted(50, seed=3)
    write_csv(tmp_path / "fresh.csv", parent, X, Y)
    text = (tmp_path / "fresh.csv").read_text().splitlines()
    col = 0 if drop == "feature" else len(parent.feature_names)
    name = text[0].split(",")[col]
    (tmp_path / "fresh.csv").write_text("\n".join(",".join(c for j, c in enumerate(line.split(",")) if j != col)
                                                  for line in text) + "\n")
    out = tmp_path / "out"
    assert main([str(bundle_dir), str(tmp_path / "fresh.csv"), "--out", str(out)]) == 2
    assert f"'{name}'" in capsys.readouterr().err
    assert not out.exists()
    assert main([str(bundle_dir), str(tmp_path / "fresh.csv"), "--out", str(bundle_dir)]) == 2


def test_a_floor_bundle_is_recalibrated_from_a_walk_with_its_floors(walk_repository, tmp_path, capsys):
    """The joint calibration is renewed too: its scores are the fresh rows' joint scores under the parent's maps,
    and a walk without the floor column is refused naming it. The walk is a Parquet file, as lmve-evaluate reads."""
    from tests.training.walks import write_walk

    root, survey = walk_repository
    parent = load_bundle(root / "floors")
    X, Y, floor = survey.X[:400], survey.Y[:400], survey.meta["floor"][:400]
    walk = write_walk(tmp_path / "walk.parquet", parent, X, Y, {"floor": floor})
    out = tmp_path / "recal"
    assert main([str(root / "floors"), str(walk), "--out", str(out), "--groups", "none"]) == 0
    new = load_bundle(out)
    codes = parent.floors.labels.encode(floor)
    Xs = parent.standardise(X)
    P = parent.floors.proba(Xs)
    for name, joint in new.floors.joint.items():
        position = parent.methods[name].shape_.conformity_scores(Xs, Y - parent.predict_center(X))
        expected = np.sort(parent.floors.joint_scores(name, P, codes, position))
        np.testing.assert_array_equal(joint.calibrator.scores_, expected)
        assert joint.calibrator.n_rows_ == 400 and joint.position_map is not None
    assert "guarantee" in new.manifest["floors"]
    no_floor = write_walk(tmp_path / "nofloor.csv", parent, X, Y)
    assert main([str(root / "floors"), str(no_floor), "--out", str(tmp_path / "never")]) == 2
    assert "nofloor.csv lacks the floor column(s) 'floor'" in capsys.readouterr().err
    assert not (tmp_path / "never").exists()
