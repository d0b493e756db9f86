"""``lmve-evaluate`` against a real ``lmve-serve``: its figures equal those computed by hand from the server's
answers on the same rows, in target units and, for a floor bundle with a CRS, on the ground."""

from __future__ import annotations

import json

import numpy as np
import pytest

from models.bundle import load_bundle
from tests.training.walks import write_walk
from training.commands.evaluate import main
from training.figures.verdict import verdict
from training.figures.walk import curve


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
    from training.data.synthetic import make_queries

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
