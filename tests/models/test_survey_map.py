"""models/survey_map.py: the site's extent, the interpolation, the map."""

from __future__ import annotations

import numpy as np
import pytest

from models.exceptions import InputError
from models.survey import Survey
from models.survey_map import Extent, interpolate, spacing, survey_map

EPS = 1e-9


def survey(positions, areas, errors=None) -> Survey:
    P = np.asarray(positions, dtype=np.float64)
    return Survey(positions=P, counts=np.ones(len(P), np.int64), floors=None, example_features=np.zeros((0, 1)),
                  example_points=np.zeros((0, 2)), example_floors=None, areas=np.asarray(areas, dtype=np.float64),
                  errors=None if errors is None else np.asarray(errors, dtype=np.float64))


def hull_distance(V: np.ndarray, P: np.ndarray) -> np.ndarray:
    """Each point's distance to the convex polygon ``V`` (0 inside), by its edges as segments."""
    from models.survey_map import _edge_distances

    inside = (_edge_distances(V, P) <= 0).all(axis=1)
    a, b = V, np.roll(V, -1, axis=0)
    ab = b - a
    t = np.clip(((P[:, None] - a) * ab).sum(-1) / (ab**2).sum(-1), 0, 1)
    d = np.linalg.norm(P[:, None] - (a + t[..., None] * ab), axis=-1).min(axis=1)
    return np.where(inside, 0.0, d)


def test_the_widened_hull_holds_the_positions_and_reaches_no_further_than_the_margin():
    rng = np.random.default_rng(0)
    P = rng.uniform([0, 0], [40, 25], size=(30, 2))
    margin = 1.7
    ext = Extent.of_survey(P, margin)
    assert ext.contains(P).all()
    from scipy.spatial import ConvexHull

    hull = P[ConvexHull(P).vertices]
    Q = rng.uniform([-5, -5], [45, 30], size=(20000, 2))
    inside = ext.contains(Q)
    d = hull_distance(hull, Q)
    assert (d[inside] <= margin * (1 + EPS)).all()  # bevelled corners: never beyond the margin
    assert (inside[d == 0]).all()  # the hull itself is inside
    near = (d > 0) & (d < margin * np.cos(np.pi / 4) * 0.999)  # within the bevel's inner reach of every edge
    assert inside[near].mean() > 0.99


def test_a_boundary_polygon_is_non_convex_and_either_orientation():
    L = np.array([[0, 0], [10, 0], [10, 4], [4, 4], [4, 10], [0, 10]], dtype=float)  # an L
    for V in (L, L[::-1], np.vstack([L, L[:1]])):
        ext = Extent.of_polygon(V)
        assert ext.contains([[2, 2], [8, 2], [2, 8]]).all()
        assert not ext.contains([[8, 8], [11, 1], [-1, 5]]).any()
    with pytest.raises(InputError, match="3 or more vertices") as info:
        Extent.of_polygon([[0, 0], [1, 1]])
    assert info.value.field == "boundary"
    with pytest.raises(InputError, match="boundary\\[2\\] has 3 values, but expected 2") as info:
        Extent.of_polygon([[0, 0], [1, 0], [1, 1, 5]])
    assert info.value.field == "boundary[2]"
    with pytest.raises(InputError, match="span no area"):
        Extent.of_survey([[0, 0], [1, 1], [2, 2]], 1.0)


def test_interpolation_is_a_weighted_mean_exact_on_a_constant_and_leaves_itself_out():
    rng = np.random.default_rng(1)
    P = rng.uniform(0, 10, size=(50, 2))
    G = rng.uniform(0, 10, size=(200, 2))
    np.testing.assert_allclose(interpolate(P, np.full(50, 7.5), G, 1.0, log=True), 7.5, rtol=1e-12)
    v = rng.uniform(1, 9, size=50)
    got = interpolate(P, v, G, 1.0, log=True)
    assert (got >= v.min() * (1 - EPS)).all() and (got <= v.max() * (1 + EPS)).all()  # a convex combination
    # leaving out: a position whose value differs from every other's is not predicted by itself
    v2 = np.ones(50)
    v2[0] = 100.0
    out = interpolate(P, v2, P, 1.0, leave_out=True)
    np.testing.assert_allclose(out[0], 1.0, rtol=1e-12)
    assert interpolate(P, v2, P[:1], 1.0)[0] > 1.0


def test_the_map_covers_the_extent_with_values_between_the_positions():
    rng = np.random.default_rng(2)
    P = rng.uniform([0, 0], [40, 25], size=(60, 2))
    areas = 10 + P[:, 0]  # grows to the east
    errors = 1 + 0.1 * P[:, 1]
    m = survey_map(survey(P, areas, errors), cells=30, method="ge")
    assert m.extent.contains(m.centres).all() and len(m.centres) > 100
    assert m.cell == pytest.approx(float((m.extent.polygon.max(0) - m.extent.polygon.min(0)).max()) / 30)
    assert m.spacing == pytest.approx(spacing(P)) and m.extent.margin == pytest.approx(m.spacing / 2)
    assert (m.expected_area >= areas.min() * (1 - EPS)).all() and (m.expected_area <= areas.max() * (1 + EPS)).all()
    east, west = m.centres[:, 0] > 30, m.centres[:, 0] < 10
    assert m.expected_area[east].mean() > m.expected_area[west].mean() + 15
    np.testing.assert_allclose(m.distance, np.min(np.linalg.norm(m.centres[:, None] - P[None], axis=-1), axis=1))
    assert m.accuracy["area"]["positions"] == 60 and m.accuracy["area"]["median_abs_rel_error"] < 0.1
    assert m.corners().shape == (len(m.centres), 5, 2)


def test_a_bundle_without_areas_or_a_bad_request_is_refused_by_name():
    P = np.random.default_rng(3).uniform(0, 10, size=(20, 2))
    from dataclasses import replace

    for old in (None, replace(survey(P, np.ones(20)), areas=None)):
        with pytest.raises(InputError, match="retrain") as info:
            survey_map(old)
        assert info.value.field == "bundle"
    with pytest.raises(InputError, match="cells must be an integer") as info:
        survey_map(survey(P, np.ones(20)), cells=1)
    assert info.value.field == "cells"
    with pytest.raises(InputError, match="at least 2 distinct positions"):
        survey_map(survey(P[:1], np.ones(1)))


def test_a_survey_keeps_each_positions_mean_area_and_rms_error():
    Y = np.array([[0, 0], [0, 0], [1, 1], [1, 1], [2, 2]], dtype=float)
    s = Survey.of(Y, None, np.zeros((1, 3)), np.zeros((1, 2)), None, areas=[1.0, 3.0, 5.0, np.nan, np.nan],
                  errors=[3.0, 4.0, np.nan, np.nan, 2.0])
    np.testing.assert_allclose(s.areas[:2], [2.0, 5.0])
    assert np.isnan(s.areas[2])
    np.testing.assert_allclose(s.errors[[0, 2]], [np.sqrt(12.5), 2.0])
    assert np.isnan(s.errors[1])
    info, arrays = s.to_arrays()
    back = Survey.from_arrays(arrays, 3, 2)
    np.testing.assert_array_equal(back.areas, s.areas)
    np.testing.assert_array_equal(back.errors, s.errors)
