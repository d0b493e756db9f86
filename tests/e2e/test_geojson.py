"""GeoJSON from /predict-region (issue 41): a real ``lmve-serve`` on loopback over a repository of a Web
Mercator bundle (UJIIndoorLoc's frame: kilometres, northing first), a UTM floor bundle and a plane
bundle. Checked with pyproj here, independently of models.geo: RFC 7946's rings (closed,
counter-clockwise, longitude/latitude in range), the round trip to the plane within 1 cm, accuracy_m
against every boundary point's geodesic distance, and plane coordinates said as such."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pyproj
import pytest

from tests.conftest import train_and_save
from tests.e2e.servers import serving_repository

GEO = "application/geo+json"


@pytest.fixture(scope="module")
def geo_repository(tmp_path_factory):
    from models.geo import TargetCRS
    from training.data.datasets import load_dataset
    from training.pipeline import TrainConfig

    root = tmp_path_factory.mktemp("geo-repository")
    ds = load_dataset("synthetic", n_samples=600, seed=0)
    # the synthetic survey (metres) placed on UJIIndoorLoc's campus as the built-in loader gives it
    uji = replace(ds, Y=np.column_stack([4864.85 + ds.Y[:, 1] / 1000, -7.55 + ds.Y[:, 0] / 1000]),
                  target_names=["latitude_km", "longitude_km"])
    result = train_and_save(uji, TrainConfig(seed=0, methods=("ge", "nle"), use_groups=False), root / "mercator",
                            crs=TargetCRS("EPSG:3857", axes="yx", scale=1000.0))
    rows = {"mercator": uji.X[result.split.test][:30]}
    result = train_and_save(ds, TrainConfig(seed=0, methods=("ge",), fallbacks=False, use_groups=False), root / "plane")
    rows["plane"] = ds.X[result.split.test][:30]
    fl = load_dataset("floors", seed=0)
    fl = replace(fl, Y=fl.Y + np.array([750000.0, 4430000.0]))
    result = train_and_save(fl, TrainConfig(seed=0, methods=("ge",), fallbacks=False, floor_column="floor", use_groups=False),
                            root / "floors",
                            crs=TargetCRS("EPSG:32630"))
    rows["floors"] = fl.X[result.split.test][:30]
    return root, rows


@pytest.fixture(scope="module")
def served(geo_repository, tmp_path_factory):
    root, _ = geo_repository
    with serving_repository(root, "mercator", tmp_path_factory.mktemp("logs")) as client:
        yield client


def shoelace(ring) -> float:
    ring = np.asarray(ring)
    return 0.5 * float(np.sum(ring[:-1, 0] * ring[1:, 1] - ring[1:, 0] * ring[:-1, 1]))


def assert_rfc7946(collection: dict, rows: int, wgs84: bool) -> None:
    assert collection["type"] == "FeatureCollection" and len(collection["features"]) == rows
    for i, feature in enumerate(collection["features"]):
        assert feature["type"] == "Feature" and feature["properties"]["row"] == i
        geometry = feature["geometry"]
        assert geometry["type"] == "Polygon" and len(geometry["coordinates"]) == 1  # one exterior ring, no holes
        ring = np.asarray(geometry["coordinates"][0])
        assert ring.shape[0] >= 4 and ring.shape[1] == 2
        assert np.array_equal(ring[0], ring[-1])        # closed
        assert shoelace(ring) > 0                       # counter-clockwise (RFC 7946 section 3.1.6)
        if wgs84:
            assert (np.abs(ring[:, 0]) <= 180).all() and (np.abs(ring[:, 1]) <= 90).all()


@pytest.mark.slow
@pytest.mark.parametrize("ask", ["accept", "format"])
def test_mercator_geojson_is_rfc7946_wgs84_and_round_trips_within_a_centimetre(served, geo_repository, ask):
    _, rows = geo_repository
    X = rows["mercator"].tolist()
    if ask == "accept":
        r = served.post("/predict-region", json={"features": X, "boundary_points": 48}, headers={"Accept": GEO})
    else:
        r = served.post("/predict-region", json={"features": X, "boundary_points": 48, "format": "geojson"})
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == GEO
    collection = r.json()
    assert_rfc7946(collection, len(X), wgs84=True)
    assert collection["coordinates"] == "wgs84" and collection["crs"]["crs"] == "EPSG:3857"
    assert collection["model"] == "mercator" and collection["method"] in ("ge", "nle")
    plain = served.post("/predict-region", json={"features": X, "boundary_points": 48}).json()["regions"]
    to_plane = pyproj.Transformer.from_crs("EPSG:4326", "EPSG:3857", always_xy=True)
    for feature, region in zip(collection["features"], plain):
        ring = np.asarray(feature["geometry"]["coordinates"][0])
        east, north = to_plane.transform(ring[:, 0], ring[:, 1])
        back = np.column_stack([north, east]) / 1000.0  # kilometres, northing first: the targets
        boundary = np.asarray(region["boundary"])
        if not np.allclose(back[1], boundary[1], atol=1e-5):  # the ring was reversed to turn counter-clockwise
            back = back[::-1]
        assert np.abs(back - boundary).max() * 1000.0 < 0.01  # metres of the CRS: within 1 cm
        east, north = to_plane.transform(*feature["properties"]["center"])
        assert np.abs(np.array([north, east]) / 1000.0 - region["center"]).max() * 1000.0 < 0.01
        assert feature["properties"]["coverage"] == region["coverage"]


def geodesic_distances(center, ring) -> np.ndarray:
    geod = pyproj.Geod(ellps="WGS84")
    ring = np.asarray(ring)
    _, _, d = geod.inv(np.full(len(ring), center[0]), np.full(len(ring), center[1]), ring[:, 0], ring[:, 1])
    return d


@pytest.mark.parametrize("model", ["mercator", "floors"])
def test_accuracy_m_holds_every_boundary_point_on_the_ground(served, geo_repository, model):
    _, rows = geo_repository
    for coverage in (0.68, 0.95):  # Android's and W3C Geolocation's accuracy radii
        r = served.post(f"/models/{model}/predict-region", json={"features": rows[model].tolist(),
                        "coverage": coverage, "boundary_points": 512}, headers={"Accept": GEO})
        assert r.status_code == 200, r.text
        assert_rfc7946(r.json(), len(rows[model]), wgs84=True)
        for feature in r.json()["features"]:
            p = feature["properties"]
            d = geodesic_distances(p["center"], feature["geometry"]["coordinates"][0])
            assert p["accuracy_m"] >= d.max()
            assert p["accuracy_m"] <= d.max() + 0.0011  # the semi-major axis, rounded up to the millimetre
            assert p["semi_axes"][0] >= p["semi_axes"][1] > 0 and 0 <= p["bearing_deg"] < 180
            area, _ = pyproj.Geod(ellps="WGS84").polygon_area_perimeter(*np.asarray(
                feature["geometry"]["coordinates"][0]).T)
            assert p["area_m2"] == pytest.approx(abs(area), rel=1e-4)  # 512 vertices: 2.5e-5 short of the ellipse
            assert p["coverage"] == coverage


def test_web_mercator_metres_are_not_ground_metres(served, geo_repository):
    _, rows = geo_repository
    X = rows["mercator"][:5].tolist()
    geo = served.post("/predict-region", json={"features": X, "format": "geojson"}).json()["features"]
    plain = served.post("/predict-region", json={"features": X}).json()["regions"]
    for feature, region in zip(geo, plain):
        lat = np.radians(feature["properties"]["center"][1])  # about 40 N: a plane metre is cos(lat) ground metres
        assert feature["properties"]["area_m2"] / (region["volume"] * 1e6) == pytest.approx(np.cos(lat) ** 2, rel=1e-2)


def test_a_floor_bundle_puts_its_floor_sets_in_the_properties(served, geo_repository):
    _, rows = geo_repository
    X = rows["floors"].tolist()
    geo = served.post("/models/floors/predict-region", json={"features": X}, headers={"Accept": GEO}).json()
    plain = served.post("/models/floors/predict-region", json={"features": X}).json()
    assert [f["properties"]["floors"] for f in geo["features"]] == [r["floors"] for r in plain["regions"]]
    assert geo["guarantee"] == plain["guarantee"] and geo["crs"]["name"] == "WGS 84 / UTM zone 30N"


def test_a_bundle_without_a_crs_answers_plane_coordinates_and_says_so(served, geo_repository):
    _, rows = geo_repository
    X = rows["plane"].tolist()
    r = served.post("/models/plane/predict-region", json={"features": X, "boundary_points": 32},
                    headers={"Accept": GEO})
    assert r.status_code == 200 and r.headers["content-type"] == GEO
    collection = r.json()
    assert collection["coordinates"] == "plane" and collection["crs"] is None
    assert "no CRS declared" in collection["units"]
    assert_rfc7946(collection, len(X), wgs84=False)
    plain = served.post("/models/plane/predict-region", json={"features": X, "boundary_points": 32}).json()["regions"]
    for feature, region in zip(collection["features"], plain):
        assert np.allclose(feature["geometry"]["coordinates"][0], region["boundary"])  # the plane ring itself
        p = feature["properties"]
        assert p["center"] == pytest.approx(region["center"]) and p["area_m2"] == pytest.approx(region["volume"])
        assert p["semi_axes"] == pytest.approx(region["semi_axes"]) and "bearing_deg" not in p
        boundary = np.asarray(region["boundary"])
        assert p["accuracy_m"] >= np.linalg.norm(boundary - region["center"], axis=1).max() - 1e-12
        assert p["accuracy_m"] == pytest.approx(region["semi_axes"][0])


def test_json_stays_the_default_and_a_bad_format_is_named(served, geo_repository):
    _, rows = geo_repository
    X = rows["mercator"][:2].tolist()
    r = served.post("/predict-region", json={"features": X}, headers={"Accept": "application/json"})
    assert r.headers["content-type"] == "application/json" and "regions" in r.json()
    r = served.post("/predict-region", json={"features": X, "format": "json"}, headers={"Accept": GEO})
    assert "regions" in r.json()  # the body's format wins over the header
    r = served.post("/predict-region", json={"features": X, "format": "kml"})
    assert r.status_code == 422
    assert any(e["field"].endswith("format") for e in r.json()["errors"]), r.json()
