"""``lmve-evaluate``: its figures equal those computed by hand from a real ``lmve-serve``'s answers on the same
rows; a walk that breaks the guarantee fails with exit status 1; bad input names the column and line and
writes nothing."""

from __future__ import annotations

import json

import numpy as np
import pytest

from models.bundle import load_bundle
from tests.training.walks import drifted, write_walk
from training.evaluate import main
from training.evaluation import GroupBy, curve, parse_levels, verdict


def post(client, path, payload):
    r = client.post(path, json=payload)
    assert r.status_code == 200, r.text
    return r.json()


def inside_ellipse(regions, Y):
    """By hand from the JSON answer: ``(y - c)^T shape^-1 (y - c) <= 1``."""
    out = []
    for reg, y in zip(regions, Y):
        r = np.asarray(y) - np.asarray(reg["center"])
        out.append(float(r @ np.linalg.solve(np.asarray(reg["shape"]), r)) <= 1.0)
    return np.asarray(out)


def errors(e):
    p50, p75, p95 = np.percentile(e, [50, 75, 95])
    return {"mean": e.mean(), "median": p50, "rmse": np.sqrt((e ** 2).mean()), "p75": p75, "cep": p50, "ce95": p95}


@pytest.mark.slow
def test_figures_equal_those_from_predict_region_answers(walk_repository, walk_server, tmp_path, capsys):
    from training.synthetic import make_queries

    root, _ = walk_repository
    model = load_bundle(root / "synthetic")
    X, Y = make_queries(300, seed=21)
    phone = np.arange(300) % 3
    stamp = 1_700_000_000 + 86_400 * (np.arange(300) // 150)  # two days
    walk = write_walk(tmp_path / "walk.csv", model, X, Y, {"PHONEID": phone, "TIMESTAMP": stamp})
    out = tmp_path / "report"
    code = main(["--bundle", str(root), "--model", "synthetic", "--csv", str(walk), "--group-by",
                 "PHONEID,day:TIMESTAMP", "--out", str(out)])
    figures = json.loads((out / "metrics.json").read_text())
    assert code == (0 if figures["verdict"]["holds"] else 1)
    assert {"report.md", "metrics.json", "reliability.png", "error_cdf.png"} <= {p.name for p in out.iterdir()}
    ans = post(walk_server, "/models/synthetic/predict-region", {"features": X.tolist()})
    regions = ans["regions"]
    inside = inside_ellipse(regions, Y)
    assert figures["method"] == ans["method"] and figures["n_rows"] == 300 and figures["level"] == model.coverage
    assert figures["coverage"] == pytest.approx(inside.mean(), abs=1e-12)
    centers = np.asarray([r["center"] for r in regions])
    err = np.linalg.norm(centers - Y, axis=1)
    for k, v in errors(err).items():
        assert figures["error"][k] == pytest.approx(v, rel=1e-9)
    assert figures["area_mean"] == pytest.approx(np.mean([r["volume"] for r in regions]), rel=1e-9)
    assert figures["accuracy_median"] == pytest.approx(np.median([r["semi_axes"][0] for r in regions]), rel=1e-9)
    from scipy.stats import binomtest

    ci = binomtest(int(inside.sum()), 300).proportion_ci(0.95, method="exact")
    assert figures["coverage_interval"] == pytest.approx([ci.low, ci.high])
    for p in range(3):  # per phone: the same figures over the phone's rows
        g = figures["groups"]["PHONEID"][str(p)]
        assert g["n_rows"] == 100 and g["coverage"] == pytest.approx(inside[phone == p].mean())
        assert g["error"]["p75"] == pytest.approx(np.percentile(err[phone == p], 75), rel=1e-9)
    assert sorted(figures["groups"]["day:TIMESTAMP"]) == ["2023-11-14", "2023-11-15"]
    # the reliability curve: each level's coverage is what /contains says at that level
    for r in figures["reliability"]:
        if r["attainable"] and r["level"] in (0.5, 0.8, 0.95):
            res = post(walk_server, "/models/synthetic/contains", {"features": X.tolist(), "points": Y.tolist(),
                                                                   "coverage": r["level"]})
            assert r["coverage"] == pytest.approx(np.mean([x["inside"] for x in res["results"]]))
    report = (out / "report.md").read_text()
    assert "Per PHONEID" in report and "Verdict" in report and "![reliability](reliability.png)" in report
    assert "coverage" in capsys.readouterr().out


def test_floor_figures_on_the_ground_equal_those_from_the_answers(walk_repository, walk_server, tmp_path):
    import pyproj

    root, survey = walk_repository
    model = load_bundle(root / "floors")
    X, Y, floor = survey.X[:240], survey.Y[:240], survey.meta["floor"][:240]
    walk = write_walk(tmp_path / "walk.parquet", model, X, Y, {"floor": floor})
    out = tmp_path / "report"
    main(["--bundle", str(root), "--model", "floors", "--csv", str(walk), "--out", str(out)])
    f = json.loads((out / "metrics.json").read_text())
    assert f["units"]["ground"] and f["units"]["error"] == "m"
    ans = post(walk_server, "/models/floors/predict-region", {"features": X.tolist()})
    geo = post(walk_server, "/models/floors/predict-region", {"features": X.tolist(), "format": "geojson"})
    regions = ans["regions"]
    in_set = np.asarray([any(item["floor"] == t for item in r["floors"]) for r, t in zip(regions, floor)])
    position = inside_ellipse(regions, Y)
    assert f["coverage"] == pytest.approx(np.mean(in_set & position))
    assert f["floors"]["floor_set_coverage"] == pytest.approx(in_set.mean())
    assert f["floors"]["position_coverage"] == pytest.approx(position.mean())
    top = np.asarray([r["floors"][0]["floor"] for r in regions])  # the set lists the most probable floor first
    assert f["floors"]["floor_hit_rate"] == pytest.approx(np.mean(top == floor))
    # errors: geodesic metres on WGS84 between the answer's centre and the truth (EPSG:3857 metres)
    to_ll = pyproj.Transformer.from_crs("EPSG:3857", "EPSG:4326", always_xy=True)
    centers = np.asarray([r["center"] for r in regions])
    lon_c, lat_c = to_ll.transform(centers[:, 0], centers[:, 1])
    lon_t, lat_t = to_ll.transform(Y[:, 0], Y[:, 1])
    err = pyproj.Geod(ellps="WGS84").inv(lon_c, lat_c, lon_t, lat_t)[2]
    for k, v in errors(np.asarray(err)).items():
        assert f["error"][k] == pytest.approx(v, rel=1e-9)
    ipin = np.percentile(np.asarray(err) + 15.0 * np.abs(top - floor), 75)
    assert f["floors"]["ipin_score"] == pytest.approx(ipin, rel=1e-9)
    props = [feat["properties"] for feat in geo["features"]]
    assert f["area_mean"] == pytest.approx(np.mean([p["area_m2"] for p in props]), rel=1e-9)
    assert f["accuracy_median"] == pytest.approx(np.median([p["accuracy_m"] for p in props]), rel=1e-9)


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
    from training.synthetic import make_queries

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
    from training.synthetic import make_queries

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
