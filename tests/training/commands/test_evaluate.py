"""``lmve-evaluate``: a walk that breaks the guarantee fails with exit status 1, the reliability curve flags
levels over Bonferroni, and bad input names the column and line and writes nothing (tests/e2e/test_evaluate.py
compares its figures with a real ``lmve-serve``'s answers)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from models.bundle import load_bundle
from tests.training.walks import drifted, write_walk
from training.commands.evaluate import main
from training.figures.verdict import verdict
from training.figures.walk import GroupBy, curve, parse_levels


def test_a_walk_that_breaks_the_guarantee_fails(walk_repository, tmp_path, capsys):
    root, _ = walk_repository
    model = load_bundle(root / "synthetic")
    X, Y = drifted(400, seed=8)
    walk = write_walk(tmp_path / "drift.csv", model, X, Y, {"PHONEID": np.arange(400) % 2})
    out = tmp_path / "report"
    assert main(["--bundle", str(root / "synthetic"), "--csv", str(walk), "--group-by", "PHONEID",
                 "--out", str(out)]) == 1
    f = json.loads((out / "metrics.json").read_text())
    assert not f["verdict"]["holds"] and f["coverage"] < 0.86 and f["p_value"] < 0.05
    assert "lmve-recalibrate" in f["verdict"]["advice"] and set(f["verdict"]["failing_groups"]["PHONEID"]) == {"0", "1"}
    assert "Coverage fails" in capsys.readouterr().out
    # the whole walk drifted: the service's shift test, fed the walk in order, sounds; a walk like the survey's not
    assert f["shift"]["alarm_at_row"] is not None and f["shift"]["max"] >= 100
    assert f["typicality_mean"] < 0.2
    # --fail-under replaces the verdict: below the bar exits 1, above it 0
    assert main(["--bundle", str(root / "synthetic"), "--csv", str(walk), "--fail-under", "0.5"]) == 0
    assert main(["--bundle", str(root / "synthetic"), "--csv", str(walk), "--fail-under", "0.85"]) == 1


def test_one_phone_8_db_off_fails_naming_the_phone_and_its_short_levels(walk_repository, tmp_path, capsys):
    """Half a walk read by a phone 8 dB off: at the bundle's 90 % every row and that phone hold (its regions are
    large), but below 90 % its coverage falls short; the verdict fails (exit 1), names the phone, its short levels,
    its low typicality and its errors far above the other phone's, and never calls the regions larger than needed."""
    from training.data.synthetic import make_queries

    root, _ = walk_repository
    model = load_bundle(root / "synthetic")
    X, Y = make_queries(240, seed=21)
    phone = np.arange(240) % 2
    walk = write_walk(tmp_path / "phones.csv", model, X - 8.0 * (phone == 1)[:, None], Y, {"PHONEID": phone})
    out = tmp_path / "report"
    assert main(["--bundle", str(root / "synthetic"), "--csv", str(walk), "--group-by", "PHONEID",
                 "--out", str(out)]) == 1
    f = json.loads((out / "metrics.json").read_text())
    good, bad = f["groups"]["PHONEID"]["0"], f["groups"]["PHONEID"]["1"]
    assert f["verdict"]["holds_at_level"] and bad["holds_level"]  # at 90 % nothing looks wrong
    assert not f["verdict"]["holds"] and f["verdict"]["failing_groups"] == {"PHONEID": ["1"]}
    assert bad["short_levels"] and not good["short_levels"] and max(bad["short_levels"]) < 0.9
    for r in bad["reliability"]:  # each short level's p-value is below 5 % over 2 phones x the attainable levels
        tests = 2 * sum(x["attainable"] for x in bad["reliability"])
        assert r["short"] == (r["attainable"] and r["p_value"] < 0.05 / tests)
    assert bad["typicality_mean"] < 0.2 < good["typicality_mean"]
    assert [o["group"] for o in f["error_outliers"]["PHONEID"]] == ["1"]
    text = capsys.readouterr().out
    short = ", ".join(f"{v:g}" for v in bad["short_levels"])
    assert f"PHONEID 1 (short at {short})" in text and "larger than the level needs" not in text
    assert "Errors far above the rest's: PHONEID 1" in text
    report = (out / "report.md").read_text()
    assert "Coverage per PHONEID and level" in report and "**short**" in report


def test_curve_flags_levels_over_bonferroni_and_the_verdict_never_says_larger_while_short():
    inside = {0.5: np.arange(100) < 38, 0.8: np.arange(100) < 68, 0.9: np.arange(100) < 95, 0.99: None}
    points = curve(inside)
    assert [r["short"] for r in points] == [True, True, False, False] and not points[-1]["attainable"]
    from scipy.stats import binomtest

    p = binomtest(68, 100, 0.8, alternative="less").pvalue
    assert points[1]["p_value"] == pytest.approx(p) and p < 0.05 / 3
    # over 20 groups the bar is 20 times lower: 68 of 100 at 0.8 is no longer short
    assert not curve(inside, families=20)[1]["short"] and p > 0.05 / 60
    figures = {"level": 0.9, "coverage": 0.99, "coverage_interval": [0.95, 1.0], "p_value": 1.0, "n_rows": 100,
               "reliability": points, "short_levels": [0.5, 0.8], "groups": {}, "error_outliers": {}}
    v = verdict(figures, None)
    assert not v["holds"] and v["holds_at_level"] and "short at 0.5, 0.8" in v["words"]
    assert "larger than the level needs" not in v["words"]
    v = verdict({**figures, "short_levels": [], "reliability": []}, None)
    assert v["holds"] and "larger than the level needs" in v["words"]


@pytest.mark.parametrize("case", ["missing", "nan-target", "text", "parquet-nan", "unknown-floor", "no-floor"])
def test_bad_walks_name_the_column_and_line_and_write_nothing(walk_repository, tmp_path, capsys, case):
    from training.data.synthetic import make_queries

    root, survey = walk_repository
    name = "floors" if case in ("unknown-floor", "no-floor") else "synthetic"
    model = load_bundle(root / name)
    if name == "floors":
        X, Y = survey.X[:50], survey.Y[:50]
        floor = survey.meta["floor"][:50].copy()
        floor[17] = 9
        extra = {} if case == "no-floor" else {"floor": floor}
    else:
        X, Y = make_queries(50, seed=3)
        extra = {}
    path = tmp_path / ("walk.parquet" if case == "parquet-nan" else "walk.csv")
    if case in ("nan-target", "parquet-nan"):
        Y = Y.copy()
        Y[11, 1] = np.nan
    write_walk(path, model, X, Y, extra)
    if case == "missing":
        text = path.read_text().splitlines()
        path.write_text("\n".join(",".join(line.split(",")[1:]) for line in text) + "\n")  # drop the first column
    if case == "text":
        lines = path.read_text().splitlines()
        cells = lines[5].split(",")
        cells[2] = "n/a"
        lines[5] = ",".join(cells)
        path.write_text("\n".join(lines) + "\n")
    out = tmp_path / "report"
    (out).mkdir()
    (out / "keep.txt").write_text("an earlier report")
    assert main(["--bundle", str(root / name), "--csv", str(path), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    expected = {"missing": ["feature column", model.feature_names[0]],
                "nan-target": [repr(model.target_names[1]), "line 13"],
                "text": [repr(model.feature_names[2]), "line 6", "n/a"],
                "parquet-nan": [repr(model.target_names[1]), "row 12"],
                "unknown-floor": ["floor", "line 19", "9"],
                "no-floor": ["floor column"]}[case]
    for word in expected:
        assert word in err, err
    assert [p.name for p in out.iterdir()] == ["keep.txt"]  # the earlier report is untouched
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".report")]


def test_levels_groupings_and_repositories_are_checked(walk_repository, tmp_path, capsys):
    assert parse_levels("0.5:0.99")[:3] == [0.5, 0.55, 0.6] and parse_levels("0.5:0.99")[-2:] == [0.95, 0.99]
    assert parse_levels("0.9,0.8") == [0.8, 0.9] and parse_levels("0.5:0.7:0.1") == [0.5, 0.6, 0.7]
    for bad in ("0.5:1.5", "x", "", "0.5:0.9:0"):
        with pytest.raises(Exception, match="--levels"):
            parse_levels(bad)
    assert [g.name for g in GroupBy.parse("PHONEID, day:TIMESTAMP")] == ["PHONEID", "day:TIMESTAMP"]
    with pytest.raises(Exception, match="day:COLUMN"):
        GroupBy.parse("week:TIMESTAMP")
    assert list(GroupBy("t", day=True).labels(np.array([0, 86_400_000]))) == ["1970-01-01", "1972-09-27"]
    assert list(GroupBy("t", day=True).labels(np.array([1_700_000_000_000]))) == ["2023-11-14"]  # milliseconds
    root, _ = walk_repository
    walk = tmp_path / "w.csv"
    walk.write_text("a,b\n1,2\n")
    assert main(["--bundle", str(root), "--csv", str(walk)]) == 2
    err = capsys.readouterr().err
    assert "--model" in err and "floors, synthetic" in err
    assert main(["--bundle", str(root), "--model", "nope", "--csv", str(walk)]) == 2
    assert "has no such model" in capsys.readouterr().err
    assert main(["--bundle", str(root / "synthetic"), "--csv", str(walk), "--group-by", "PHONEID"]) == 2
    assert "lacks the feature column" in capsys.readouterr().err


def test_a_walk_of_10_positions_by_12_readings_takes_its_intervals_over_the_positions(walk_repository, tmp_path,
                                                                                     capsys):
    """Ten readings of one position are one draw: the interval counts 10 positions, not 120 rows, and is wider."""
    from training.data.synthetic import make_new_positions
    from training.figures.coverage import binomial

    root, _ = walk_repository
    model = load_bundle(root / "synthetic")
    X, Y, point, _ = make_new_positions(10, 12, seed=5)
    walk = write_walk(tmp_path / "walk.csv", model, X, Y, {"point": point})
    figures = {}
    for unit in (None, "rows", "point"):
        out = tmp_path / f"r-{unit}"
        assert main(["--bundle", str(root / "synthetic"), "--csv", str(walk), "--out", str(out),
                     *(["--unit", unit] if unit else [])]) in (0, 1)
        figures[unit] = json.loads((out / "metrics.json").read_text())
    auto, rows, by_point = figures[None], figures["rows"], figures["point"]
    assert auto["interval_over"] == {"unit": "positions", "n": 10, "automatic": True}
    assert rows["interval_over"] == {"unit": "rows", "n": None, "automatic": False}
    assert by_point["interval_over"] == {"unit": "point units", "n": 10, "automatic": False}
    # 12 rows each: the positions' mean share is the row share; the interval is the binomial's over 10 draws
    assert auto["coverage"] == pytest.approx(rows["coverage"]) == pytest.approx(auto["coverage_rows"])
    assert auto["coverage_interval"] == pytest.approx(binomial(auto["coverage"] * 10, 10, auto["level"])["interval"])
    assert by_point["coverage_interval"] == pytest.approx(auto["coverage_interval"])
    wide = auto["coverage_interval"][1] - auto["coverage_interval"][0]
    assert wide > rows["coverage_interval"][1] - rows["coverage_interval"][0]
    assert auto["p_value"] >= rows["p_value"] or auto["coverage"] >= auto["level"]
    assert all(r["interval"] == pytest.approx(binomial(r["coverage"] * 10, 10, r["level"])["interval"])
               for r in auto["reliability"] if r["attainable"])
    text = capsys.readouterr().out
    assert "over the 10 positions, each weighing the same (the walk's readings repeat its positions)" in text
    assert "over the 120 rows" in text
