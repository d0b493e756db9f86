"""/predict-region and /contains through the app (TestClient): maths and contract."""

import math

import numpy as np
import pytest

from models.bundle import load_bundle
from tests.service.conftest import features


def test_predict_region_contract_and_maths(client, test_rows, bundle_dir):
    X, _ = test_rows
    r = client.post("/predict-region", json={"features": features(X[:5]), "boundary_points": 16})
    assert r.status_code == 200
    body = r.json()
    assert body["method"] == "lmve" and body["fallback"] is False and body["coverage"] == 0.9
    model = load_bundle(bundle_dir)
    expected = model.predict_region(X[:5]).regions
    assert len(body["regions"]) == 5
    for i, reg in enumerate(body["regions"]):
        assert set(reg) >= {"center", "shape", "volume", "coverage", "method", "semi_axes", "orientation",
                            "boundary"}
        C = np.array(reg["shape"])
        np.testing.assert_allclose(C, expected.shapes[i], rtol=1e-12)
        np.testing.assert_allclose(reg["center"], expected.centers[i], rtol=1e-12)
        assert reg["volume"] == pytest.approx(math.pi * math.sqrt(np.linalg.det(C)), rel=1e-10)
        a, b = reg["semi_axes"]
        assert reg["volume"] == pytest.approx(math.pi * a * b, rel=1e-10)
        major = np.array([math.cos(reg["orientation"]), math.sin(reg["orientation"])])
        assert major @ np.linalg.solve(C, major) == pytest.approx(1 / a**2, rel=1e-8)
        poly = np.array(reg["boundary"])
        assert poly.shape == (17, 2) and np.array_equal(poly[0], poly[-1])


def test_contains_agrees_with_the_returned_region(client, test_rows):
    X, _ = test_rows
    X = X[:20]
    regions = client.post("/predict-region", json={"features": features(X), "boundary_points": 24}).json()["regions"]
    for scale, want in ((0.99, True), (1.01, False)):
        feats, pts = [], []
        for x, reg in zip(X, regions):
            c = np.array(reg["center"])
            for p in np.array(reg["boundary"])[:-1]:
                feats.append(list(x))
                pts.append(list(c + scale * (p - c)))
        res = client.post("/contains", json={"features": feats, "points": pts}).json()["results"]
        assert all(r["inside"] is want for r in res)
        d = np.array([r["distance"] for r in res])
        np.testing.assert_allclose(d, scale**2, rtol=1e-8)  # distance is quadratic in the radius


def test_p_value_agrees_with_inside(client, test_rows):
    X, Y = test_rows
    res = client.post("/contains", json={"features": features(X), "points": features(Y)}).json()["results"]
    for r in res:
        assert r["inside"] == (r["p_value"] > 1 - 0.9 + 1e-12)
        assert 0 < r["p_value"] <= 1


def test_coverage_override_uses_stored_scores(client, test_rows, bundle_dir):
    X, _ = test_rows
    model = load_bundle(bundle_dir)
    vols = {}
    for eta in (0.5, 0.8, 0.95):
        body = client.post("/predict-region", json={"features": features(X[:3]), "coverage": eta}).json()
        assert body["coverage"] == eta and body["regions"][0]["coverage"] == eta
        np.testing.assert_allclose(body["regions"][0]["shape"], model.predict_region(X[:3], coverage=eta).regions.shapes[0])
        vols[eta] = body["regions"][0]["volume"]
    assert vols[0.5] < vols[0.8] < vols[0.95]


@pytest.mark.parametrize("method", ["nle", "ge", "lmve"])
def test_method_endpoints_have_the_same_shapes(client, test_rows, method):
    X, Y = test_rows
    r = client.post(f"/{method}/predict-region", json={"features": features(X[:4])}).json()
    assert r["method"] == method and r["fallback"] is False and len(r["regions"]) == 4
    c = client.post(f"/{method}/contains", json={"features": features(X[:4]), "points": features(Y[:4])}).json()
    assert c["method"] == method and len(c["results"]) == 4
    assert {"inside", "distance", "p_value", "typicality"} == set(c["results"][0])


def test_ge_regions_are_one_shape_everywhere(client, test_rows):
    X, _ = test_rows
    regions = client.post("/ge/predict-region", json={"features": features(X[:6])}).json()["regions"]
    assert len({round(r["volume"], 9) for r in regions}) == 1


def test_primary_falls_back_when_the_bundle_has_no_lmve(tmp_path, trained_synthetic, make_client, test_rows):
    from models.bundle import save_bundle

    result, ds = trained_synthetic
    model = result.model
    no_lmve = type(model)(**{**model.__dict__, "selection": {},  # a bundle from before --primary: LMVE, NLE, GE
                             "methods": {k: v for k, v in model.methods.items() if k != "lmve"}})
    save_bundle(no_lmve, tmp_path / "b", dataset=ds.info)
    client = make_client(bundle=tmp_path / "b")
    X, Y = test_rows
    body = client.post("/predict-region", json={"features": features(X[:2])}).json()
    assert body["method"] == "nle" and body["fallback"] is True and "no LMVE" in body["fallback_reason"]
    body = client.post("/contains", json={"features": features(X[:2]), "points": features(Y[:2])}).json()
    assert body["method"] == "nle" and body["fallback"] is True
    assert client.post("/lmve/predict-region", json={"features": features(X[:2])}).status_code == 404


@pytest.fixture()
def nan_lmve_client(tmp_path, trained_synthetic, make_client):
    """A verified bundle whose LMVE network outputs NaN shapes for every row."""
    from copy import deepcopy

    from models.bundle import save_bundle

    result, ds = trained_synthetic
    model = deepcopy(result.model)
    lmve = model.methods["lmve"].shape_
    W, b = lmve.layers_[-1]
    lmve.layers_[-1] = (W, np.full_like(b, np.nan))
    save_bundle(model, tmp_path / "nan_lmve", dataset=ds.info)
    return make_client(bundle=tmp_path / "nan_lmve")


def test_contains_falls_back_exactly_like_predict_region(nan_lmve_client, test_rows):
    client = nan_lmve_client
    X, Y = test_rows
    rows, points = features(X[:7]), features(Y[:7])
    for route in ("", "/lmve"):
        region = client.post(f"{route}/predict-region", json={"features": rows}).json()
        contains = client.post(f"{route}/contains", json={"features": rows, "points": points}).json()
        for body in (region, contains):
            assert body["method"] == "nle" and body["fallback"] is True
            assert body["fallback_reason"] == "LMVE produced non-finite shapes for this batch"
        # the fallback's answers are NLE's own, point for point
        nle = client.post("/nle/contains", json={"features": rows, "points": points}).json()
        assert contains["results"] == nle["results"]
        shapes = [r["shape"] for r in client.post("/nle/predict-region", json={"features": rows}).json()["regions"]]
        assert [r["shape"] for r in region["regions"]] == shapes
    # and the inside flags agree with the served ellipses
    for reg, res, y in zip(region["regions"], contains["results"], Y[:7]):
        r = y - np.array(reg["center"])
        assert res["inside"] == bool(r @ np.linalg.solve(np.array(reg["shape"]), r) <= 1.0)
    metrics = client.get("/metrics").text
    assert 'lmve_fallbacks_total{method="nle",model="nan_lmve"} 4.0' in metrics


def test_method_not_allowed_and_named_model_routes(client, test_rows):
    X, _ = test_rows
    assert client.get("/predict-region").status_code == 405
    r = client.post("/models/synthetic/nle/contains", json={"features": features(X[:2]), "points": [[0, 0]] * 2})
    assert r.status_code == 200 and r.json()["method"] == "nle" and r.json()["model"] == "synthetic"
    text = client.get("/metrics").text
    assert 'route="/models/{name}/{method}/contains",status="200"' in text


@pytest.fixture(scope="module")
def coded_bundle(tmp_path_factory):
    """A survey whose phones miss readings weaker than -85 dBm (written +100, as UJIIndoorLoc does), with a
    temperature column that is not RSSI."""
    from models.bundle import save_bundle
    from training.data.datasets import Dataset, group_by_position
    from training.pipeline import TrainConfig, train
    from training.data.synthetic import make_survey

    X, Y, _, _, fn, tn = make_survey(n_points=60, readings=5, n_beacons=12, seed=3)
    X = np.where(X < -85.0, 100.0, np.round(X))
    temperature = np.random.default_rng(3).uniform(15, 25, size=(len(X), 1))
    ds = group_by_position(Dataset("coded", np.hstack([X, temperature]), Y, [*fn, "temperature"], tn, "x"))
    result = train(ds, TrainConfig(seed=0, methods=("ge", "nle"), typicality=False))
    path = tmp_path_factory.mktemp("coded") / "bundle"
    save_bundle(result.model, path, dataset=ds.info)
    return path, X


def test_null_is_not_heard_the_bundles_code_and_unseen_readings_are_warned_or_refused(make_client, coded_bundle):
    path, X = coded_bundle
    c = make_client(bundle=path)
    row = [*X[0].tolist(), 20.0]
    heard = next(j for j, v in enumerate(X[0]) if v < 0)
    code, null = list(row), list(row)
    code[heard], null[heard] = 100.0, None
    a = c.post("/predict-region", json={"features": [code]}).json()
    b = c.post("/predict-region", json={"features": [null]}).json()
    assert a["regions"] == b["regions"] and a["warnings"] == b["warnings"] == []
    res = c.post("/contains", json={"features": [null], "points": [[10.0, 10.0]]}).json()
    assert res["results"][0]["distance"] == c.post("/contains", json={"features": [code], "points": [[10.0, 10.0]]}
                                                  ).json()["results"][0]["distance"]
    # a feature that is not RSSI refuses null, naming it
    r = c.post("/predict-region", json={"features": [[*X[0].tolist(), None]]})
    assert r.status_code == 422 and "temperature" in r.json()["detail"] and r.json()["errors"][0]["field"] == "features[0][12]"
    # stronger than the survey ever read that beacon: warned, and refused when strict
    loud = list(row)
    loud[heard] = -1.0
    r = c.post("/predict-region", json={"features": [loud]})
    assert r.status_code == 200 and "stronger than any reading the survey saw" in r.json()["warnings"][0]
    strict = make_client(bundle=path, strict_inputs=True)
    r = strict.post("/predict-region", json={"features": [loud]})
    assert r.status_code == 422 and r.json()["errors"][0]["field"] == f"features[0][{heard}]"
    assert strict.post("/predict-region", json={"features": [null]}).status_code == 200  # null is no surprise


def test_null_on_a_survey_that_never_missed_is_said_and_documented(client, test_rows):
    X, _ = test_rows
    row = [None] + X[0].tolist()[1:]
    body = client.post("/predict-region", json={"features": [row]}).json()
    assert "not heard" in body["warnings"][0] and "beacon_01" in body["warnings"][0]
    schema = client.get("/openapi.json").json()["components"]["schemas"]
    items = schema["PredictRegionRequest"]["properties"]["features"]["items"]["items"]
    assert {t.get("type") for t in items["anyOf"]} == {"number", "null"}
    assert "not heard" in schema["PredictRegionRequest"]["properties"]["features"]["description"]
    assert "warnings" in schema["PredictRegionResponse"]["properties"]
