"""Read an uploaded CSV of fresh labelled rows by column name (``POST /admin/recalibrate``).

The service has no pandas (its install is numpy, scikit-learn, FastAPI); the standard ``csv``
module reads the header and rows, and every problem is an :class:`InputError` naming the column
and the line, as ``lmve-recalibrate`` reports it for a file.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass

import numpy as np

from models.exceptions import InputError


@dataclass(frozen=True)
class FreshRows:
    features: np.ndarray          # (k, d)
    points: np.ndarray            # (k, n)
    groups: np.ndarray | None     # (k,) str labels (several group columns joined)
    centers: np.ndarray | None    # (k, n)


def read_fresh_csv(data: bytes, feature_names: list[str], target_names: list[str], *,
                   groups: list[str] | None = None, centre_columns: list[str] | None = None) -> FreshRows:
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(f"the CSV is not UTF-8 text: {exc}", field="body", expected="UTF-8 CSV",
                         received="undecodable bytes") from None
    try:
        return _read(csv.reader(io.StringIO(text, newline="")), feature_names, target_names, groups, centre_columns)
    except csv.Error as exc:
        raise InputError(f"the body could not be parsed as CSV: {exc}", field="body", expected="CSV text",
                         received="malformed CSV") from None


def _read(reader, feature_names, target_names, groups, centre_columns) -> FreshRows:
    header = next(reader, None)
    if not header:
        raise InputError("the CSV is empty; it needs a header row naming the bundle's columns", field="body",
                         expected="a header and rows", received="nothing")
    header = [h.strip() for h in header]
    index = {name: i for i, name in enumerate(header)}
    need = {"features": feature_names, "points": target_names, "groups": groups or [],
            "centers": centre_columns or []}
    for what, names in need.items():
        missing = [c for c in names if c not in index]
        if missing:
            raise InputError(f"the CSV lacks the {what} column(s) {missing[:5]}{' ...' if len(missing) > 5 else ''}; "
                             f"it has {header[:8]}{' ...' if len(header) > 8 else ''}", field=f"{what}",
                             expected=", ".join(names[:5]) + (" ..." if len(names) > 5 else ""),
                             received=", ".join(missing[:5]))
    numeric = [index[c] for c in (*feature_names, *target_names, *(centre_columns or []))]
    names = [*feature_names, *target_names, *(centre_columns or [])]
    rows, labels = [], []
    for line, row in enumerate(reader, start=2):
        if not row or all(not cell.strip() for cell in row):
            continue
        if len(row) != len(header):
            raise InputError(f"line {line} of the CSV has {len(row)} cells, the header {len(header)}", field="body",
                             expected=f"{len(header)} cells", received=f"{len(row)} cells")
        values = []
        for j, col in zip(numeric, names):
            try:
                v = float(row[j])
            except ValueError:
                raise InputError(f"column {col!r} must be numeric; line {line} holds {row[j]!r}", field=col,
                                 expected="a number", received=repr(row[j])[:40]) from None
            if not np.isfinite(v):
                raise InputError(f"column {col!r} must be finite; line {line} holds {row[j]!r}", field=col,
                                 expected="a finite number", received=row[j])
            values.append(v)
        rows.append(values)
        if groups:
            labels.append("|".join(row[index[g]].strip() for g in groups))
    if not rows:
        raise InputError("the CSV has a header but no rows", field="body", expected="labelled rows", received="0 rows")
    A = np.asarray(rows, dtype=np.float64)
    d, n = len(feature_names), len(target_names)
    return FreshRows(features=A[:, :d], points=A[:, d:d + n], groups=np.asarray(labels) if groups else None,
                     centers=A[:, d + n:] if centre_columns else None)
