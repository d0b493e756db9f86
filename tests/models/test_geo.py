"""models.geo: the targets' CRS checked by pyproj, target units <-> WGS84, rings made counter-clockwise, and
the ground figures of an ellipse against pyproj's own geodesics computed here independently."""

from __future__ import annotations

import numpy as np
import pyproj
import pytest

from models import geometry
from models.exceptions import InputError
from models.geo import TargetCRS, ccw, parse_crs, signed_area

#: UJIIndoorLoc's frame: EPSG:3857 kilometres, northing first (the built-in loader's targets)
UJI = TargetCRS("EPSG:3857", axes="yx", scale=1000.0)


@pytest.mark.parametrize("kwargs, field", [
    ({"crs": "EPSG:999999"}, "crs"), ({"crs": "not a crs"}, "crs"),
    ({"crs": "EPSG:4326"}, "crs"),  # geographic: degrees, no plane
    ({"crs": "EPSG:3857", "axes": "xz"}, "crs_axes"),
    ({"crs": "EPSG:3857", "scale": 0.0}, "crs_scale"), ({"crs": "EPSG:3857", "scale": float("nan")}, "crs_scale")])
def test_a_bad_crs_is_refused_naming_the_field(kwargs, field):
    with pytest.raises(InputError) as err:
        TargetCRS(**kwargs)
    assert err.value.field == field


def test_manifest_round_trip_and_unit():
    entry = UJI.to_manifest()
    assert entry["name"] == "WGS 84 / Pseudo-Mercator" and entry["unit"] == "metre"
    assert TargetCRS.from_manifest(entry) == UJI
    assert TargetCRS("EPSG:2227").metres_per_unit == pytest.approx(0.3048006, rel=1e-6)  # US survey feet


def test_target_units_to_wgs84_follow_the_axes_and_scale():
    # UJIIndoorLoc's campus: northing 4,864,900 m and easting -7,500 m of Web Mercator
    lonlat = UJI.to_lonlat(np.array([[4864.9, -7.5]]))
    lon, lat = pyproj.Transformer.from_crs("EPSG:3857", "EPSG:4326", always_xy=True).transform(-7500.0, 4864900.0)
    assert lonlat[0] == pytest.approx([lon, lat], abs=1e-12)
    assert -0.07 < lon < -0.06 and 39.9 < lat < 40.1  # Castello de la Plana
    back = UJI.from_lonlat(lonlat)
    assert back == pytest.approx(np.array([[4864.9, -7.5]]), abs=1e-11)  # 1e-11 km: 10 nm


def test_ccw_reverses_clockwise_rings_only():
    square = np.array([[[0, 0], [1, 0], [1, 1], [0, 1], [0, 0]]], dtype=float)
    both = np.concatenate([square, square[:, ::-1]])
    assert signed_area(both).tolist() == [1.0, -1.0]
    fixed = ccw(both)
    assert (signed_area(fixed) > 0).all()
    assert np.array_equal(fixed[0], square[0]) and np.array_equal(fixed[1], square[0])


def test_parse_crs_defaults_overrides_and_none():
    uji = {"crs": "EPSG:3857", "axes": "yx", "scale": 1000.0}
    assert parse_crs(None, default=uji) == UJI
    assert parse_crs("none", default=uji) is None
    assert parse_crs(None) is None
    assert parse_crs("EPSG:32630", default=uji) == TargetCRS("EPSG:32630")  # another CRS: the default's axes go too
    assert parse_crs(None, scale=1.0, default=uji) == TargetCRS("EPSG:3857", axes="yx")
    with pytest.raises(InputError, match="crs: crs_axes and crs_scale describe a CRS; name it") as err:
        parse_crs(None, axes="yx")
    assert err.value.field == "crs"


@pytest.mark.parametrize("crs", [UJI, TargetCRS("EPSG:32630", scale=1.0)])
def test_ground_figures_match_pyproj_geodesics(crs):
    rng = np.random.default_rng(0)
    base = np.array([4864.9, -7.5]) if crs is UJI else np.array([750000.0, 4430000.0])
    centers = base + rng.normal(size=(5, 2)) * (0.05 if crs is UJI else 50.0)
    A = rng.normal(size=(5, 2, 2)) * (0.01 if crs is UJI else 10.0)
    C = A @ A.transpose(0, 2, 1) + np.eye(2) * (1e-5 if crs is UJI else 4.0)
    area, semi, _ = geometry.ellipse_2d(C)
    _, directions = geometry.axes(C)
    rings = geometry.boundary_points(centers, C, 64, closed=True)
    out = crs.describe(centers, semi, directions, rings)
    geod = pyproj.CRS.from_user_input(crs.crs).get_geod()
    dense = crs.to_lonlat(geometry.boundary_points(centers, C, 2000, closed=True))
    for i in range(5):
        ring = out["ring"][i]
        assert np.array_equal(ring[0], ring[-1]) and signed_area(ring[None])[0] > 0
        _, _, d = geod.inv(np.full(len(dense[i]), out["center"][i, 0]), np.full(len(dense[i]), out["center"][i, 1]),
                           dense[i, :, 0], dense[i, :, 1])
        assert out["accuracy_m"][i] >= d.max()                # the circle holds every boundary point
        assert out["accuracy_m"][i] <= d.max() + 1.01e-3       # and is no bigger than the millimetre rounding
        assert out["semi_axes_m"][i, 0] == pytest.approx(d.max(), rel=1e-5)
        assert out["semi_axes_m"][i, 1] == pytest.approx(d.min(), rel=1e-3)  # the dense ring samples the minimum
        geodesic_area, _ = geod.polygon_area_perimeter(dense[i, :, 0], dense[i, :, 1])
        assert out["area_m2"][i] == pytest.approx(abs(geodesic_area), rel=1e-4)
    if crs is UJI:  # Web Mercator at 40 N: a plane metre is about cos(40 deg) of a ground metre, areas cos^2
        plane = area * 1e6
        assert out["area_m2"] / plane == pytest.approx(np.cos(np.radians(out["center"][:, 1])) ** 2, rel=1e-2)
