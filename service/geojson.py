"""``/predict-region`` as GeoJSON (RFC 7946): asked for with ``Accept: application/geo+json`` or
``"format": "geojson"``.

A FeatureCollection with one Feature per row: the ellipse as a Polygon whose one ring is closed (its
first vertex repeated) and counter-clockwise. With a CRS in the bundle (:mod:`models.geo`) the ring
is WGS84 longitude/latitude and the sizes are ground metres; without one the ring is in the
targets' plane coordinates and the sizes in target units, and the collection's ``coordinates``
member says which (RFC 7946 dropped the ``crs`` member; these are foreign members). Properties:
``row``, ``center``, ``coverage``, ``method``, ``area_m2``, ``semi_axes``, ``orientation`` (radians
from the first target axis, as the JSON answer), ``bearing_deg`` (with a CRS: the major axis'
azimuth from true north), ``accuracy_m`` (the radius around the centre that holds the ellipse: W3C
Geolocation's ``accuracy`` when asked at coverage 0.95, Android's at 0.68) and, for a floor bundle,
``floors``. An unbounded region (a level above what the calibration attains) is a Feature with a
null geometry and null sizes.
"""

from __future__ import annotations

import numpy as np

from models.geo import ellipse_figures
from service.exceptions import APIError

MEDIA_TYPE = "application/geo+json"
#: ring vertices when the request does not set ``boundary_points``
DEFAULT_VERTICES = 64


def wants_geojson(request, body) -> bool:
    """The body's ``format`` decides; without one, an ``Accept`` header naming ``application/geo+json``."""
    if body.format is not None:
        return body.format == "geojson"
    for name, value in request.scope["headers"]:
        if name == b"accept" and b"application/geo+json" in value:
            return True
    return False


def check(model) -> None:
    """422 unless the model's regions are plane ellipses (2-D targets)."""
    if model.n_targets != 2:
        raise APIError(422, "Invalid input", f"GeoJSON draws 2-D regions; this model has {model.n_targets} targets",
                       field="format", expected="json for n != 2", received="geojson")


def feature_collection(answer, model, vertices: int | None, meta: dict) -> dict:
    """The FeatureCollection of a :class:`~models.model.RegionAnswer` (its top-level members: ``meta``)."""
    region = answer.regions
    centers, shapes = region.centers, region.shapes
    n = len(centers)
    k = vertices or DEFAULT_VERTICES
    bounded = np.isfinite(shapes).all(axis=(1, 2))
    crs = model.crs
    typicality = [None] * n if answer.typicality is None else answer.typicality.tolist()
    props = [{"row": i, "coverage": region.coverage, "method": answer.method, "center": None, "area_m2": None,
              "semi_axes": None, "orientation": None, "accuracy_m": None, "typicality": typicality[i]}
             for i in range(n)]
    geometries: list[dict | None] = [None] * n
    rows = np.flatnonzero(bounded)
    if len(rows):
        figures = ellipse_figures(centers[rows], shapes[rows], crs, k)
        angle = figures["orientation"]
        for j, i in enumerate(rows.tolist()):
            geometries[i] = {"type": "Polygon", "coordinates": [figures["ring"][j].tolist()]}
            p = props[i]
            p.update(center=figures["center"][j].tolist(), area_m2=float(figures["area_m2"][j]),
                     semi_axes=figures["semi_axes_m"][j].tolist(), orientation=float(angle[j]),
                     accuracy_m=float(figures["accuracy_m"][j]))
            if crs is not None:
                p["bearing_deg"] = float(figures["bearing_deg"][j])
    if answer.floors is not None:
        for p, floors in zip(props, answer.floors.rows()):
            p["floors"] = floors
    if crs is None:
        where = {"coordinates": "plane", "crs": None,
                 "units": "target units: no CRS declared (lmve-train --crs), so the ring is in the targets' plane "
                          "(first target, second target) and area_m2, semi_axes and accuracy_m are in target units"}
    else:
        where = {"coordinates": "wgs84", "crs": crs.to_manifest(),
                 "units": "ring and center in WGS84 longitude, latitude (degrees); area_m2, semi_axes and "
                          "accuracy_m in metres on the ground"}
    return {"type": "FeatureCollection", **where,
            "features": [{"type": "Feature", "geometry": g, "properties": p} for g, p in zip(geometries, props)],
            **meta}
