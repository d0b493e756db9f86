"""Floor bundles over HTTP (issue 40): a real ``lmve-serve`` on loopback answers each ellipse with its
floor set and the joint guarantee, ``/contains`` takes a floor (and building) per point, bad floors get
a 422 naming the field, and a bundle without floors answers exactly as before (no new keys)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from tests.conftest import train_and_save
from tests.e2e.servers import serving_repository


@pytest.fixture(scope="module")
def floor_bundles(tmp_path_factory):
    """Two bundles of the built-in three-floor survey: floors alone (GE, NLE), and (building, floor) pairs
    with a text building (GE); and a survey drawn again for queries."""
    from training.data.datasets import load_dataset
    from training.pipeline import TrainConfig

    root = tmp_path_factory.mktemp("floor-bundles")
    ds = load_dataset("floors", seed=0)
    train_and_save(ds, TrainConfig(seed=0, methods=("ge", "nle"), floor_column="floor", use_groups=False),
                   root / "floors")
    paired = replace(ds, meta={**ds.meta, "building": np.array(["A"] * len(ds.Y))})
    train_and_save(paired, TrainConfig(seed=0, methods=("ge",), fallbacks=False, floor_column="floor", building_column="building",
                                       use_groups=False), root / "pairs")
    return root, load_dataset("floors", seed=7)


@pytest.fixture(scope="module")
def served(floor_bundles, tmp_path_factory):
    """``lmve-serve`` over a repository of the two floor bundles (the floor-only one the default)."""
    root, _ = floor_bundles
    with serving_repository(root, "floors", tmp_path_factory.mktemp("logs")) as client:
        yield client


@pytest.mark.slow
def test_predict_region_answers_floor_sets_with_the_joint_ellipse(served, floor_bundles):
    from models.bundle import load_bundle

    root, ds = floor_bundles
    model = load_bundle(root / "floors")
    X = ds.X[:40]
    r = served.post("/predict-region", json={"features": X.tolist()})
    assert r.status_code == 200, r.text
    body = r.json()
    answer = model.predict_region(X)
    assert body["guarantee"] == model.manifest["floors"]["guarantee"]
    assert "true floor in `floors` and true position in the ellipse" in body["guarantee"]
    assert [row["floors"] for row in body["regions"]] == answer.floors.rows()
    for row, member, p in zip(body["regions"], answer.floors.member, answer.floors.proba):
        assert [f["floor"] for f in row["floors"]] == sorted(np.flatnonzero(member).tolist(), key=lambda k: -p[k])
        np.testing.assert_allclose([f["probability"] for f in row["floors"]], np.sort(p[member])[::-1])
    # the ellipse is the joint one (its threshold, not the position calibration's own)
    _, alpha = model.floors.threshold(body["method"], model.coverage)
    np.testing.assert_allclose([row["shape"] for row in body["regions"]], answer.regions.shapes)
    assert answer.regions.alpha_q == alpha


def test_a_higher_level_gives_larger_floor_sets_and_ellipses(served, floor_bundles):
    _, ds = floor_bundles
    X = ds.X[:60].tolist()
    low = served.post("/predict-region", json={"features": X, "coverage": 0.6}).json()["regions"]
    high = served.post("/predict-region", json={"features": X, "coverage": 0.95}).json()["regions"]
    assert all(len(h["floors"]) >= len(lo["floors"]) and h["volume"] > lo["volume"] for h, lo in zip(high, low))
    assert sum(len(h["floors"]) for h in high) > sum(len(lo["floors"]) for lo in low)


def test_contains_with_floors_is_floor_set_membership_and_containment(served, floor_bundles):
    root, ds = floor_bundles
    X, Y, floor = ds.X[:50], ds.Y[:50], ds.meta["floor"][:50]
    wrong = (floor + 1) % 3
    regions = served.post("/predict-region", json={"features": X.tolist()}).json()["regions"]
    for floors in (floor, wrong):
        r = served.post("/contains", json={"features": X.tolist(), "points": Y.tolist(), "floors": floors.tolist()})
        assert r.status_code == 200, r.text
        body = r.json()
        assert "true floor" in body["guarantee"]
        for row, region, f in zip(body["results"], regions, floors.tolist()):
            in_set = f in [c["floor"] for c in region["floors"]]
            assert row["floor_inside"] is in_set
            assert row["inside"] is (in_set and row["distance"] <= 1.0)
    # without floors: the point alone against the same ellipse, and no floor_inside
    body = served.post("/contains", json={"features": X.tolist(), "points": Y.tolist()}).json()
    assert all("floor_inside" not in row for row in body["results"])
    assert [row["inside"] for row in body["results"]] == [row["distance"] <= 1.0 for row in body["results"]]


def test_joint_coverage_over_http_on_new_readings(served, floor_bundles):
    """1,000 readings of a new draw of the building at 90 %: joint coverage within a binomial margin of
    [0.9, 0.9 + 2 / (m + 1)] (a loose check: the exact one is the 200-split test of tests/training/pipeline/test_floors.py)."""
    _, ds = floor_bundles
    rows = np.random.default_rng(0).choice(len(ds.Y), size=1000, replace=False)
    body = served.post("/contains", json={"features": ds.X[rows].tolist(), "points": ds.Y[rows].tolist(),
                                          "floors": ds.meta["floor"][rows].tolist()}).json()
    m = served.get("/model").json()["floors"]["metrics"]
    assert set(m) == {"ge", "nle"}
    covered = np.mean([row["inside"] for row in body["results"]])
    n_cal = served.get("/model").json()["methods"][body["method"]]["n_calibration"]
    margin = 3 * np.sqrt(0.09 / len(rows))
    assert 0.9 - margin <= covered <= 0.9 + 2 / (n_cal + 1) + margin, (covered, n_cal)
    assert np.mean([row["floor_inside"] for row in body["results"]]) >= covered


def test_building_floor_pairs_and_bad_floors_get_422_naming_the_field(served, floor_bundles):
    _, ds = floor_bundles
    X, Y = ds.X[:3].tolist(), ds.Y[:3].tolist()
    r = served.post("/models/pairs/predict-region", json={"features": X})
    assert r.status_code == 200
    assert all(c["building"] == "A" and c["floor"] in (0, 1, 2) for row in r.json()["regions"] for c in row["floors"])
    ok = served.post("/models/pairs/contains", json={"features": X, "points": Y, "floors": [0, "1", 2.0],
                                                     "buildings": ["A", "A", "A"]})
    assert ok.status_code == 200, ok.text
    assert all(isinstance(row["floor_inside"], bool) for row in ok.json()["results"])

    def problem(path, **extra):
        r = served.post(path, json={"features": X, "points": Y, **extra})
        assert r.status_code == 422, r.text
        assert r.headers["content-type"].startswith("application/problem+json")
        return r.json()

    err = problem("/contains", floors=[0, 7, 1])
    assert err["errors"][0]["field"] == "floors[1]" and err["errors"][0]["received"] == "7"
    assert "0, 1, 2" in err["errors"][0]["expected"]
    assert problem("/contains", floors=[0, 1])["errors"][0]["field"] == "floors"
    assert problem("/contains", floors=[0, 1, 2], buildings=["A", "A", "A"])["errors"][0]["field"] == "buildings"
    assert problem("/contains", floors=[0, [1], 2])["errors"][0]["field"].startswith("floors")
    assert problem("/models/pairs/contains", floors=[0, 1, 2])["errors"][0]["field"] == "buildings"
    err = problem("/models/pairs/contains", floors=[0, 1, 2], buildings=["A", "B", "A"])
    assert err["errors"][0]["field"] == "floors[1]" and err["errors"][0]["received"] == "B/1"


def test_get_model_describes_the_floor_part(served):
    info = served.get("/models/pairs").json()["floors"]
    assert info["columns"] == ["building", "floor"]
    assert info["labels"] == [{"building": "A", "floor": f} for f in (0, 1, 2)]
    assert info["classifier"]["type"] in ("knn", "logistic") and "ge" in info["metrics"]
    assert "building and floor" in info["guarantee"]


def test_a_bundle_without_floors_answers_as_before(make_client, test_rows):
    """No floors key, no guarantee key, no floor_inside: the responses of a plain bundle are unchanged;
    floors sent to it are refused naming the field."""
    client = make_client()
    X, Y = test_rows
    body = client.post("/predict-region", json={"features": X[:4].tolist()}).json()
    assert "guarantee" not in body and all("floors" not in row for row in body["regions"])
    body = client.post("/contains", json={"features": X[:4].tolist(), "points": Y[:4].tolist()}).json()
    assert "guarantee" not in body and all(set(row) == {"inside", "distance", "p_value", "typicality"} for row in body["results"])
    assert client.get("/model").json()["floors"] is None
    r = client.post("/contains", json={"features": X[:4].tolist(), "points": Y[:4].tolist(), "floors": [0] * 4})
    assert r.status_code == 422 and r.json()["errors"][0]["field"] == "floors"
    assert "trained without floors" in r.json()["detail"]
