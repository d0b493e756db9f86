"""Which columns of a user's table are features, when ``--features`` does not say.

A survey file carries more than readings: a position's number, a time, the phone and user, the floor and
building. Taken as features they make the model answer from the label rather than the radio (the same
readings with ``point_id`` 0 and 12 got centres 6.6 m apart). :func:`infer_features` keeps a column as a
feature unless its values say it is not a reading:

- **a reading** (every value in -120..0 dBm, or the table's code for "not heard": the one value outside that
  range that columns holding readings hold) is always a feature, a constant one included (a transmitter never
  heard): the fingerprint's length is the site's transmitter count;
- **text** (no value is a number): a label;
- **constant** (one value on every row): it carries nothing;
- **integer codes constant within each position**, where positions repeat: an identifier of the position
  or of what holds it (a space, a floor, a building);
- **increasing integers, nearly all distinct**: a row counter or a time;
- **integers of Unix-time size** (1e9 to 1e13): a time in seconds or milliseconds;
- **integer codes under an identifier's name** (``*_id``, ``*ID``, ``phone``, ``user``, ``floor``,
  ``building``, ``timestamp``...): a device, person or place code. A column of real numbers is never left out
  for its name alone.

Every other column is a feature. Columns left out stay with each row as metadata (``Dataset.meta``): usable
by ``--groups``, ``--calibrate-across`` and ``--split-by``; a walk needs only the features.
"""

from __future__ import annotations

import re

import numpy as np

from models.exceptions import InputError
from models.preprocessing import READING_RANGE

#: words of a column name that, with integer values, mark a code rather than a reading
META_WORDS = frozenset({"id", "identifier", "uuid", "key", "index", "idx", "row", "timestamp", "time", "date",
                        "datetime", "epoch", "phone", "device", "user", "subject", "session", "trial", "floor",
                        "building", "space", "room", "zone", "point", "label", "relativeposition"})
#: integers in this range are Unix times (seconds from 2001, or milliseconds)
UNIX_TIME = (1e9, 1e13)
#: increasing integers with at least this share of distinct values are a counter or a time
DISTINCT_SHARE = 0.9


def name_words(name: str) -> list[str]:
    """The lower-case words of a column name: split at ``_ - . space``, at a lower-upper boundary
    (``pointId``), and an all-capitals name ending in ``ID`` (``PHONEID``) gives its stem and ``id``."""
    parts = re.split(r"[_\-.\s]+", str(name).strip())
    words = []
    for part in parts:
        if len(part) > 2 and part.isupper() and part.endswith("ID"):
            words += [part[:-2].lower(), "id"]
            continue
        words += [w.lower() for w in re.findall(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])", part)] or [part.lower()]
    return [w for w in words if w]


def is_reading(values: np.ndarray, code: float | None) -> bool:
    """Every value a reading in -120..0 dBm, or the table's not-heard ``code`` (``None``: it has none)."""
    lo, hi = READING_RANGE
    out = values[(values < lo) | (values > hi)]
    return out.size == 0 or (code is not None and bool(np.all(out == code)))


def not_heard_code(columns: list[np.ndarray]) -> float | None:
    """The table's not-heard code: of the columns holding both readings (-120..0 dBm) and a single value
    outside that range, the value most of them hold; ``None`` when no column does."""
    lo, hi = READING_RANGE
    votes: dict[float, int] = {}
    for values in columns:
        outside = (values < lo) | (values > hi)
        if outside.any() and not outside.all() and not np.isnan(values).any():
            out = np.unique(values[outside])
            if out.size == 1:
                votes[float(out[0])] = votes.get(float(out[0]), 0) + 1
    return max(votes, key=votes.get) if votes else None


def why_not_a_feature(name: str, raw, values: np.ndarray | None, positions: np.ndarray | None,
                      code: float | None = None) -> str | None:
    """Why column ``name`` is not a feature, in words, or ``None`` (it is one). ``raw``: its cells as read;
    ``values``: them as numbers (NaN where a cell is not one), or ``None`` when none is; ``positions``: each
    row's position code, when positions repeat (a survey); ``code``: the table's not-heard code
    (:func:`not_heard_code`)."""
    if values is None:
        cells = [str(v) for v in raw if str(v) != "nan"][:1]
        return f"text ({cells[0]!r}...): a label" if cells else "empty"
    if np.isnan(values).any():
        return None  # a bad cell in what may be a reading: the loader names its line
    if is_reading(values, code):
        return None
    distinct = np.unique(values)
    if distinct.size == 1:
        return f"constant ({distinct[0]:g} on every row)"
    if not np.all(values == np.round(values)):
        return None
    if positions is not None:
        pairs = np.unique(np.stack([positions, values]), axis=1).shape[1]
        n_positions = np.unique(positions).size
        if pairs == n_positions:
            return (f"integer codes constant within each of the {n_positions} positions: an identifier of the "
                    "position or of what holds it")
    if np.all(np.diff(values) >= 0) and distinct.size >= DISTINCT_SHARE * values.size:
        return "increasing integers, nearly all distinct: a row counter or a time"
    lo, hi = UNIX_TIME
    if np.all((values >= lo) & (values < hi)):
        return "integers of Unix-time size: a time"
    hit = sorted(set(name_words(name)) & META_WORDS)
    if hit:
        return f"integer codes named as an identifier ({', '.join(hit)}): a device, person or place code"
    return None


def infer_features(frame, candidates: list[str], positions: np.ndarray | None) -> tuple[list[str], dict[str, str]]:
    """``(features, left out)``: the ``candidates`` (columns of ``frame`` in no other role) that are features,
    in order, and for each one that is not, why (:func:`why_not_a_feature`). ``positions``: each row's position
    code where positions repeat, else ``None``."""
    import pandas as pd

    raw, values = {}, {}
    for name in candidates:
        raw[name] = frame[name].to_numpy()
        numbers = pd.to_numeric(frame[name], errors="coerce")
        values[name] = numbers.to_numpy(np.float64) if numbers.notna().any() else None
    code = not_heard_code([v for v in values.values() if v is not None])
    features, left_out = [], {}
    for name in candidates:
        reason = why_not_a_feature(name, raw[name], values[name], positions, code)
        if reason is None:
            features.append(name)
        else:
            left_out[name] = reason
    return features, left_out


def features_of(path, frame, candidates: list[str], Y: np.ndarray, also: list[str] | None):
    """``(features, left out)`` of a table at ``path`` (:func:`infer_features` on the ``candidates``, positions
    known where the targets ``Y`` repeat them); ``also`` (candidates) are features whatever their values.
    An :class:`InputError` when ``also`` names a column in no candidate, or no feature is left."""
    from models.calibration.grouping import position_codes

    also = [c.strip() for c in also or [] if c.strip()]
    missing = [c for c in also if c not in candidates]
    if missing:
        raise InputError(f"{path}: --also-features {missing} are not columns in no other role; those are "
                         f"{candidates}", field="--also-features", expected="columns of the file",
                         received=", ".join(missing))
    positions = position_codes(Y)
    features, left_out = infer_features(frame, [c for c in candidates if c not in also], positions)
    features = [c for c in candidates if c in features or c in also]  # the file's order
    if not features:
        raise InputError(f"{path}: no column is a feature: {'; '.join(f'{c}: {w}' for c, w in left_out.items())}. "
                         "Name them with --features (or --also-features COL)", field="--features",
                         expected="reading columns", received="none")
    return features, left_out
