"""What an answer says of each row, declared once: :data:`FIELDS`, one :class:`Output` per field.

Every surface is derived from the table: the JSON rows of ``/predict-region`` and ``/contains``
(:func:`rows`) and their OpenAPI schemas, the Open Inference Protocol's output tensors and their
metadata, the GeoJSON properties (:func:`properties`) and ``lmve-predict``'s columns
(:func:`columns`). Adding a field is one entry here plus its computation, a reader of :class:`Batch`.

A :class:`Batch` computes the geometry of one answer's rows once (closed forms for plane ellipses,
an eigendecomposition otherwise), so a field is a cheap read of it; the JSON rows are built column
by column, then zipped: the serving hot path.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, lru_cache
from itertools import repeat
from typing import Callable

import numpy as np

from models import geometry
from models._validation import all_finite

#: the two answers: ``/predict-region``'s regions, ``/contains``'s results
REGION, CONTAINS = "region", "contains"
BOTH = frozenset({REGION, CONTAINS})
#: ring vertices of a GeoJSON polygon when the request does not set ``boundary_points``
DEFAULT_VERTICES = 64


class Batch:
    """One answer's rows (a :class:`~models.model.RegionAnswer` or :class:`~models.model.Assessment`)
    and what its fields read, each computed once: the sizes, the map figures, the target names."""

    def __init__(self, answer, model=None, boundary_points: int | None = None):
        self.answer, self.model, self.boundary_points = answer, model, boundary_points
        regions = getattr(answer, "regions", None)
        self.regions = regions
        self.n = len(regions.centers) if regions is not None else len(answer.inside)

    @cached_property
    def closed_form(self) -> bool:
        """Plane ellipses, all bounded: the closed forms (the localisation case)."""
        return self.regions.centers.shape[1] == 2 and all_finite(self.regions.shapes)

    @cached_property
    def ellipses(self) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """``(volume, semi_axes, orientation)`` per row (orientation ``None`` unless n = 2)."""
        shapes = self.regions.shapes
        if self.closed_form:
            volumes, semi_axes, orientation = geometry.ellipse_2d(shapes)
        else:
            volumes = self.regions.volume("lebesgue")
            semi_axes, directions = geometry.axes(shapes)  # one eigh for the axes and the orientation
            orientation = geometry.major_axis_angle(directions) if shapes.shape[1] == 2 else None
        return volumes, np.ascontiguousarray(semi_axes), orientation

    @property
    def volumes(self) -> np.ndarray:
        """The true volume per row (area for n = 2); without the axes when they are not closed forms."""
        return self.ellipses[0] if self.closed_form else np.asarray(self.regions.volume("lebesgue"), dtype=np.float64)

    @cached_property
    def sizes(self) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
        """``(area, ground_area, accuracy)``: :func:`region_sizes` of the rows with the model's CRS."""
        return region_sizes(self.regions, self.model.crs)

    @cached_property
    def _figures(self) -> tuple[np.ndarray, dict | None]:
        from models.geo import ellipse_figures

        rows = np.flatnonzero(np.isfinite(self.regions.shapes).all(axis=(1, 2)))
        if not len(rows):
            return rows, None
        return rows, ellipse_figures(self.regions.centers[rows], self.regions.shapes[rows], self.model.crs,
                                     self.boundary_points or DEFAULT_VERTICES)

    def figure(self, key: str) -> list:
        """A map figure of :func:`models.geo.ellipse_figures` per row as plain values (``None``: unbounded)."""
        out: list = [None] * self.n
        rows, figures = self._figures
        if figures is not None:
            for i, value in zip(rows.tolist(), figures[key].tolist()):
                out[i] = value
        return out


@dataclass(frozen=True)
class Output:
    """One field of an answer and how each surface carries it.

    ``of``: the answers it belongs to (:data:`REGION`, :data:`CONTAINS`); ``value(batch)``: the JSON
    rows' and the tensors' value, an array over rows, a scalar for every row, or ``None`` (``None``
    for every row, or the field left out when ``omit_none``); ``schema``: its JSON type (``required``:
    in every row of the schema); ``tensor``: its V2 ``(datatype, dims)``, dims after the rows' one
    (``"n"``: the targets); ``geo(batch)``: its GeoJSON property (``SAME``: ``value``'s); ``columns(batch)``:
    its ``lmve-predict`` columns, a dict of arrays."""

    name: str
    of: frozenset
    doc: str
    schema: object = None
    value: Callable | None = None
    required: bool = True
    omit_none: bool = False
    tensor: tuple[str, tuple[str, ...]] | None = None
    geo: Callable | str | None = None
    columns: Callable | None = None

    def geo_value(self, batch: Batch):
        """The GeoJSON property over the batch's rows (see :class:`Output`)."""
        return self.value(batch) if self.geo == SAME else self.geo(batch)


#: ``Output.geo``: the GeoJSON property is the JSON rows' value
SAME = "same"


def _upper_triangle(b: Batch) -> dict:
    shapes, n = b.regions.shapes, b.regions.shapes.shape[1]
    return {f"shape_{i}{j}": shapes[:, i, j] for i in range(n) for j in range(i, n)}


def _accuracy_column(model) -> str:
    return "accuracy_m" if model.crs is not None and model.n_targets == 2 else "accuracy"


def _floor_rows(b: Batch):
    return None if b.answer.floors is None else b.answer.floors.rows()


def _floor_columns(b: Batch) -> dict:
    floors = b.answer.floors
    if floors is None:
        return {}
    labels, member, proba = floors.labels, floors.member, floors.proba
    top = proba.argmax(axis=1)
    out = {}
    for j, role in enumerate(labels.roles):
        values = labels.values[top, j]
        out[role] = values.astype(np.int64) if labels.numeric[j] else values.astype(object)
    out["floor_probability"] = proba[np.arange(len(top)), top]
    out["floor_set"] = np.asarray([";".join("/".join(str(v) for k, v in item.items() if k != "probability")
                                            for item in row) for row in floors.rows()], dtype=object)
    out["floor_set_size"] = member.sum(axis=1).astype(np.int64)
    return out


def _column(name: str, read: Callable) -> Callable:
    """``lmve-predict``'s one column ``name`` (none when ``read`` gives ``None``)."""
    def columns(b: Batch) -> dict:
        value = read(b)
        return {} if value is None else {name: np.asarray(value)}
    return columns


def _typicality(b: Batch):
    return b.answer.typicality


R, C = frozenset({REGION}), frozenset({CONTAINS})
FLOATS, MATRIX = list[float], list[list[float]]
TYPICAL = ("how typical the row's features are of the calibration rows: the conformal p-value of its typicality "
           "score (small: unlike anything calibrated, so the guarantee may not hold for it); null for a bundle "
           "trained before the typicality step (concepts/shift-alarm)")

#: the fields, in the order every surface lists them
FIELDS: tuple[Output, ...] = (
    Output("row", R, "the row's index in the request", geo=lambda b: range(b.n)),
    Output("center", R, "centre mu(x)", FLOATS, lambda b: b.regions.centers, tensor=("FP64", ("n",)),
           geo=lambda b: b.figure("center"),
           columns=lambda b: {f"center_{t}": b.regions.centers[:, j] for j, t in enumerate(b.model.target_names)}),
    Output("shape", R, "calibrated C: region = {y : (y-c)^T C^-1 (y-c) <= 1}", MATRIX, lambda b: b.regions.shapes,
           tensor=("FP64", ("n", "n")), columns=_upper_triangle),
    Output("volume", R, "true volume (area for n = 2)", float, lambda b: b.volumes, tensor=("FP64", ()),
           columns=lambda b: {"area": b.sizes[0]}),
    Output("accuracy_m", R, "the radius around the centre that holds the ellipse (W3C Geolocation's `accuracy` at "
           "coverage 0.95): ground metres with a CRS, else target units", geo=lambda b: b.figure("accuracy_m"),
           columns=lambda b: {_accuracy_column(b.model): b.sizes[2]}),
    Output("area_m2", R, "the ellipse's area: square metres on the ground with a CRS, else target units",
           geo=lambda b: b.figure("area_m2"), columns=_column("area_m2", lambda b: b.sizes[1])),
    Output("coverage", R, "the level the region holds the true position with", float, lambda b: b.regions.coverage,
           geo=SAME),
    Output("method", R, "the method that answered", str, lambda b: b.answer.method, geo=SAME,
           columns=lambda b: {"method": np.full(b.n, b.answer.method, dtype=object)}),
    Output("semi_axes", R, "semi-axis lengths, longest first (GeoJSON: in metres with a CRS)", FLOATS,
           lambda b: b.ellipses[1], geo=lambda b: b.figure("semi_axes_m")),
    Output("orientation", R, "angle of the major axis from the first target axis, radians in (-pi/2, pi/2] (n = 2 "
           "only)", float | None, lambda b: b.ellipses[2], geo=lambda b: b.figure("orientation")),
    Output("bearing_deg", R, "with a CRS: the major axis' azimuth from true north, degrees", omit_none=True,
           geo=lambda b: None if b.model.crs is None else b.figure("bearing_deg")),
    Output("boundary", R, "closed polygon (first point repeated)", MATRIX | None, required=False,
           value=lambda b: None if not b.boundary_points else geometry.boundary_points(
               b.regions.centers, b.regions.shapes, b.boundary_points, closed=True)),
    Output("inside", C, "the point in its row's ellipse (and, when `floors` were sent, the floor in the row's floor "
           "set)", bool, lambda b: b.answer.inside, tensor=("BOOL", ()),
           columns=_column("inside", lambda b: b.answer.inside)),
    Output("distance", C, "scaled Mahalanobis distance; <= 1 inside", float, lambda b: b.answer.distance,
           tensor=("FP64", ()), columns=_column("distance", lambda b: b.answer.distance)),
    Output("p_value", C, "conformal p-value of the point: (1 + #{alpha_i >= M}) / (m + 1); with `floors`, of the "
           "joint score", float, lambda b: b.answer.p_value, tensor=("FP64", ()),
           columns=_column("p_value", lambda b: b.answer.p_value)),
    Output("typicality", BOTH, TYPICAL, float | None, _typicality, required=False, tensor=("FP64", ()), geo=SAME,
           columns=_column("typicality", _typicality)),
    Output("floors", R, "a floor bundle's floor set (absent otherwise), most probable first: the true floor is in it "
           "and the true position in the ellipse with probability `coverage`, jointly", list[dict] | None, _floor_rows,
           required=False, omit_none=True, geo=SAME, columns=_floor_columns),
    Output("floor_inside", C, "the floor in the row's floor set (present only when the request sent `floors`)",
           bool | None, lambda b: b.answer.floor_inside, required=False, omit_none=True),
)
#: each field by name
BY_NAME = {f.name: f for f in FIELDS}


def fields(answer: str, surface: str = "value") -> tuple[Output, ...]:
    """The fields of ``answer`` (:data:`REGION`, :data:`CONTAINS`) a surface carries (``value``: JSON rows
    and tensors; ``tensor``, ``geo``, ``columns``), in table order."""
    key = (id(FIELDS), answer, surface)  # the table is a module constant: filtered once per answer and surface
    if key not in _FILTERED:
        _FILTERED[key] = tuple(f for f in FIELDS if answer in f.of and getattr(f, surface) is not None)
    return _FILTERED[key]


_FILTERED: dict[tuple, tuple[Output, ...]] = {}


def _per_row(value, n: int):
    if type(value) is np.ndarray:
        return value.tolist()  # plain lists: cheaper to make and to write than numpy rows
    if value is None or isinstance(value, (str, float, int, bool)):
        return repeat(value, n)
    return value


@lru_cache(maxsize=64)
def _row_maker(names: tuple[str, ...]) -> Callable:
    """A function of one value per name that returns the row: a dict display compiled once per set of names,
    twice as fast per row as ``dict(zip(...))`` (the rows are the hot path's per-row cost)."""
    args = [f"v{i}" for i in range(len(names))]
    pairs = ", ".join(f"{name!r}: {arg}" for name, arg in zip(names, args))
    return eval(f"lambda {', '.join(args)}: {{{pairs}}}")  # names: the table's identifiers, never a request's


def _zip(names: list, columns: list) -> list[dict]:
    return list(map(_row_maker(tuple(names)), *columns))


def _table(batch: Batch, chosen: tuple[Output, ...], read: Callable) -> list[dict]:
    """One dict per row of the ``chosen`` fields' values (``read(field, batch)``), the ``omit_none`` ones
    left out when ``None``."""
    names, columns = [], []
    for f in chosen:
        value = read(f, batch)
        if value is None and f.omit_none:
            continue
        names.append(f.name)
        columns.append(_per_row(value, batch.n))
    return _zip(names, columns)


def rows(batch: Batch, answer: str) -> list[dict]:
    """The JSON rows of ``batch`` for ``answer`` (:data:`REGION`, :data:`CONTAINS`): each field's value."""
    return _table(batch, fields(answer), _value)


def properties(batch: Batch) -> list[dict]:
    """A region answer's GeoJSON Feature properties, one dict per row (needs ``batch.model``)."""
    return _table(batch, fields(REGION, "geo"), Output.geo_value)


def _value(field: Output, batch: Batch):
    return field.value(batch)


def columns(batch: Batch, answer: str) -> dict[str, np.ndarray]:
    """``lmve-predict``'s columns of ``batch`` for ``answer``, in table order (needs ``batch.model``)."""
    out: dict[str, np.ndarray] = {}
    for f in fields(answer, "columns"):
        out.update(f.columns(batch))
    return out


def tensor_names(answer: str | None = None) -> tuple[str, ...]:
    """The V2 output tensors (of one answer, or all), in table order."""
    return tuple(f.name for f in FIELDS if f.tensor is not None and (answer is None or answer in f.of))


def region_sizes(region, crs) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
    """``(area, ground_area, accuracy)`` per row of ``region``: the true area in target units, with a ``crs``
    (2-D targets) the area on the ground in m^2 (else ``None``), and the accuracy radius (the semi-major axis;
    with a CRS the GeoJSON answer's ``accuracy_m`` in ground metres). Unbounded rows get ``inf``."""
    from models.geo import ellipse_figures

    centers, shapes = region.centers, region.shapes
    n_rows, n = centers.shape
    bounded = np.isfinite(shapes).all(axis=(1, 2))
    accuracy = np.full(n_rows, np.inf)
    ground = None
    if n == 2 and crs is not None:
        ground = np.full(n_rows, np.inf)
        if bounded.any():
            figures = ellipse_figures(centers[bounded], shapes[bounded], crs)
            ground[bounded], accuracy[bounded] = figures["area_m2"], figures["accuracy_m"]
    elif bounded.any():  # the semi-major axis: the answer's closed form in 2-D
        b = shapes[bounded]
        accuracy[bounded] = geometry.ellipse_2d(b)[1][:, 0] if n == 2 else geometry.axes(b)[0].max(axis=1)
    return np.asarray(region.volume("lebesgue"), dtype=np.float64), ground, accuracy
