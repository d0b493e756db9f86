"""``lmve-plan``: N positions to survey next from a bundle alone, as CSV (and PNG, GeoJSON), without torch."""

from __future__ import annotations

import csv
import json
import subprocess
import sys

import numpy as np
import pytest

from training.commands.plan import main

pytestmark = pytest.mark.slow


def read(path):
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    return rows[0], rows[1:]


def test_a_plan_is_written_inside_the_site_and_the_same_for_a_seed(survey_bundle, tmp_path, capsys):
    from models.bundle import load_bundle
    from models.survey_map import Extent, spacing

    path = survey_bundle[0]
    out = tmp_path / "plan.csv"
    args = ["--bundle", str(path), "--add", "9", "--out", str(out), "--seed", "4"]
    assert main([*args, "--plot", str(tmp_path / "plan.png"), "--geojson", str(tmp_path / "plan.geojson")]) == 0
    printed = capsys.readouterr().out
    assert "9 positions to survey next" in printed and "plan.png" in printed
    header, rows = read(out)
    assert header == ["order", "x_m", "y_m", "lon", "lat", "expected_area", "expected_error", "gain"]
    assert [int(r[0]) for r in rows] == list(range(1, 10))
    P = np.array([[float(r[1]), float(r[2])] for r in rows])
    survey = load_bundle(path).survey
    assert Extent.of_survey(survey.positions, spacing(survey.positions) / 2).contains(P).all()
    assert (tmp_path / "plan.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    doc = json.loads((tmp_path / "plan.geojson").read_text())
    assert sum(f["properties"]["kind"] == "proposal" for f in doc["features"]) == 9
    first = out.read_bytes()
    assert main(args) == 0 and out.read_bytes() == first


def test_candidates_restrict_the_plan_and_each_proposal_names_its_line(survey_bundle, tmp_path):
    path, result, _ = survey_bundle
    crs = result.model.crs
    rng = np.random.default_rng(0)
    P = result.model.survey.positions
    C = rng.uniform(P.min(0) - 10, P.max(0) + 10, size=(60, 2))
    lonlat = crs.to_lonlat(C)
    with open(tmp_path / "cand.csv", "w") as f:
        f.write("name,lat,lon\n" + "".join(f"c{i},{float(la)!r},{float(lo)!r}\n" for i, (lo, la) in enumerate(lonlat)))
    out = tmp_path / "plan.csv"
    assert main(["--bundle", str(path), "--add", "5", "--candidates", str(tmp_path / "cand.csv"), "--out",
                 str(out)]) == 0
    header, rows = read(out)
    assert header[-1] == "candidate_line"
    for r in rows:
        line = int(r[-1])
        np.testing.assert_allclose([float(r[1]), float(r[2])], C[line - 2], atol=1e-6)


def test_bad_input_is_named_and_nothing_is_written(survey_bundle, tmp_path, capsys):
    path = survey_bundle[0]
    (tmp_path / "cand.csv").write_text("x_m,y_m\n750010,4430010\n750011,here\n")
    out = tmp_path / "plan.csv"
    assert main(["--bundle", str(path), "--add", "1", "--candidates", str(tmp_path / "cand.csv"), "--out",
                 str(out)]) == 2
    err = capsys.readouterr().err
    assert "line 3, column y_m: expected a number, got 'here'" in err and not out.exists()
    (tmp_path / "cand.csv").write_text("east,north\n1,2\n")
    assert main(["--bundle", str(path), "--add", "1", "--candidates", str(tmp_path / "cand.csv"), "--out",
                 str(out)]) == 2
    assert "has columns east, north; the positions need x_m, y_m (or lon, lat)" in capsys.readouterr().err
    assert main(["--bundle", str(path), "--add", "0", "--out", str(out)]) == 2
    assert "add must be a positive integer" in capsys.readouterr().err
    (tmp_path / "b.geojson").write_text('{"type": "Point", "coordinates": [0, 0]}')
    assert main(["--bundle", str(path), "--add", "2", "--boundary", str(tmp_path / "b.geojson"), "--out",
                 str(out)]) == 2
    assert "holds no Polygon" in capsys.readouterr().err and not out.exists()


def test_a_boundary_polygon_keeps_the_plan_inside_it(survey_bundle, tmp_path):
    from models.survey_map import Extent

    path, result, _ = survey_bundle
    crs = result.model.crs
    P = result.model.survey.positions
    lo, hi = P.min(0), P.max(0)
    mid = (lo + hi) / 2
    west = np.array([[lo[0], lo[1]], [mid[0], lo[1]], [mid[0], hi[1]], [lo[0], hi[1]], [lo[0], lo[1]]])
    (tmp_path / "west.geojson").write_text(json.dumps({"type": "Feature", "properties": {}, "geometry": {
        "type": "Polygon", "coordinates": [crs.to_lonlat(west).tolist()]}}))
    out = tmp_path / "plan.csv"
    assert main(["--bundle", str(path), "--add", "6", "--boundary", str(tmp_path / "west.geojson"), "--out",
                 str(out)]) == 0
    _, rows = read(out)
    Q = np.array([[float(r[1]), float(r[2])] for r in rows])
    assert Extent.of_polygon(west).contains(Q).all() and (Q[:, 0] <= mid[0] + 1e-6).all()


def test_lmve_plan_needs_none_of_the_training_extra(survey_bundle, tmp_path):
    code = ("import sys; from training.commands.plan import main; "
            f"rc = main(['--bundle', {str(survey_bundle[0])!r}, '--add', '3', '--out', {str(tmp_path / 'p.csv')!r}]); "
            "assert rc == 0; print([m for m in ('torch', 'matplotlib', 'training.data.tables', 'training.figures.walk') "
            "if m in sys.modules])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    # what a serving install lacks (pandas and joblib load only as scikit-learn's own optional imports)
    assert done.stdout.strip().splitlines()[-1] == "[]"
