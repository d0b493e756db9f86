"""Positions and a site's polygon as a command reads them (``lmve-plan --candidates``, ``--boundary``;
``lmve-train --site-boundary``): a CSV with the targets' columns by name (or ``lon,lat`` when the bundle declares
a CRS), or for a polygon a GeoJSON Polygon. The :mod:`csv` and :mod:`json` modules, not the training tables'
pandas readers: ``lmve-plan`` runs on a serving install. A missing file, a missing column or a bad cell (named by
its line and column) is an :class:`~models.exceptions.InputError`.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np

from models.exceptions import InputError


def read_points(path: Path, model, flag: str) -> np.ndarray:
    """(m, 2) target coordinates from a CSV with the bundle's target columns, or ``lon,lat`` with a CRS."""
    names = list(model.target_names)
    columns, rows, geo = _csv_columns(path, flag, names, lonlat=model.crs is not None)
    out = _numbers(path, flag, columns, rows)
    return model.crs.from_lonlat(out) if geo else out


def read_polygon(path: Path, target_names=None, crs=None, flag: str = "--site-boundary") -> np.ndarray:
    """A site's polygon (v, 2) in target coordinates: a GeoJSON Polygon (or the first in a Feature or
    FeatureCollection; WGS84 with ``crs``, else in target coordinates), or a CSV of its vertices in order (the
    ``target_names`` columns, or with ``crs`` ``lon,lat``; without names, the first two columns)."""
    path = _existing(path, flag, "a GeoJSON or CSV file")
    if path.suffix.lower() in (".geojson", ".json"):
        ring = _geojson_ring(path, flag)
        return crs.from_lonlat(ring) if crs is not None else ring
    columns, rows, geo = _csv_columns(path, flag, target_names, lonlat=crs is not None)
    out = _numbers(path, flag, columns, rows)
    return crs.from_lonlat(out) if geo else out


def _existing(path: Path, flag: str, expected: str) -> Path:
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{flag} {path} does not exist", field=flag, expected=expected, received=str(path))
    return path


def _geojson_ring(path: Path, flag: str) -> np.ndarray:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise InputError(f"{flag} {path}: not readable GeoJSON: {exc}", field=flag, expected="a GeoJSON Polygon",
                         received=str(path)) from None
    for item in [doc, *(doc.get("features") or [])] if isinstance(doc, dict) else []:
        geometry = item.get("geometry", item) if isinstance(item, dict) else None
        if isinstance(geometry, dict) and geometry.get("type") == "Polygon":
            return np.asarray(geometry["coordinates"][0], dtype=np.float64)
    raise InputError(f"{flag} {path} holds no Polygon", field=flag, expected="a GeoJSON Polygon",
                     received=str(doc.get("type") if isinstance(doc, dict) else type(doc).__name__))


def _csv_columns(path: Path, flag: str, names, lonlat: bool) -> tuple[list[str], list[list[str]], bool]:
    """(the two columns to read, the data rows, whether they are lon/lat) of a CSV of positions."""
    with open(_existing(path, flag, "a CSV file"), newline="") as f:
        rows = list(csv.reader(f))
    if not rows:
        raise InputError(f"{flag} {path} is empty", field=flag, expected="a header and rows", received="nothing")
    header = [h.strip() for h in rows[0]]
    if names and all(n in header for n in names):
        return list(names), rows, False
    if lonlat and {"lon", "lat"} <= set(header):
        return ["lon", "lat"], rows, True
    if not names and len(header) >= 2:
        return header[:2], rows, False
    want = ", ".join(names or ["two coordinate columns"]) + (" (or lon, lat)" if lonlat else "")
    raise InputError(f"{flag} {path} has columns {', '.join(header)}; the positions need {want}", field=flag,
                     expected=want, received=", ".join(header))


def _numbers(path: Path, flag: str, columns: list[str], rows: list[list[str]]) -> np.ndarray:
    """The ``columns`` of the data ``rows`` (the header first) as finite numbers, a bad cell named by line."""
    header = [h.strip() for h in rows[0]]
    at = [header.index(c) for c in columns]
    out = np.empty((len(rows) - 1, 2))
    for line, row in enumerate(rows[1:], start=2):
        for j, (c, k) in enumerate(zip(columns, at)):
            try:
                out[line - 2, j] = float(row[k])
            except (ValueError, IndexError):
                cell = row[k] if k < len(row) else "nothing"
                raise InputError(f"{flag} {path}, line {line}, column {c}: expected a number, got {cell!r}",
                                 field=c, expected="a number", received=cell) from None
    if not np.isfinite(out).all():
        raise InputError(f"{flag} {path}: every coordinate must be finite", field=flag, expected="finite numbers",
                         received="inf or nan")
    return out
