"""``lmve-predict`` against a real ``lmve-serve``: its rows equal the server's ``/predict-region`` and ``/contains``
answers row for row, its GeoJSON the server's GeoJSON answers."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from models.bundle import load_bundle
from tests.training.walks import write_walk
from training.commands.predict import main

CHUNK = 64


def post(client, path, payload):
    r = client.post(path, json=payload)
    assert r.status_code == 200, r.text
    return r.json()



def batches(client, path, X, **extra):
    """The service's answers for ``X`` in requests of :data:`CHUNK` rows (the command's batches)."""
    out = []
    for a in range(0, len(X), CHUNK):
        payload = {"features": X[a:a + CHUNK].tolist(), **{k: v[a:a + CHUNK].tolist() for k, v in extra.items()}}
        out.append(post(client, path, payload))
    return out



def test_rows_equal_predict_region_and_contains(walk_repository, walk_server, tmp_path):
    from training.data.synthetic import make_queries

    root, _ = walk_repository
    model = load_bundle(root / "synthetic")
    X, Y = make_queries(150, seed=31)
    walk = write_walk(tmp_path / "log.csv", model, X, Y, {"id": np.arange(150) * 7, "method": ["walk"] * 150})
    out = tmp_path / "regions.csv"
    assert main(["--bundle", str(root), "--model", "synthetic", "--input", str(walk), "--out", str(out),
                 "--contains", ",".join(model.target_names), "--chunk-rows", str(CHUNK), "--no-progress"]) == 0
    got = pd.read_csv(out)
    # every column that is not a feature or a target is carried, first, in the input's order; a name the answer
    # has already ("method") is carried as input_method
    assert list(got.columns[:2]) == ["id", "input_method"] and not set(model.feature_names) & set(got.columns)
    assert list(got["id"]) == list(np.arange(150) * 7) and set(got["input_method"]) == {"walk"}
    # no CRS: the radius is in target units, and its column says so
    assert "accuracy" in got.columns and "accuracy_m" not in got.columns
    regions = [r for ans in batches(walk_server, "/models/synthetic/predict-region", X) for r in ans["regions"]]
    for k, t in enumerate(model.target_names):
        np.testing.assert_array_equal(got[f"center_{t}"], [r["center"][k] for r in regions])
    for i, j in ((0, 0), (0, 1), (1, 1)):
        np.testing.assert_array_equal(got[f"shape_{i}{j}"], [r["shape"][i][j] for r in regions])
    np.testing.assert_array_equal(got["area"], [r["volume"] for r in regions])
    np.testing.assert_array_equal(got["typicality"], [r["typicality"] for r in regions])
    assert set(got["method"]) == {r["method"] for r in regions}
    geo = [f["properties"] for a in range(0, 150, CHUNK)
           for f in post(walk_server, "/models/synthetic/predict-region",
                         {"features": X[a:a + CHUNK].tolist(), "format": "geojson"})["features"]]
    np.testing.assert_array_equal(got["accuracy"], [p["accuracy_m"] for p in geo])
    results = [r for ans in batches(walk_server, "/models/synthetic/contains", X, points=Y) for r in ans["results"]]
    np.testing.assert_array_equal(got["inside"], [r["inside"] for r in results])
    np.testing.assert_array_equal(got["distance"], [r["distance"] for r in results])
    np.testing.assert_array_equal(got["p_value"], [r["p_value"] for r in results])
    bare = tmp_path / "bare.csv"
    assert main(["--bundle", str(root / "synthetic"), "--input", str(walk), "--out", str(bare), "--keep", "none",
                 "--no-progress"]) == 0
    assert list(pd.read_csv(bare).columns) == [c for c in got.columns if c not in ("id", "input_method", "inside",
                                                                                   "distance", "p_value")]



def test_floor_rows_and_geojson_equal_the_answers(walk_repository, walk_server, tmp_path):
    root, survey = walk_repository
    model = load_bundle(root / "floors")
    X = survey.X[:100]
    walk = write_walk(tmp_path / "log.parquet", model, X)
    out = tmp_path / "regions.geojson"
    assert main(["--bundle", str(root), "--model", "floors", "--input", str(walk), "--out", str(out),
                 "--chunk-rows", str(CHUNK), "--no-progress"]) == 0
    mine = json.loads(out.read_text())
    assert mine["type"] == "FeatureCollection" and mine["coordinates"] == "lonlat" and len(mine["features"]) == 100
    theirs = [f for a in range(0, 100, CHUNK) for f in post(walk_server, "/models/floors/predict-region",
                                                             {"features": X[a:a + CHUNK].tolist(),
                                                              "format": "geojson"})["features"]]
    for m, t in zip(mine["features"], theirs):
        assert m["geometry"] == t["geometry"]
        p, q = m["properties"], t["properties"]
        assert (p["area_m2"], p["accuracy_m"], p["typicality"]) == (q["area_m2"], q["accuracy_m"], q["typicality"])
        assert p["floor_set"] == ";".join(str(f["floor"]) for f in q["floors"])
        assert p["floor"] == q["floors"][0]["floor"] and p["floor_probability"] == q["floors"][0]["probability"]
        assert p["floor_set_size"] == len(q["floors"])
