"""A labelled walk against a bundle: coverage with its binomial interval, region sizes, positioning errors,
floors, per group, and a verdict. The figures of ``lmve-evaluate`` (:mod:`training.commands.evaluate`).

Every row is answered as ``POST /predict-region`` answers it (the bundle's level, the served method unless
one is named), so the figures are the service's:

* **coverage** (for a floor bundle, the joint one) with its exact (Clopper-Pearson) 95 % interval and the
  one-sided binomial p-value of a shortfall against the level;
* **reliability**: coverage against level, each level's threshold from the bundle's stored calibration
  scores; a level is **short** when its one-sided p-value is below 5 % divided by the levels on the curve
  (and, for a group, by the groups of its column): Bonferroni;
* **typicality**: the rows' mean typicality p-value, and the service's shift test fed the walk in file
  order (its evidence per step, the row at which it reached ``1 / delta``);
* **region size**: true area, ``sqrt det C``, the accuracy radius (ground units with a CRS);
* **positioning error**: mean, median, RMSE, the 75th percentile, CEP and CE95 (numpy's linear
  interpolation);
* **floors**: the most probable floor's hit rate, floor-set and position coverage, and the IPIN score (the
  75th percentile of the horizontal error plus ``FLOOR_PENALTY_M`` per floor of difference);
* **error outliers**: a group whose median error is at least :data:`ERROR_RATIO` times the other rows' and
  above them by a one-sided Mann-Whitney test at 5 % is named.

Intervals and tests count **units** as training does (:func:`interval_units`: positions where readings
repeat them, ``--unit COL``, or rows); the figures say which.

The **verdict** holds when nothing is short: not the coverage at the level (5 %, one-sided), not a level
of the curve, not a group at the level or along its curve. ``docs/guides/validate.md`` describes the
report."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from models.answers import region_sizes
from models.exceptions import InputError
from training.figures.coverage import TEST_SIZE, Units, unit_test as _test
from training.figures.accuracy import error_figures
from training.figures.verdict import verdict

#: metres added per floor of difference in the IPIN score
FLOOR_PENALTY_M = 15.0
#: the reliability curve's levels when none are asked for
DEFAULT_LEVELS = "0.5:0.99"
#: a group's median error this many times the other rows' (and above them by test) is named
ERROR_RATIO = 1.5
#: the shift test's false-alarm level (the service's ``LMVE_SHIFT_DELTA`` default)
SHIFT_DELTA = 0.01
#: rows per step of the shift test over a walk (the service's step)
SHIFT_STEP = 256


def parse_levels(text: str) -> list[float]:
    """``"0.5:0.99"`` (0.50, 0.55, ..., 0.95 and 0.99), ``"0.5:0.9:0.1"`` (a step) or ``"0.8,0.9,0.95"``."""
    text = (text or "").strip()
    try:
        if ":" in text:
            parts = [float(p) for p in text.split(":")]
            if len(parts) not in (2, 3) or (len(parts) == 3 and parts[2] <= 0):
                raise ValueError
            lo, hi, step = parts[0], parts[1], parts[2] if len(parts) == 3 else 0.05
            levels = list(np.round(np.arange(lo, hi + 1e-9, step), 10)) + [hi]
        else:
            levels = [float(p) for p in text.split(",") if p.strip()]
    except ValueError:
        levels = []
    levels = sorted({round(float(v), 10) for v in levels})
    if not levels or any(not 0.0 < v < 1.0 for v in levels):
        raise InputError(f"--levels {text!r}: expected levels in (0, 1) as LO:HI, LO:HI:STEP or a comma list",
                         field="--levels", expected="e.g. 0.5:0.99 or 0.8,0.9,0.95", received=text)
    return levels


@dataclass(frozen=True)
class GroupBy:
    """One breakdown: the rows' values of ``column`` (``day``: the UTC date of a timestamp column)."""

    column: str
    day: bool = False

    @property
    def name(self) -> str:
        return f"day:{self.column}" if self.day else self.column

    @classmethod
    def parse(cls, text: str | None) -> list["GroupBy"]:
        """``"PHONEID,USERID,day:TIMESTAMP"`` -> one breakdown per item."""
        out = []
        for item in (text or "").split(","):
            item = item.strip()
            if not item:
                continue
            kind, sep, column = item.partition(":")
            if sep and kind.strip().lower() != "day":
                raise InputError(f"--group-by {item!r}: the only derived grouping is day:COLUMN", field="--group-by",
                                 expected="COLUMN or day:COLUMN", received=item)
            out.append(cls(column.strip(), True) if sep else cls(item))
        if len({g.name for g in out}) != len(out):
            raise InputError(f"--group-by {text!r} names a grouping twice", field="--group-by",
                             expected="distinct groupings", received=text)
        return out

    def labels(self, values) -> np.ndarray:
        """Each row's group as text (``1.0`` -> ``"1"``; a day as ``YYYY-MM-DD``)."""
        values = np.asarray(values)
        if self.day:
            return _days(values, self.column)
        return np.asarray([_text(v) for v in values.tolist()], dtype=object)


def _text(v) -> str:
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v).strip()


def _days(values: np.ndarray, column: str) -> np.ndarray:
    """UTC dates of Unix timestamps (seconds; milliseconds when above 1e11) or of date-time text."""
    import pandas as pd

    numbers = pd.to_numeric(pd.Series(values), errors="coerce")
    if numbers.notna().all():
        unit = "ms" if float(numbers.abs().max()) > 1e11 else "s"
        stamps = pd.to_datetime(numbers, unit=unit, utc=True)
    else:
        try:
            stamps = pd.to_datetime(pd.Series(values), utc=True)
        except (ValueError, TypeError) as exc:
            raise InputError(f"--group-by day:{column}: {column} holds neither Unix times nor dates ({exc})",
                             field="--group-by", expected="Unix seconds or ISO dates", received=str(values[0])) from None
    return stamps.dt.strftime("%Y-%m-%d").to_numpy(dtype=object)


@dataclass
class Walk:
    """A labelled walk: raw ``X`` (N, d), true positions ``Y`` (N, n), the client's estimates ``centers`` for a
    client-centre bundle, a floor bundle's true ``floors`` (and ``buildings``), and per :class:`GroupBy` name
    each row's group."""

    name: str
    sha256: str
    X: np.ndarray
    Y: np.ndarray
    centers: np.ndarray | None = None
    floors: np.ndarray | None = None
    buildings: np.ndarray | None = None
    groups: dict[str, np.ndarray] = field(default_factory=dict)
    #: where row 0 is in the file (``"line"``, 2 for a CSV; ``"row"``, 1 for Parquet)
    where: tuple[str, int] = ("line", 2)

    def line(self, i: int) -> str:
        return f"{self.where[0]} {i + self.where[1]}"


@dataclass
class RowFigures:
    """Per row of a walk: what :func:`summarise` reduces (over all rows or a group's)."""

    inside: np.ndarray          # (N,) bool: the guarantee's event (joint for a floor bundle)
    error: np.ndarray           # (N,) centre to truth
    area: np.ndarray            # (N,) true area (ground m^2 with a CRS)
    sqrt_det: np.ndarray        # (N,) sqrt det C (target units)
    accuracy: np.ndarray        # (N,) accuracy radius
    floor: dict | None = None   # a floor bundle's per-row arrays: floor_inside, position_inside, hit, difference, set_size
    typicality: np.ndarray | None = None         # (N,) typicality p-values (a bundle with the step)
    typicality_scores: np.ndarray | None = None  # (N,) what the shift test ranks


def answer_rows(model, walk: Walk, method: str | None = None):
    """``(answer, RowFigures)``: the walk's rows answered as ``/predict-region`` answers them, and their figures."""
    answer = model.predict_region(walk.X, method, kind="ellipsoid", centers=walk.centers, typicality=True)
    region = answer.regions
    inside = region.contains(walk.Y)
    crs = model.crs if model.n_targets == 2 else None
    area, ground, accuracy = region_sizes(region, crs)
    if crs is not None:
        area, error = ground, crs.distance_m(region.centers, walk.Y)
    else:
        error = np.linalg.norm(region.centers - walk.Y, axis=1)
    sqrt_det = region.volume("paper")
    floor = None
    if answer.floors is not None:
        codes = _floor_codes(model, walk)
        rows = np.arange(len(codes))
        floor_inside = answer.floors.member[rows, codes]
        predicted = answer.floors.proba.argmax(axis=1)
        floor = {"floor_inside": floor_inside, "position_inside": inside, "hit": predicted == codes,
                 "difference": _floor_difference(model.floors.labels, predicted, codes),
                 "set_size": answer.floors.member.sum(axis=1), "codes": codes, "proba": answer.floors.proba}
        inside = inside & floor_inside
    return answer, RowFigures(inside=inside, error=error, area=area, sqrt_det=sqrt_det, accuracy=accuracy, floor=floor,
                              typicality=answer.typicality, typicality_scores=answer.typicality_scores)


def _floor_codes(model, walk: Walk) -> np.ndarray:
    """The walk's true floor classes, or an :class:`InputError` naming the file's line of an unknown one."""
    try:
        return model.floors.labels.encode(walk.floors, walk.buildings)
    except InputError as exc:
        field_ = exc.field or ""
        if "[" in field_:
            i = int(field_[field_.index("[") + 1:field_.index("]")])
            column = model.floors.labels.columns[0 if field_.startswith("buildings") else -1]
            raise InputError(f"{walk.name}: {column} at {walk.line(i)}: {exc}", field=column, expected=exc.expected,
                             received=f"{exc.received} at {walk.line(i)}") from None
        raise


def _floor_difference(labels, predicted: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """Floors between the predicted class and the true one: the floor labels' difference when they are
    integers, else 1 where they differ."""
    floor_col = labels.values[:, -1]
    if labels.numeric[-1]:
        number = floor_col.astype(np.int64)
        return np.abs(number[predicted] - number[codes]).astype(np.float64)
    return (floor_col[predicted] != floor_col[codes]).astype(np.float64)


def interval_units(walk: Walk, unit: str | None = None) -> Units:
    """The units a walk's intervals count: ``unit`` ``"rows"``, ``"positions"`` (the walk's distinct true
    positions) or a column the walk was read with (its values); ``None``: positions where most rows share
    their position with another (a survey's readings, as training groups them), else rows."""
    from models.calibration.grouping import position_codes

    positions = np.unique(walk.Y, axis=0, return_inverse=True)[1].ravel()
    if unit is None:
        return Units("positions", positions, True) if position_codes(walk.Y) is not None else Units("rows", None, True)
    if unit == "rows":
        return Units("rows")
    if unit == "positions":
        return Units("positions", positions)
    return Units(f"{unit} units", walk.groups[unit])


def summarise(rows: RowFigures, level: float, mask: np.ndarray | None = None, units: Units | None = None) -> dict:
    """The figures of the rows ``mask`` selects (all by default): coverage over ``units`` (rows by default),
    its interval and test, the row share, the sizes, the errors, and a floor bundle's floor figures."""
    units = units or Units("rows")
    sel = slice(None) if mask is None else mask
    inside = rows.inside[sel]
    n = int(inside.size)
    test = _test(inside, level, units.of(mask))
    area = rows.area[sel]
    counted = units.of(mask)
    out = {"n_rows": n, "coverage": test["coverage"], "coverage_rows": float(inside.mean()),
           "coverage_interval": test["interval"], "p_value": test["p_value"],
           "interval_units": {"unit": units.name, "n": n if counted is None else int(np.unique(counted).size)},
           "holds": bool(test["p_value"] >= TEST_SIZE), "area_mean": float(np.mean(area)),
           "area_median": float(np.median(area)), "sqrt_det_mean": float(np.mean(rows.sqrt_det[sel])),
           "accuracy_mean": float(np.mean(rows.accuracy[sel])), "accuracy_median": float(np.median(rows.accuracy[sel])),
           "error": error_figures(rows.error[sel]),
           "typicality_mean": None if rows.typicality is None else float(np.mean(rows.typicality[sel]))}
    if rows.floor is not None:
        f = {k: np.asarray(v)[sel] for k, v in rows.floor.items() if k not in ("proba",)}
        out["floors"] = {"joint_coverage": out["coverage"], "floor_set_coverage": float(np.mean(f["floor_inside"])),
                         "position_coverage": float(np.mean(f["position_inside"])),
                         "floor_hit_rate": float(np.mean(f["hit"])), "set_size_mean": float(np.mean(f["set_size"])),
                         "ipin_score": float(np.percentile(rows.error[sel] + FLOOR_PENALTY_M * f["difference"], 75))}
    return out


def level_insides(model, walk: Walk, method: str, rows: RowFigures, levels: list[float]) -> dict:
    """``level -> (N,) inside`` at each of ``levels`` (``None`` where the calibration cannot attain it): each
    level's threshold from the stored calibration scores, the rows' conformity scores computed once."""
    reg = model.methods[method]
    X = model.standardise(walk.X)
    mu = model.predict_center(walk.X, walk.centers)
    scores = np.asarray(reg.shape_.conformity_scores(X, walk.Y - mu), dtype=np.float64)
    scores = np.where(np.isfinite(scores), scores, np.inf)
    floors = model.floors if rows.floor is not None and method in (model.floors.joint if model.floors else {}) else None
    top = floors.joint[method].calibrator.max_coverage if floors is not None else reg.calibrator_.max_coverage
    out = {}
    for level in levels:
        if level > top:
            out[level] = None
        elif floors is None:
            out[level] = scores <= reg.threshold(level)
        else:
            t, alpha = floors.threshold(method, level)
            member = floors.sets(rows.floor["proba"], t)
            out[level] = member[np.arange(len(scores)), rows.floor["codes"]] & (scores <= alpha)
    return out


def curve(insides: dict, mask: np.ndarray | None = None, families: int = 1, units: Units | None = None) -> list[dict]:
    """The reliability curve of the rows ``mask`` selects: per level its coverage over ``units`` (rows by
    default), exact interval and one-sided p-value, and ``short`` when the p-value is below :data:`TEST_SIZE`
    over the attainable levels times ``families`` (the groups of the column a group's curve belongs to)."""
    tests = max(sum(v is not None for v in insides.values()), 1) * max(families, 1)
    labels = (units or Units("rows")).of(mask)
    out = []
    for level, inside in insides.items():
        if inside is None:
            out.append({"level": level, "coverage": None, "attainable": False, "short": False})
            continue
        inside = inside if mask is None else inside[mask]
        test = _test(inside, level, labels)
        out.append({"level": level, "coverage": test["coverage"], "interval": test["interval"],
                    "p_value": test["p_value"], "attainable": True, "short": bool(test["p_value"] < TEST_SIZE / tests)})
    return out


def short_levels(points: list[dict]) -> list[float]:
    """The levels of a curve (:func:`curve`) flagged short."""
    return [r["level"] for r in points if r["short"]]


def shift_evidence(model, rows: RowFigures, delta: float = SHIFT_DELTA) -> dict | None:
    """The service's shift test fed the walk's rows in order (:data:`SHIFT_STEP` at a time): ``evidence``
    (final), ``max``, ``alarm_at_row`` (1-based; None if it never reached ``1 / delta``), ``delta`` and
    ``trajectory`` (``[rows, evidence]`` after each step). None for a bundle without the typicality step."""
    if model.typicality is None or rows.typicality_scores is None:
        return None
    test = model.typicality.shift_test(delta=delta)
    scores = np.asarray(rows.typicality_scores, dtype=np.float64)
    trajectory = []
    for start in range(0, len(scores), SHIFT_STEP):
        test.update(scores[start:start + SHIFT_STEP])
        trajectory.append([int(test.queries_), test.evidence])
    return {"evidence": test.evidence, "max": max((e for _, e in trajectory), default=1.0),
            "alarm_at_row": test.alarm_at_, "delta": delta, "rows": int(test.queries_), "trajectory": trajectory}


def error_outliers(error: np.ndarray, labels: np.ndarray, values: list[str]) -> list[dict]:
    """Groups whose errors are far above the other rows': median at least :data:`ERROR_RATIO` times theirs and
    larger by a one-sided Mann-Whitney test at :data:`TEST_SIZE` over the groups."""
    from scipy.stats import mannwhitneyu

    out = []
    for v in values:
        mask = labels == v
        if mask.sum() < 3 or (~mask).sum() < 3:
            continue
        mine, rest = float(np.median(error[mask])), float(np.median(error[~mask]))
        if rest > 0 and mine < ERROR_RATIO * rest:
            continue
        p = float(mannwhitneyu(error[mask], error[~mask], alternative="greater").pvalue)
        if p < TEST_SIZE / max(len(values), 1):
            out.append({"group": v, "median": mine, "rest_median": rest, "ratio": mine / rest if rest > 0 else None,
                        "p_value": p})
    return out


def evaluate(model, walk: Walk, *, method: str | None = None, levels: list[float] | None = None,
             group_by: list[GroupBy] = (), unit: str | None = None) -> tuple[dict, RowFigures]:
    """The figures of ``walk`` against ``model`` (what ``metrics.json`` holds, see the module docstring) and the
    per-row figures they reduce; ``unit``: what the intervals count (:func:`interval_units`)."""
    if model.n_targets < 2:
        raise InputError("lmve-evaluate needs 2 or more targets", field="targets", expected=">= 2",
                         received=str(model.n_targets))
    if model.floors is not None and walk.floors is None:
        raise InputError(f"this bundle calibrates floors and positions jointly; {walk.name} needs its floor column(s) "
                         f"{', '.join(model.floors.labels.columns)}", field=model.floors.labels.columns[-1],
                         expected="a floor column", received="none")
    level = float(model.coverage)
    counted = interval_units(walk, unit)
    answer, rows = answer_rows(model, walk, method)
    out = {"n_rows": int(walk.X.shape[0]), "level": level, "method": answer.method,
           "fallback_reason": answer.fallback_reason, "units": units_of(model), "interval_over": counted.record(),
           **summarise(rows, level, units=counted)}
    insides = level_insides(model, walk, answer.method, rows, levels or parse_levels(DEFAULT_LEVELS))
    out["reliability"] = curve(insides, units=counted)
    out["short_levels"] = short_levels(out["reliability"])
    out["shift"] = shift_evidence(model, rows)
    groups, outliers = {}, {}
    for g in group_by:
        labels = walk.groups[g.name]
        values = sorted(set(labels.tolist()), key=_natural)
        per = {}
        for v in values:
            mask = labels == v
            s = per[v] = summarise(rows, level, mask, counted)
            s["holds_level"] = bool(s["p_value"] >= TEST_SIZE / max(len(values), 1))
            s["reliability"] = curve(insides, mask, families=len(values), units=counted)
            s["short_levels"] = short_levels(s["reliability"])
            s["holds"] = s["holds_level"] and not s["short_levels"]
        groups[g.name] = per
        found = error_outliers(rows.error, labels, values)
        if found:
            outliers[g.name] = found
    out["groups"] = groups
    out["error_outliers"] = outliers
    out["verdict"] = verdict(out, model)
    return out, rows


def _natural(v: str):
    try:
        return (0, float(v), v)
    except ValueError:
        return (1, 0.0, v)


def units_of(model) -> dict:
    """The units of a walk's figures: metres where the bundle declares a CRS, else target units."""
    if model.crs is not None and model.n_targets == 2:
        return {"error": "m", "area": "m^2", "accuracy": "m", "ground": True}
    unit = "target units"
    return {"error": unit, "area": f"{unit}^{model.n_targets}" if model.n_targets != 2 else f"{unit}^2",
            "accuracy": unit, "ground": False}
