"""models/survey_geojson.py: the map and plan as RFC 7946 GeoJSON, in WGS84 and ground metres with a CRS."""

from __future__ import annotations

import json

import numpy as np
import pytest

from models.geo import TargetCRS
from models.survey_geojson import feature_collection
from models.survey_map import survey_map
from models.survey_plan import plan
from tests.models.test_survey_map import survey

ORIGIN = np.array([750000.0, 4430000.0])  # UTM zone 30N, near Castello: 250 km east of the central meridian


def shoelace(ring) -> float:
    ring = np.asarray(ring)
    return 0.5 * float(np.sum(ring[:-1, 0] * ring[1:, 1] - ring[1:, 0] * ring[:-1, 1]))


def assert_rfc7946(doc: dict, wgs84: bool) -> None:
    """A FeatureCollection of Polygons (one closed counter-clockwise ring of 4+ positions), Points and
    LineStrings (2+ positions), positions of two finite numbers (longitude, latitude in range with ``wgs84``),
    properties objects, and nothing JSON cannot write (no NaN)."""
    json.dumps(doc, allow_nan=False)
    assert doc["type"] == "FeatureCollection" and isinstance(doc["features"], list)
    for f in doc["features"]:
        assert f["type"] == "Feature" and isinstance(f["properties"], dict)
        g = f["geometry"]
        coords = {"Polygon": lambda c: c[0], "Point": lambda c: [c], "LineString": lambda c: c}[g["type"]](
            g["coordinates"])
        pts = np.asarray(coords, dtype=float)
        assert pts.ndim == 2 and pts.shape[1] == 2 and np.isfinite(pts).all()
        if g["type"] == "Polygon":
            assert len(g["coordinates"]) == 1 and len(pts) >= 4 and np.array_equal(pts[0], pts[-1])
            assert shoelace(pts) > 0
        if g["type"] == "LineString":
            assert len(pts) >= 2
        if wgs84:
            assert (np.abs(pts[:, 0]) <= 180).all() and (np.abs(pts[:, 1]) <= 90).all()


@pytest.fixture(scope="module")
def site():
    rng = np.random.default_rng(0)
    P = rng.uniform([0, 0], [40, 25], size=(50, 2))
    return survey(P + ORIGIN, 20 + P[:, 0], 1 + 0.1 * P[:, 1])


@pytest.mark.parametrize("axes", ["xy", "yx"])
def test_with_a_crs_cells_are_wgs84_rings_and_sizes_ground_metres(site, axes):
    import pyproj

    s = site if axes == "xy" else survey(site.positions[:, ::-1], site.areas, site.errors)
    crs = TargetCRS("EPSG:32630", axes=axes)
    m = survey_map(s, method="nle")
    p = plan(m, 5, seed=0)
    doc = feature_collection(m, crs, p)
    assert_rfc7946(doc, wgs84=True)
    assert doc["coordinates"] == "wgs84" and doc["crs"]["crs"] == "EPSG:32630" and doc["method"] == "nle"
    cells = [f for f in doc["features"] if f["properties"]["kind"] == "cell"]
    assert len(cells) == len(m.centres)
    lon, lat = np.array([np.asarray(f["geometry"]["coordinates"][0])[:4].mean(axis=0) for f in cells]).T
    areal = pyproj.Proj("EPSG:32630").get_factors(lon, lat).areal_scale  # plane area per ground area
    got = np.array([f["properties"]["expected_area_m2"] for f in cells]) / m.expected_area
    np.testing.assert_allclose(got, 1 / areal, rtol=1e-5)  # 250 km off the meridian: not 1 by 7e-4
    assert np.abs(got - 1).min() > 1e-4
    proposals = [f for f in doc["features"] if f["properties"]["kind"] == "proposal"]
    assert [f["properties"]["order"] for f in proposals] == [1, 2, 3, 4, 5]
    back = crs.from_lonlat(np.array([f["geometry"]["coordinates"] for f in proposals]))
    np.testing.assert_allclose(back, p.positions, atol=1e-6)
    walk = [f for f in doc["features"] if f["properties"]["kind"] == "walk"]
    assert len(walk) == 1 and walk[0]["properties"]["length_m"] == pytest.approx(p.walk_length, rel=2e-3)


def test_without_a_crs_or_asked_for_plane_the_cells_are_target_coordinates(site):
    m = survey_map(site)
    for doc in (feature_collection(m, None), feature_collection(m, TargetCRS("EPSG:32630"), plane=True)):
        assert_rfc7946(doc, wgs84=False)
        assert doc["coordinates"] == "plane" and "target units" in doc["units"]
        ring = np.asarray(doc["features"][0]["geometry"]["coordinates"][0])
        np.testing.assert_allclose(ring, m.corners()[0])
        assert doc["features"][0]["properties"]["expected_area_m2"] == pytest.approx(m.expected_area[0])
    assert doc["crs"]["crs"] == "EPSG:32630"
    assert doc["accuracy"] == m.accuracy and doc["spacing_m"] == pytest.approx(m.spacing)
