"""The UJI library's long-term survey (``uji_longterm``): one site walked again every month for 25 months.

``$LMVE_DATA_DIR/uji_longterm/db/MM/{trn,tst}SS{rss,crd,tms,ids}.csv.gz``: per month ``MM`` (01-25) and set
``SS``, four headerless CSV files whose i-th rows belong together: the readings (one column per access point,
dBm, 100 = not detected), the position (x, y in metres, and the floor), the time (``YYYYMMDDhhmmssmmm``) and the
sample's identifier. ``trn`` sets are surveys at the survey's positions, ``tst`` sets walks at other positions.
:func:`load_sets` reads any of them as one :class:`~training.data.datasets.Dataset`; ``load_dataset("uji_longterm")``
is month 1's 15 survey sets, what a site surveyed once would train on.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np

from models.exceptions import InputError
from training.data.dataset import Dataset
from training.data.location import data_dir as _data_dir, hash_files, need

#: the folder under the data directory
NAME = "uji_longterm"
#: months of collection
MONTHS = 25
#: access points (reading columns)
N_APS = 620
#: the survey's not-detected code
NOT_DETECTED = 100.0
#: month 25's sets recorded with the second phone (a Samsung Galaxy A5 2017): its survey set 2, its walks 6-10
SECOND_PHONE = {"trn": (2,), "tst": (6, 7, 8, 9, 10)}
FEATURES = [f"WAP{j:03d}" for j in range(1, N_APS + 1)]
TARGETS = ["x", "y"]


def available_sets(root: Path, month: int, kind: str) -> list[int]:
    """The set numbers of ``kind`` ("trn" or "tst") that month ``month`` holds."""
    folder = root / f"{month:02d}"
    return sorted(int(p.name[3:5]) for p in folder.glob(f"{kind}??rss.csv.gz"))


def _read(path: Path, dtype=np.float64) -> np.ndarray:
    with gzip.open(need(path), "rt") as f:
        return np.loadtxt(f, delimiter=",", ndmin=2, dtype=dtype)


def load_sets(month: int, kind: str = "trn", sets=None, data_dir=None):
    """Month ``month``'s sets of ``kind`` as one dataset, in recorded order (set by set, each in time order).

    Parameters
    ----------
    month : int
        1 to 25.
    kind : {"trn", "tst"}
        Survey sets (at the survey's positions) or walks (at other positions).
    sets : iterable of int, default=None
        Set numbers; ``None``: every set of that kind in the month.
    data_dir : path, default=None
        The data directory (``LMVE_DATA_DIR``).

    Returns
    -------
    Dataset
        ``X`` (m, 620) dBm with 100 for not detected, ``Y`` (m, 2) metres; ``meta``: ``floor``, ``campaign``
        (``"MM-kindSS"``: one per set), ``set``, ``month``, ``phone`` (``"S3"``, or ``"A5"`` for month 25's second
        phone), ``TIMESTAMP``.
    """
    if kind not in ("trn", "tst"):
        raise InputError(f"kind must be 'trn' or 'tst'; got {kind!r}", field="kind", expected="trn | tst",
                         received=repr(kind))
    if not 1 <= int(month) <= MONTHS:
        raise InputError(f"month must be 1 to {MONTHS}; got {month}", field="month", expected=f"1..{MONTHS}",
                         received=str(month))
    root = _data_dir(data_dir) / NAME / "db"
    numbers = available_sets(root, month, kind) if sets is None else [int(s) for s in sets]
    if not numbers:
        raise InputError(f"{root / f'{month:02d}'} holds no {kind} sets; check LMVE_DATA_DIR")
    parts, paths = {"rss": [], "crd": [], "tms": []}, []
    meta = {"campaign": [], "set": []}
    for s in numbers:
        for what in parts:
            path = root / f"{month:02d}" / f"{kind}{s:02d}{what}.csv.gz"
            parts[what].append(_read(path, np.int64 if what == "tms" else np.float64))
            paths.append(path)
        rows = len(parts["rss"][-1])
        meta["campaign"] += [f"{month:02d}-{kind}{s:02d}"] * rows
        meta["set"] += [s] * rows
    X, crd = np.vstack(parts["rss"]), np.vstack(parts["crd"])
    second = set(SECOND_PHONE[kind]) if month == MONTHS else set()
    out = {"floor": crd[:, 2].astype(np.int64), "campaign": np.asarray(meta["campaign"]),
           "set": np.asarray(meta["set"], dtype=np.int64), "month": np.full(len(X), int(month), dtype=np.int64),
           "phone": np.asarray(["A5" if s in second else "S3" for s in meta["set"]]),
           "TIMESTAMP": np.concatenate(parts["tms"]).ravel().astype(np.int64)}
    return Dataset(NAME, X.astype(np.float64), crd[:, :2].astype(np.float64), list(FEATURES), list(TARGETS),
                   hash_files(*paths), meta=out)
