"""The survey map (and a plan) as GeoJSON (RFC 7946): what ``GET /model/survey-map`` serves and ``lmve-plan
--geojson`` writes.

A FeatureCollection: one Feature per map cell (``kind: "cell"``), a Polygon whose one ring is closed and
counter-clockwise, with ``expected_area_m2``, ``expected_error_m`` (null where the bundle kept no honest
error) and ``distance_m`` (to the nearest surveyed position); with a plan, one Point per proposed position
(``kind: "proposal"``, ``order`` from 1, its ``expected_area_m2``, ``expected_error_m`` and ``gain``) and the
walk through them as a LineString (``kind: "walk"``). With a CRS in the bundle (:mod:`models.geo`) the
coordinates are WGS84 longitude/latitude and the sizes ground metres (each cell's plane-to-ground scale from
its ring's geodesic area, pyproj's); without one, or asked for ``plane``, they are the targets' plane
coordinates and target units, and the ``coordinates`` member says which (as the regions' GeoJSON does).
Foreign members: ``method``, ``spacing_m``, ``margin_m``, ``cell_m``, ``how`` and ``accuracy`` (the map's own
leave-one-position-out error, :attr:`models.survey_map.SurveyMap.accuracy`).
"""

from __future__ import annotations

import numpy as np

HOW = ("each cell's value is interpolated from the surveyed positions (a Gaussian kernel one survey spacing wide; "
       "areas over their logarithm): expected_area_m2 from the served method's mean region at each position, "
       "expected_error_m from the error of a centre that never saw the position; accuracy: each position left out "
       "and predicted from the others")


def feature_collection(smap, crs=None, plan=None, plane: bool = False) -> dict:
    """The FeatureCollection of ``smap`` (:class:`models.survey_map.SurveyMap`) with ``plan``
    (:class:`models.survey_plan.Plan`) or None; ``crs`` (:class:`models.geo.TargetCRS`) or None; ``plane``:
    target coordinates even with a CRS."""
    rings = smap.corners()
    geo = crs is not None and not plane
    if geo:
        from models.geo import ccw

        lonlat = ccw(crs.to_lonlat(rings))  # a northing-first CRS turns the plane's order
        ground = np.array([abs(crs.geod.polygon_area_perimeter(r[:, 0], r[:, 1])[0]) for r in lonlat])
        areal = ground / smap.cell**2  # square metres on the ground per square target unit, per cell
        rings = lonlat
    else:
        areal = np.ones(len(rings))
    linear = np.sqrt(areal)
    features = [{"type": "Feature", "geometry": {"type": "Polygon", "coordinates": [ring.tolist()]},
                 "properties": {"kind": "cell", "cell": i, "expected_area_m2": _num(smap.expected_area[i] * areal[i]),
                                "expected_error_m": _num(smap.expected_error[i] * linear[i]),
                                "distance_m": _num(smap.distance[i] * linear[i])}}
                for i, ring in enumerate(rings)]
    scale = float(np.median(linear)) if len(linear) else 1.0
    if plan is not None:
        features += _plan_features(plan, crs if geo else None, scale)
    out = {"type": "FeatureCollection", **_where(crs, geo), "method": smap.method,
           "spacing_m": smap.spacing * scale, "margin_m": smap.extent.margin * scale, "cell_m": smap.cell * scale,
           "extent": "convex hull of the surveyed positions, widened by the margin" if smap.extent.convex
           else "the boundary polygon given", "how": HOW, "accuracy": smap.accuracy, "features": features}
    return out


def _plan_features(plan, crs, scale: float) -> list[dict]:
    """The proposals as Points in walking order and the walk as a LineString."""
    P = plan.positions if crs is None else crs.to_lonlat(plan.positions)
    points = [{"type": "Feature", "geometry": {"type": "Point", "coordinates": p.tolist()},
               "properties": {"kind": "proposal", "order": i + 1,
                              "expected_area_m2": _num(plan.expected_area[i] * scale**2),
                              "expected_error_m": _num(plan.expected_error[i] * scale), "gain": _num(plan.gain[i])}}
              for i, p in enumerate(P)]
    walk = [] if len(P) < 2 else [{"type": "Feature", "geometry": {"type": "LineString", "coordinates": P.tolist()},
                                   "properties": {"kind": "walk", "length_m": plan.walk_length * scale}}]
    return points + walk


def _where(crs, geo: bool) -> dict:
    if not geo:
        return {"coordinates": "plane", "crs": None if crs is None else crs.to_manifest(),
                "units": "target units: the cells and proposals are in the targets' plane (first target, second "
                         "target) and the _m2 and _m sizes in target units" + ("" if crs is None else
                                                                              " (asked for plane)")}
    return {"coordinates": "wgs84", "crs": crs.to_manifest(),
            "units": "WGS84 longitude, latitude (degrees); _m2 and _m sizes on the ground"}


def _num(v) -> float | None:
    v = float(v)
    return v if np.isfinite(v) else None
