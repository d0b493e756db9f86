"""The targets' coordinate reference system: plane ellipses as WGS84 polygons, in ground metres.

A bundle may declare the CRS of its targets (``lmve-train --crs EPSG:3857``): a *projected* CRS
(metres or feet on a plane; a geographic CRS has degrees, in which an ellipse means nothing), which
target is its easting and which its northing (``axes``), and how many CRS units one target unit is
(``scale``: UJIIndoorLoc's built-in loader gives kilometres of EPSG:3857, so 1000). All projection
maths is pyproj's (PROJ): the transformation to WGS84 longitude/latitude, the projection's scale
factors and geodesic distances on the CRS's ellipsoid; nothing here is a hand-written formula.

What a map client needs from a plane ellipse (:meth:`TargetCRS.describe`):

* the ring: the ellipse's boundary, each vertex transformed to (longitude, latitude);
* the ellipse on the ground: the plane axes' four ends, by geodesic distance and azimuth from the
  centre, are local (east, north) vectors, and the ground ellipse is the one with those conjugate
  semi-diameters (at tens of metres a projection is affine to a part in a million; Web Mercator is
  not even conformal on the ellipsoid, so the plane's axes are not quite the ground's): its
  ``semi_axes`` (singular values), ``bearing_deg`` (the major axis' azimuth clockwise from true
  north, in [0, 180)) and ``area_m2`` (Web Mercator at 40 degrees north inflates areas 1.7 times: a
  plane area is not a ground area);
* ``accuracy_m``: the radius of the smallest circle around the centre that holds the ellipse on the
  ground (its semi-major axis, and at least the geodesic distance of every ring vertex), raised by
  one part in a million (the scale's variation across the ellipse) and rounded up to the millimetre.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from models import geometry
from models._validation import lookup
from models.exceptions import InputError

AXES = ("xy", "yx")


@dataclass(frozen=True)
class TargetCRS:
    """The targets' CRS: ``crs`` (an authority code such as ``"EPSG:3857"``, or any string pyproj's
    ``CRS.from_user_input`` reads), ``axes`` (``"xy"``: target 0 is the easting, target 1 the
    northing; ``"yx"``: the other way round) and ``scale`` (CRS units per target unit).

    Construction checks all three with pyproj; bad values raise :class:`InputError` naming the field.
    """

    crs: str
    axes: str = "xy"
    scale: float = 1.0

    def __post_init__(self):
        import pyproj

        try:
            crs = pyproj.CRS.from_user_input(self.crs)
        except pyproj.exceptions.CRSError as exc:
            raise InputError(f"crs {self.crs!r} is not a coordinate reference system pyproj knows: {exc}",
                             field="crs", expected="an authority code such as EPSG:3857", received=self.crs) from None
        if not crs.is_projected:
            raise InputError(f"crs {self.crs!r} ({crs.name}) is not projected: ellipses need plane coordinates "
                             "(metres or feet), not degrees", field="crs", expected="a projected CRS (EPSG:3857, a "
                             "UTM zone)", received=f"{self.crs} ({crs.type_name})")
        lookup(AXES, self.axes, "crs axes", field="crs_axes")
        if not (isinstance(self.scale, (int, float)) and math.isfinite(self.scale) and self.scale > 0):
            raise InputError(f"crs scale must be a positive number of CRS units per target unit; got {self.scale!r}",
                             field="crs_scale", expected="a finite number > 0", received=repr(self.scale))
        object.__setattr__(self, "_crs", crs)

    # ------------------------------------------------------------------ storage
    def to_manifest(self) -> dict:
        """The manifest's ``crs`` entry (the CRS's name and unit for readers without pyproj)."""
        return {"crs": self.crs, "axes": self.axes, "scale": float(self.scale), "name": self._crs.name,
                "unit": self._crs.axis_info[0].unit_name}

    @classmethod
    def from_manifest(cls, entry: dict) -> "TargetCRS":
        return cls(crs=str(entry["crs"]), axes=str(entry.get("axes", "xy")), scale=float(entry.get("scale", 1.0)))

    # ------------------------------------------------------------------ pyproj objects (built once)
    @cached_property
    def _to_wgs84(self):
        import pyproj

        return pyproj.Transformer.from_crs(self._crs, "EPSG:4326", always_xy=True)

    @cached_property
    def _from_wgs84(self):
        import pyproj

        return pyproj.Transformer.from_crs("EPSG:4326", self._crs, always_xy=True)

    @cached_property
    def geod(self):
        """The CRS's ellipsoid as a ``pyproj.Geod`` (geodesic distances and azimuths)."""
        return self._crs.get_geod()

    @property
    def metres_per_unit(self) -> float:
        """Metres in one CRS unit along the plane (1 for metres, 0.3048 for feet)."""
        return float(self._crs.axis_info[0].unit_conversion_factor)

    # ------------------------------------------------------------------ coordinates
    def _order(self, points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        first, second = points[..., 0] * self.scale, points[..., 1] * self.scale
        return (first, second) if self.axes == "xy" else (second, first)

    def to_lonlat(self, points) -> np.ndarray:
        """Target-unit points ``(..., 2)`` as WGS84 ``(..., 2)`` (longitude, latitude) in degrees."""
        points = np.asarray(points, dtype=np.float64)
        lon, lat = self._to_wgs84.transform(*self._order(points))
        return np.stack([np.asarray(lon), np.asarray(lat)], axis=-1)

    def from_lonlat(self, lonlat) -> np.ndarray:
        """WGS84 ``(..., 2)`` (longitude, latitude) back to target units ``(..., 2)``."""
        lonlat = np.asarray(lonlat, dtype=np.float64)
        x, y = self._from_wgs84.transform(lonlat[..., 0], lonlat[..., 1])
        x, y = np.asarray(x) / self.scale, np.asarray(y) / self.scale
        return np.stack([x, y] if self.axes == "xy" else [y, x], axis=-1)

    def distance_m(self, a, b) -> np.ndarray:
        """(N,) geodesic distances in metres between target-unit points ``a`` and ``b`` (N, 2), on the CRS's
        ellipsoid: a position error on the ground."""
        a_ll, b_ll = self.to_lonlat(a), self.to_lonlat(b)
        _, _, d = self.geod.inv(a_ll[:, 0], a_ll[:, 1], b_ll[:, 0], b_ll[:, 1])
        return np.asarray(d, dtype=np.float64).reshape(-1)

    # ------------------------------------------------------------------ ellipses on the ground
    def describe(self, centers, semi_axes, directions, rings) -> dict[str, np.ndarray]:
        """Ground figures of N plane ellipses (target units): ``centers`` (N, 2), ``semi_axes`` (N, 2)
        (longest first), ``directions`` (N, 2, 2) (column j: axis j's unit direction) and closed
        boundary ``rings`` (N, k + 1, 2).

        Returns ``center`` (N, 2) and ``ring`` (N, k + 1, 2) in (longitude, latitude), counter-clockwise;
        ``area_m2``, ``accuracy_m`` and ``bearing_deg`` (N,) and ``semi_axes_m`` (N, 2)."""
        centers = np.asarray(centers, dtype=np.float64)
        n = centers.shape[0]
        major, minor = directions[:, :, 0] * semi_axes[:, :1], directions[:, :, 1] * semi_axes[:, 1:]
        ends = np.stack([centers + major, centers - major, centers + minor, centers - minor], axis=1)  # (N, 4, 2)
        c_ll = self.to_lonlat(centers)
        ends_ll = self.to_lonlat(ends)
        ring_ll = ccw(self.to_lonlat(rings))
        geod = self.geod

        def dist(points_ll):  # (N, k, 2) -> geodesic distance and azimuth from each row's centre (N, k)
            k = points_ll.shape[1]
            lon0 = np.repeat(c_ll[:, 0], k)
            lat0 = np.repeat(c_ll[:, 1], k)
            az, _, d = geod.inv(lon0, lat0, points_ll[..., 0].ravel(), points_ll[..., 1].ravel())
            return np.asarray(d).reshape(n, k), np.asarray(az).reshape(n, k)

        d_ends, az_ends = dist(ends_ll)
        d_ring, _ = dist(ring_ll)
        # the axes' ends as local ground vectors (east, north): the ground image of the ellipse is the
        # ellipse with conjugate semi-diameters u and v (the projection is affine at this scale)
        rad = np.radians(az_ends)
        ground = np.stack([d_ends * np.sin(rad), d_ends * np.cos(rad)], axis=-1)  # (N, 4, 2)
        M = np.stack([(ground[:, 0] - ground[:, 1]) / 2, (ground[:, 2] - ground[:, 3]) / 2], axis=-1)  # (N, 2, 2)
        U, s, _ = np.linalg.svd(M)
        farthest = np.maximum(s[:, 0], d_ring.max(axis=1))
        return {"center": c_ll, "ring": ring_ll, "area_m2": np.pi * np.abs(np.linalg.det(M)),
                "accuracy_m": np.ceil(farthest * (1.0 + 1e-6) * 1000.0) / 1000.0, "semi_axes_m": s,
                "bearing_deg": np.mod(np.degrees(np.arctan2(U[:, 0, 0], U[:, 1, 0])), 180.0)}


def ellipse_figures(centers, shapes, crs: TargetCRS | None, vertices: int = 64) -> dict[str, np.ndarray]:
    """What a map answer says of N bounded plane ellipses (``centers`` (N, 2), ``shapes`` (N, 2, 2)): the
    ``center``, the closed counter-clockwise ``ring`` of ``vertices`` vertices, ``area_m2``, ``semi_axes_m``
    (N, 2), ``accuracy_m`` and ``orientation`` (radians from the first target axis); with a ``crs`` on the
    ground in WGS84 and metres (:meth:`TargetCRS.describe`, which adds ``bearing_deg``), without one in the
    targets' plane and units (``accuracy_m`` then the semi-major axis)."""
    centers, shapes = np.asarray(centers, dtype=np.float64), np.asarray(shapes, dtype=np.float64)
    area, semi, angle = geometry.ellipse_2d(shapes)
    _, directions = geometry.axes(shapes)
    rings = geometry.boundary_points(centers, shapes, vertices, closed=True)
    if crs is None:
        figures = {"center": centers, "ring": ccw(rings), "area_m2": area, "semi_axes_m": semi, "accuracy_m": semi[:, 0]}
    else:
        figures = crs.describe(centers, semi, directions, rings)
    figures["orientation"] = angle
    return figures


def signed_area(rings) -> np.ndarray:
    """Shoelace signed area of closed rings ``(N, k + 1, 2)``: positive for counter-clockwise."""
    rings = np.asarray(rings, dtype=np.float64)
    x, y = rings[..., 0], rings[..., 1]
    return 0.5 * np.sum(x[:, :-1] * y[:, 1:] - x[:, 1:] * y[:, :-1], axis=1)


def ccw(rings) -> np.ndarray:
    """Closed rings ``(N, k + 1, 2)`` made counter-clockwise (RFC 7946's exterior ring): the clockwise ones reversed."""
    rings = np.array(rings, dtype=np.float64)
    clockwise = signed_area(rings) < 0
    rings[clockwise] = rings[clockwise, ::-1]
    return rings


def parse_crs(crs: str | None, axes: str | None = None, scale: float | None = None,
              default: dict | None = None) -> TargetCRS | None:
    """The CRS a training run declares: ``crs`` (``"none"``: no CRS even when the dataset declares one),
    else the dataset's ``default`` (its ``crs``, ``axes`` and ``scale``); ``axes`` and ``scale`` override
    the default's. ``None`` when neither declares one."""
    if crs is not None and crs.strip().lower() == "none":
        return None
    base = dict(default or {})
    if crs is not None:
        base = {"crs": crs, **({k: v for k, v in base.items() if k != "crs"} if crs == base.get("crs") else {})}
    if "crs" not in base:
        if axes is not None or scale is not None:
            raise InputError("crs: crs_axes and crs_scale describe a CRS; name it", field="crs",
                             expected="a CRS name (EPSG:XXXX)", received="none")
        return None
    if axes is not None:
        base["axes"] = axes
    if scale is not None:
        base["scale"] = scale
    return TargetCRS(crs=base["crs"], axes=base.get("axes", "xy"), scale=float(base.get("scale", 1.0)))
