"""``/predict-region`` as GeoJSON (RFC 7946): asked for with ``Accept: application/geo+json`` or
``"format": "geojson"``.

A FeatureCollection with one Feature per row: the ellipse as a Polygon whose one ring is closed (its
first vertex repeated) and counter-clockwise. With a CRS in the bundle (:mod:`models.geo`) the ring
is WGS84 longitude/latitude and the sizes are ground metres; without one the ring is in the
targets' plane coordinates and the sizes in target units, and the collection's ``coordinates``
member says which (RFC 7946 dropped the ``crs`` member; these are foreign members). Properties: the
GeoJSON fields of the table of answers (:mod:`models.answers`): ``row``, ``center``, ``coverage``,
``method``, ``area_m2``, ``semi_axes``, ``orientation`` (radians from the first target axis, as the JSON
answer), ``bearing_deg`` (with a CRS: the major axis' azimuth from true north), ``accuracy_m`` (W3C
Geolocation's ``accuracy`` when asked at coverage 0.95, Android's at 0.68), ``typicality`` and, for a
floor bundle, ``floors``. An unbounded region (a level above what the calibration attains) is a
Feature with a null geometry and null sizes.
"""

from __future__ import annotations

from models import answers
from service.exceptions import APIError

MEDIA_TYPE = "application/geo+json"


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
    batch = answers.Batch(answer, model, vertices)
    rings = batch.figure("ring")
    geometries = [None if ring is None else {"type": "Polygon", "coordinates": [ring]} for ring in rings]
    if model.crs is None:
        where = {"coordinates": "plane", "crs": None,
                 "units": "target units: no CRS declared (lmve-train --crs), so the ring is in the targets' plane "
                          "(first target, second target) and area_m2, semi_axes and accuracy_m are in target units"}
    else:
        where = {"coordinates": "wgs84", "crs": model.crs.to_manifest(),
                 "units": "ring and center in WGS84 longitude, latitude (degrees); area_m2, semi_axes and "
                          "accuracy_m in metres on the ground"}
    return {"type": "FeatureCollection", **where,
            "features": [{"type": "Feature", "geometry": g, "properties": p}
                         for g, p in zip(geometries, answers.properties(batch))],
            **meta}
