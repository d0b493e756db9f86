"""Where a survey's regions are large: the served region's expected area over the site, from the bundle alone.

The site is the surveyed positions' convex hull with each edge moved out by a margin (half the survey's
spacing, the median distance from a position to its nearest neighbour), or a boundary polygon the caller
gives (:class:`Extent`). A grid of square cells covers it (:func:`survey_map`); at each cell's centre the
map estimates, by interpolation of what the bundle keeps per surveyed position (:class:`models.survey.Survey`):

* ``expected_area``: the region a reading taken there would get, the served method's mean area at the
  surveyed positions, interpolated (a Gaussian kernel on the positions, one spacing wide, over the
  logarithm: areas multiply);
* ``expected_error``: the centre's error a reading there would get, the root mean square of the honest
  errors (centres that never saw the position) interpolated the same way;
* ``distance``: to the nearest surveyed position.

How good the interpolation is the map says itself (:attr:`SurveyMap.accuracy`): each surveyed position
left out in turn and predicted from the others, the median absolute relative error. The interpolation
assumes the site changes smoothly between positions; a wall between two positions is not seen.
Numpy and scipy only: no torch, no model call (the figures were taken when the bundle was trained).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from models._validation import check_matrix
from models.exceptions import InputError

#: the grid's cells along the extent's longer side, by default
CELLS = 40
#: the site's default margin beyond the surveyed positions' hull, in survey spacings (:func:`spacing`)
MARGIN = 0.5
#: neighbours each interpolated value draws on (the kernel's weight beyond is below exp(-8) at the spacing's width)
NEIGHBOURS = 32


def spacing(positions: np.ndarray) -> float:
    """The survey's spacing: the median distance from a distinct position to its nearest neighbour."""
    from scipy.spatial import cKDTree

    P = np.unique(np.asarray(positions, dtype=np.float64), axis=0)
    if len(P) < 2:
        raise InputError(f"a survey map needs at least 2 distinct positions; the survey has {len(P)}",
                         field="positions", expected=">= 2 distinct positions", received=str(len(P)))
    d, _ = cKDTree(P).query(P, k=2)
    return float(np.median(d[:, 1]))


@dataclass(frozen=True)
class Extent:
    """The site: ``polygon`` (v, 2) its vertices in order (the last not repeating the first); ``convex`` when it
    is the surveyed positions' hull widened by ``margin`` (target units; 0 for a given boundary)."""

    polygon: np.ndarray
    convex: bool
    margin: float

    @classmethod
    def of_survey(cls, positions, margin: float | None = None) -> "Extent":
        """The convex hull of ``positions`` with each edge moved ``margin`` outwards (its corners bevelled; default
        :data:`MARGIN` times their :func:`spacing`)."""
        from scipy.spatial import ConvexHull, QhullError

        P = np.unique(np.asarray(positions, dtype=np.float64), axis=0)
        margin = MARGIN * spacing(P) if margin is None else margin
        try:
            hull = P[ConvexHull(P).vertices]  # counter-clockwise
        except (QhullError, ValueError):
            raise InputError(f"the surveyed positions span no area ({len(P)} distinct, on one line): a site needs "
                             "3 not in line, or a boundary polygon", field="positions",
                             expected="3 positions not in line", received=f"{len(P)} positions") from None
        return cls(polygon=_widened(hull, margin), convex=True, margin=float(margin))

    @classmethod
    def of_polygon(cls, vertices) -> "Extent":
        """A boundary polygon (simple, in target units, either orientation; a closing vertex is dropped)."""
        V = check_matrix(vertices, "boundary", n_columns=2, describe="target coordinates")
        if len(V) > 1 and np.array_equal(V[0], V[-1]):
            V = V[:-1]
        if len(V) < 3 or abs(_signed_area(V)) == 0:
            raise InputError(f"a boundary needs 3 or more vertices enclosing an area; got {len(V)}",
                             field="boundary", expected=">= 3 vertices, area > 0", received=f"{len(V)} vertices")
        return cls(polygon=V if _signed_area(V) > 0 else V[::-1], convex=False, margin=0.0)

    def contains(self, points) -> np.ndarray:
        """(m,) whether each of ``points`` (m, 2) lies inside (or on the boundary, to float error)."""
        P = np.asarray(points, dtype=np.float64).reshape(-1, 2)
        if self.convex:
            return (_edge_distances(self.polygon, P) <= 1e-9 * self.size).all(axis=1)
        return _inside(self.polygon, P)

    def cells(self, step: float) -> np.ndarray:
        """(g, 2) the centres of the square cells ``step`` wide tiling the polygon's bounding box from its lower
        corner that lie inside."""
        lo, hi = self.polygon.min(axis=0), self.polygon.max(axis=0)
        nx, ny = np.maximum(np.ceil((hi - lo) / step).astype(int), 1).tolist()
        gx, gy = lo[0] + (np.arange(nx) + 0.5) * step, lo[1] + (np.arange(ny) + 0.5) * step
        G = np.stack(np.meshgrid(gx, gy), axis=-1).reshape(-1, 2)
        return G[self.contains(G)]

    @property
    def size(self) -> float:
        """The longer side of the polygon's bounding box."""
        return float((self.polygon.max(axis=0) - self.polygon.min(axis=0)).max())


def _signed_area(V: np.ndarray) -> float:
    x, y = V[:, 0], V[:, 1]
    return 0.5 * float(np.dot(x, np.roll(y, -1)) - np.dot(np.roll(x, -1), y))


def _normals(V: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each edge's outward unit normal and offset of a counter-clockwise polygon: ``n . p - c`` > 0 outside."""
    edge = np.roll(V, -1, axis=0) - V
    n = np.column_stack([edge[:, 1], -edge[:, 0]]) / np.linalg.norm(edge, axis=1, keepdims=True)
    return n, (n * V).sum(axis=1)


def _edge_distances(V: np.ndarray, P: np.ndarray) -> np.ndarray:
    n, c = _normals(V)
    return P @ n.T - c


def _widened(V: np.ndarray, margin: float) -> np.ndarray:
    """The convex counter-clockwise polygon ``V`` with every edge moved ``margin`` outwards: each vertex split
    in two, one on each of its edges' moved lines (bevelled corners: every point within ``margin`` of the hull)."""
    if margin <= 0:
        return V
    n, _ = _normals(V)
    before = np.roll(n, 1, axis=0)  # the normal of the edge ending at each vertex
    return np.stack([V + margin * before, V + margin * n], axis=1).reshape(-1, 2)


def _inside(V: np.ndarray, P: np.ndarray) -> np.ndarray:
    """Even-odd point-in-polygon by horizontal rays (vectorised over points, a loop over edges)."""
    inside = np.zeros(len(P), dtype=bool)
    x, y = P[:, 0], P[:, 1]
    for (x0, y0), (x1, y1) in zip(V, np.roll(V, -1, axis=0)):
        crosses = (y0 > y) != (y1 > y)
        with np.errstate(divide="ignore", invalid="ignore"):
            xc = x0 + (y - y0) * (x1 - x0) / (y1 - y0)
        inside ^= crosses & (x < xc)
    return inside


def site_shares(positions, extent: Extent, points: int = 40_000) -> np.ndarray:
    """(k,) the share of ``extent`` nearest each of ``positions`` (k, 2): its Voronoi cell within the site,
    measured on a regular grid of about ``points`` points over the extent (each grid point counted for its
    nearest position). Sums to 1; a position no grid point is nearest gets 0."""
    from scipy.spatial import cKDTree

    P = np.asarray(positions, dtype=np.float64)
    lo, hi = extent.polygon.min(axis=0), extent.polygon.max(axis=0)
    G = extent.cells(float(np.sqrt(np.prod(hi - lo) / points)))
    if not len(G):
        return np.full(len(P), 1.0 / len(P))
    return np.bincount(cKDTree(P).query(G)[1], minlength=len(P)) / len(G)


def interpolate(positions: np.ndarray, values: np.ndarray, at: np.ndarray, bandwidth: float, *, log: bool = False,
                leave_out: bool = False) -> np.ndarray:
    """(m,) ``values`` (k,) at ``positions`` (k, 2) interpolated at ``at`` (m, 2): a Gaussian-kernel weighted mean
    (Nadaraya-Watson, ``bandwidth`` wide) over the :data:`NEIGHBOURS` nearest positions with a finite value; of
    the logarithm with ``log``. ``leave_out``: ``at`` is ``positions`` and each leaves itself out (the map's
    accuracy). NaN where no position has a value."""
    from scipy.spatial import cKDTree

    finite = np.isfinite(values) & ((values > 0) if log else True)
    P, v = np.asarray(positions, dtype=np.float64)[finite], np.asarray(values, dtype=np.float64)[finite]
    at = np.asarray(at, dtype=np.float64)
    out = np.full(len(at), np.nan)
    k = min(NEIGHBOURS + int(leave_out), len(P))
    if len(P) - int(leave_out) < 1 or not len(at):
        return out
    d, j = cKDTree(P).query(at[finite] if leave_out else at, k=k)
    d, j = d.reshape(len(d), -1), j.reshape(len(j), -1)
    if leave_out:
        d, j = d[:, 1:], j[:, 1:]
    w = np.exp(-0.5 * (d / bandwidth) ** 2) + 1e-300  # the nearest still weighs when all are far
    y = np.log(v[j]) if log else v[j]
    mean = (w * y).sum(axis=1) / w.sum(axis=1)
    mean = np.exp(mean) if log else mean
    if leave_out:
        out[finite] = mean
        return out
    return mean


@dataclass(frozen=True)
class SurveyMap:
    """The map: cell ``centres`` (c, 2) of square cells ``cell`` wide; per cell ``expected_area``,
    ``expected_error`` (NaN where the bundle kept no honest error) and ``distance`` (to the nearest surveyed
    position); the ``extent``, the survey's ``spacing``, the ``positions`` it was drawn from, the served
    ``method`` and ``accuracy`` (each figure's leave-one-position-out median absolute relative error, and how
    many positions it was measured at)."""

    centres: np.ndarray
    cell: float
    expected_area: np.ndarray
    expected_error: np.ndarray
    distance: np.ndarray
    extent: Extent
    spacing: float
    positions: np.ndarray
    method: str | None
    accuracy: dict

    def corners(self) -> np.ndarray:
        """(c, 5, 2) each cell's closed counter-clockwise ring."""
        h = self.cell / 2
        offsets = np.array([[-h, -h], [h, -h], [h, h], [-h, h], [-h, -h]])
        return self.centres[:, None, :] + offsets[None]


def survey_map(survey, *, boundary=None, margin: float | None = None, cells: int = CELLS,
               floor: int | None = None, method: str | None = None) -> SurveyMap:
    """The survey map of a bundle's ``survey`` (:class:`models.survey.Survey` with ``areas``): a grid of about
    ``cells`` cells along the longer side over the hull of its positions widened by ``margin`` (default
    :data:`MARGIN` times the :func:`spacing`), or over ``boundary`` (v, 2); ``floor``: only the positions of that
    floor code (a floor bundle; refused for a survey without floors). Raises :class:`InputError` when the survey
    keeps no per-position areas (retrain), is too small, or has no such floor."""
    if survey is None or survey.areas is None:
        raise InputError("the bundle keeps no per-position region areas (trained before the survey map): retrain it "
                         "to map it", field="bundle", expected="a bundle with survey areas", received="none")
    if not isinstance(cells, int) or not 2 <= cells <= 400:
        raise InputError(f"cells must be an integer in [2, 400]; got {cells!r}", field="cells",
                         expected="2 <= cells <= 400", received=repr(cells))
    keep = np.ones(len(survey.positions), bool) if floor is None or survey.floors is None else survey.floors == floor
    if floor is not None and not (survey.floors is not None and keep.any()):
        raise InputError(f"floor {floor} is not a floor code of this survey", field="floor",
                         expected="a floor code of the survey" if survey.floors is not None
                         else "no floor (the bundle has none)", received=str(floor))
    P = survey.positions[keep][:, :2]
    h = spacing(P)
    extent = Extent.of_polygon(boundary) if boundary is not None else Extent.of_survey(P, MARGIN * h if margin is None
                                                                                       else float(margin))
    cell = extent.size / cells
    G = extent.cells(cell)
    areas = survey.areas[keep]
    errors = np.full(len(P), np.nan) if survey.errors is None else survey.errors[keep]
    from scipy.spatial import cKDTree

    return SurveyMap(centres=G, cell=cell, expected_area=interpolate(P, areas, G, h, log=True),
                     expected_error=np.sqrt(interpolate(P, np.square(errors), G, h)),
                     distance=cKDTree(P).query(G)[0] if len(G) else np.zeros(0), extent=extent, spacing=h,
                     positions=P, method=method, accuracy={"area": _accuracy(P, areas, h, log=True),
                                                           "error": _accuracy(P, errors, h, log=False)})


def _accuracy(P: np.ndarray, values: np.ndarray, h: float, log: bool) -> dict:
    """Leave each position out, interpolate it from the others: the median absolute relative error and at how many
    positions (None with fewer than 3 positions holding a value)."""
    guess = interpolate(P, values, P, h, log=log, leave_out=True)
    ok = np.isfinite(guess) & np.isfinite(values) & (values > 0)
    if ok.sum() < 3:
        return {"median_abs_rel_error": None, "positions": int(ok.sum())}
    return {"median_abs_rel_error": float(np.median(np.abs(guess[ok] / values[ok] - 1))), "positions": int(ok.sum())}
