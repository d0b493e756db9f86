"""Data sources: the paper's four datasets, a user's CSV, and the synthetic generator.

Every loader returns a :class:`Dataset` with float64 ``X`` (m, d) and ``Y`` (m, n), names,
and a content hash (sha256 of the source bytes) that the bundle records. Semantics of the
paper datasets follow ``shared/datasets/README.md`` (target scaling included).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path

import numpy as np

from models.calibration.grouping import position_codes
from models.exceptions import InputError
from training.data import synthetic
from training.data.dataset import Dataset, subset
from training.data.location import data_dir as _data_dir, hash_files, need as _need

PAPER_DATASETS = ("enb", "ble_rssi", "indoor_localization", "residential_building")
#: built-in data that needs no download: the default survey, a follow-up study of 35 subjects
#: (few groups: lmve-train moves whole subjects into calibration to reach the level), a survey of a
#: three-floor building (its ``floor`` column: lmve-train --floor-column floor), and a smooth task whose
#: smallest regions are known (``synthetic_oracle``: its ``meta["sqrt_det_cov"]``, see :func:`oracle_volume`, and
#: ``meta["true_mean"]``); and ``uji_longterm``, month 1 of the UJI library survey walked again for 25 months
#: (:mod:`training.data.longterm`)
DATASETS = ("synthetic", "visits", "floors", "synthetic_oracle", *PAPER_DATASETS, "uji_longterm")

#: rows needed for the split protocol: NLE needs floor(0.81 m / 20) >= 1 neighbour and
#: LMVE 20 fitting + 10 held-out train rows; the calibration part then has >= 5 rows.
MIN_ROWS = 60


def group_codes_of(columns: dict) -> np.ndarray:
    """(m,) integer group codes from one or more label columns of any type (each distinct
    combination of values is a group)."""
    keys = [np.unique(np.asarray(v).astype(str), return_inverse=True)[1].ravel() for v in columns.values()]
    return np.unique(np.stack(keys, axis=1), axis=0, return_inverse=True)[1].ravel()


def with_groups(ds: Dataset, columns: dict, by: str, auto: bool = False) -> Dataset:
    """``ds`` grouped by the label ``columns`` (name -> values); ``by`` names the grouping in words."""
    codes = group_codes_of(columns)
    n_groups = int(codes.max()) + 1 if codes.size else 0
    if n_groups < 2:
        raise InputError(f"grouping by {by} gives {n_groups} group: every row is in the same group, so no "
                         "part of the data is new to the model; name other --groups columns, or --groups none",
                         field="groups", expected="at least 2 groups", received=str(n_groups))
    grouping = {"by": by, "columns": list(columns), "n_groups": n_groups, "automatic": auto}
    return replace(ds, groups=codes, grouping=grouping)


def group_by_position(ds: Dataset, auto: bool = False) -> Dataset:
    """``ds`` grouped by exact target position (a surveyed reference point)."""
    return with_groups(ds, {name: ds.Y[:, j] for j, name in enumerate(ds.target_names)}, "position", auto)


def survey_groups(ds: Dataset) -> Dataset:
    """``ds`` grouped by position when it has no groups and its rows are a survey (most repeat their position:
    :func:`models.calibration.grouping.position_codes`); ``ds`` itself otherwise. What ``train()`` does first."""
    if ds.groups is None and position_codes(ds.Y) is not None:
        return group_by_position(ds, auto=True)
    return ds


def _pipe_csv(folder: Path, target_scale: float) -> tuple[np.ndarray, np.ndarray, list[str], list[str], str]:
    import pandas as pd

    data, cfg = _need(folder / "data.csv"), _need(folder / "config.json")
    config = json.loads(cfg.read_text())
    df = pd.read_csv(data, sep="|")
    feats, targets = list(config["continuous_variables"]), list(config["targets"])
    X = df[feats].to_numpy(np.float64)
    Y = df[targets].to_numpy(np.float64) / target_scale
    return X, Y, feats, targets, hash_files(data, cfg)


def load_dataset(name: str, data_dir=None, *, n_samples: int = 2000, seed: int = 0,
                 groups: list[str] | None = None) -> Dataset:
    """Load one of :data:`DATASETS` (``synthetic``, ``visits`` and ``floors`` need no data directory); ``groups``:
    the columns to group its rows by, as :func:`load_csv`'s (its target names, which group by position, or its
    per-row metadata columns: :func:`group_by_columns`)."""
    ds = _builtin(name, data_dir, n_samples=n_samples, seed=seed)
    return group_by_columns(ds, list(groups)) if groups else ds


def group_by_columns(ds: Dataset, columns: list[str]) -> Dataset:
    """``ds`` grouped by ``columns``, each one of its target names or per-row metadata columns (all the target
    names: by position); an :class:`InputError` naming the ones it does not have."""
    known = {**{name: ds.Y[:, j] for j, name in enumerate(ds.target_names)}, **ds.meta}
    missing = [c for c in columns if c not in known]
    if missing:
        raise InputError(f"--groups names {', '.join(missing)}, which {ds.name} does not have; it has "
                         f"{', '.join(known)}", field="--groups", expected=" | ".join(known),
                         received=", ".join(missing))
    by = "position" if set(columns) == set(ds.target_names) else ", ".join(columns)
    return with_groups(ds, {c: known[c] for c in columns}, by)


def _builtin(name: str, data_dir=None, *, n_samples: int = 2000, seed: int = 0) -> Dataset:
    """One of :data:`DATASETS`, as stored."""
    import pandas as pd

    if name == "synthetic":  # a survey: 5 readings at each of n_samples / 5 reference points
        X, Y, _, device, fn, tn = synthetic.make_survey(n_points=max(n_samples // 5, 3), readings=5, seed=seed)
        digest = hashlib.sha256(X.tobytes() + Y.tobytes()).hexdigest()
        return Dataset("synthetic", X, Y, fn, tn, digest, meta={"device": device})
    if name == "visits":  # 35 subjects, grouped by subject
        X, Y, subject, fn, tn = synthetic.make_visits(seed=seed)
        digest = hashlib.sha256(X.tobytes() + Y.tobytes()).hexdigest()
        return with_groups(Dataset("visits", X, Y, fn, tn, digest, meta={"subject": subject}),
                           {"subject": subject}, "subject")
    if name == "floors":  # 3 floors x n_samples / 30 reference points x 10 readings
        X, Y, floor, _, fn, tn = synthetic.make_floor_survey(n_points=max(n_samples // 30, 3), readings=10, seed=seed)
        digest = hashlib.sha256(X.tobytes() + Y.tobytes()).hexdigest()
        return Dataset("floors", X, Y, fn, tn, digest, meta={"floor": floor})
    if name == "synthetic_oracle":  # Gaussian noise of known, turning covariance: the optimum is known
        X, Y, sqrt_det, fn, tn = synthetic.make_oracle(n_samples=n_samples, seed=seed)
        digest = hashlib.sha256(X.tobytes() + Y.tobytes()).hexdigest()
        return Dataset(name, X, Y, fn, tn, digest, meta={"sqrt_det_cov": sqrt_det, "true_mean": synthetic.oracle_mean(X)})
    if name == "uji_longterm":  # a site surveyed once: month 1's 15 survey sets (training.data.longterm)
        from training.data.longterm import load_sets

        return load_sets(1, "trn", data_dir=data_dir)
    if name not in PAPER_DATASETS:
        raise InputError(f"dataset must be one of {', '.join(DATASETS)}; got {name!r}")
    root = _data_dir(data_dir) / name
    if name == "enb":
        X, Y, fn, tn, digest = _pipe_csv(root, 1.0)
    elif name == "residential_building":
        X, Y, fn, tn, digest = _pipe_csv(root, 100.0)  # targets / 100, as in the reference loader
    elif name == "ble_rssi":
        f = _need(root / "rssi.npz")
        with np.load(f, allow_pickle=False) as z:
            X, Y = z["x"].astype(np.float64), z["y"].astype(np.float64)
        fn, tn, digest = [f"b30{i:02d}" for i in range(1, X.shape[1] + 1)], ["letter_index", "number"], hash_files(f)
    else:  # indoor_localization
        f = _need(root / "TrainingData.csv.gz")
        df = pd.read_csv(f)
        meta = {c: df[c].to_numpy() for c in ("FLOOR", "BUILDINGID", "SPACEID", "PHONEID", "USERID", "TIMESTAMP")
                if c in df.columns}
        fn = list(df.columns[:519])  # WAP001..WAP519, as the reference loader selects
        X = df[fn].to_numpy(np.float64)
        Y = df[["LATITUDE", "LONGITUDE"]].to_numpy(np.float64) / 1000.0  # kilometres, latitude first
        tn, digest = ["latitude_km", "longitude_km"], hash_files(f)
        # UJIIndoorLoc's LATITUDE and LONGITUDE are EPSG:3857 (Web Mercator) northing and easting, in metres
        return Dataset(name, X, Y, fn, tn, digest, meta=meta, crs={"crs": "EPSG:3857", "axes": "yx", "scale": 1000.0})
    return Dataset(name, X, Y, fn, tn, digest)


def oracle_volume(ds: Dataset, rows: np.ndarray, coverage: float) -> float | None:
    """The mean volume (paper convention, ``det(C)^1/2``) of the smallest regions at level ``coverage`` on
    ``rows``, for a data set that knows it (Gaussian noise of known covariance: ``meta["sqrt_det_cov"]``,
    ``det(Sigma(x))^1/2``; the region is ``Sigma(x)`` scaled by the chi-square quantile), else ``None``."""
    if "sqrt_det_cov" not in ds.meta:
        return None
    from scipy.stats import chi2

    n = ds.Y.shape[1]
    return float(chi2.ppf(coverage, n) ** (n / 2) * np.mean(np.asarray(ds.meta["sqrt_det_cov"])[rows]))


def sniff_separator(path: Path) -> str | None:
    """The separator of a CSV (plain or gzip), sniffed from its first 64 KiB by :class:`csv.Sniffer` among
    ``, ; tab |``, or ``None`` (pandas' python engine then sniffs, far slower)."""
    import csv
    import gzip

    try:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", newline="") as f:
            head = f.read(65536)
        lines = head.splitlines()
        sample = "\n".join(lines[:-1] if len(lines) > 1 and not head.endswith("\n") else lines)
        return csv.Sniffer().sniff(sample, delimiters=",;\t|").delimiter
    except (csv.Error, OSError, UnicodeDecodeError):
        return None


def load_csv(path, targets: list[str] | str, features: list[str] | None = None, sep: str | None = None,
             groups: list[str] | None = None, centre_columns: list[str] | None = None,
             min_rows: int = MIN_ROWS, meta_columns: list[str] | None = None,
             also_features: list[str] | None = None) -> Dataset:
    """Load a user's CSV: ``targets`` (2 or more columns, a list or ``"x,y"``) and ``features`` (default: every other column
    but the ``groups``, ``centre_columns`` and ``meta_columns`` that is a feature by its values and name,
    :func:`training.data.columns.infer_features`; ``also_features`` are features whatever they hold).
    ``groups`` (columns of any type, the targets themselves included) labels each row's group; group columns
    are never features. ``centre_columns`` (one per target, in target units) hold the client's own position
    estimate of each row. ``meta_columns`` (any type: a phone, a user, a day) and the columns left out of the
    features are kept as per-row labels in ``Dataset.meta``, never features; ``Dataset.left_out`` says why
    each inferred one was left out.

    Raises :class:`InputError` naming the column and row for a missing column, a non-numeric
    value, NaN/inf, or too few rows.
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(f"CSV file {path} does not exist")
    targets = [t.strip() for t in (targets.split(",") if isinstance(targets, str) else targets) if t.strip()]
    if len(targets) < 2:
        raise InputError(f"--targets must name at least 2 columns (the position coordinates); got {targets}")
    df = _read_csv(path, sep)
    columns = [str(c) for c in df.columns]
    inferred = not features
    roles = _column_roles(path, columns, targets, features, groups, centre_columns, meta_columns)
    features, group_cols, centre_cols, meta_cols = roles
    for col in meta_cols:
        _labelled(path, df, col, "--calibrate-across", "column", "a label")
    Y = _matrix(path, df, targets)
    left_out = {}
    if inferred:
        from training.data.columns import features_of

        features, left_out = features_of(path, df, features, Y, also_features)
    X, centres = (_matrix(path, df, cols) for cols in (features, centre_cols))
    if len(df) < min_rows:
        raise InputError(f"{path} has {len(df)} data rows; at least {min_rows} are needed for the "
                         "train (81 %), calibration (9 %) and test (10 %) parts")
    ds = Dataset(path.stem, X, Y, features, targets, hash_files(path), left_out=left_out,
                 meta={c: df[c].to_numpy() for c in [*meta_cols, *left_out]})
    if centre_cols:
        ds = replace(ds, centers=centres, centre_columns=centre_cols)
    if group_cols:
        for col in group_cols:
            _labelled(path, df, col, "--groups", "group column", "a group")
        by = "position" if set(group_cols) == set(targets) else ", ".join(group_cols)
        ds = with_groups(ds, {c: df[c].to_numpy() for c in group_cols}, by)
    return ds


#: columns the loader checks and gathers side by side before copying them into its matrix
GATHER_COLUMNS = 16
#: rows of gathered columns copied into the matrix at a time (a column written alone into a wide row-major
#: matrix touches one memory page per row)
TILE_ROWS = 4096


def _read_csv(path: Path, sep: str | None):
    """The file's columns: a ``.parquet`` file's as :class:`~training.data.parquet.ParquetColumns`; otherwise
    a frame of the CSV with ``sep``, or the sniffed separator. An error names the file."""
    import pandas as pd

    from training.data.parquet import ParquetColumns

    if path.suffix == ".parquet":
        try:
            return ParquetColumns(path)
        except (OSError, ValueError) as exc:
            raise InputError(f"{path} could not be read as Parquet: {exc}") from None
    try:
        sep = sep or sniff_separator(path)
        return pd.read_csv(path, sep=sep, engine="python" if sep is None else "c")
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise InputError(f"{path} could not be parsed as CSV: {exc}") from None


def _present(path: Path, columns: list[str], names: list[str], what: str, flag: str | None) -> None:
    """Refuse ``names`` that are not among the CSV's ``columns``, naming ``what`` they were and the flag."""
    missing = [c for c in names if c not in columns]
    if missing:
        where = {} if flag is None else {"field": flag, "expected": f"columns of {path.name}",
                                         "received": ", ".join(missing)}
        raise InputError(f"{path}: {what} {missing} not found; the CSV has columns {columns}", **where)


def _column_roles(path: Path, columns: list[str], targets: list[str], features, groups, centre_columns,
                  meta_columns) -> tuple[list[str], list[str], list[str], list[str]]:
    """``(features, group columns, centre columns, label columns)``, each named column present and each in
    one role only (group columns may be targets); ``features`` default to every column left."""
    group_cols = [g.strip() for g in groups or [] if g.strip()]
    _present(path, columns, group_cols, "group column(s)", "--groups")
    centre_cols = [c.strip() for c in centre_columns or [] if c.strip()]
    if centre_columns is not None:
        _present(path, columns, centre_cols, "centre column(s)", "--centre-columns")
        if len(centre_cols) != len(targets):
            raise InputError(f"--centre-columns must name one estimate column per target ({len(targets)}: "
                             f"{', '.join(targets)}); got {len(centre_cols)}", field="--centre-columns",
                             expected=f"{len(targets)} columns", received=str(len(centre_cols)))
    meta_cols = [c.strip() for c in meta_columns or [] if c.strip()]
    _present(path, columns, meta_cols, "column(s)", "--calibrate-across")
    if not features:
        features = [c for c in columns
                    if c not in targets and c not in group_cols and c not in centre_cols and c not in meta_cols]
    else:
        features = [f.strip() for f in features]
    _one_role(centre_cols, [*features, *targets], "are centre columns and also features or targets",
              "--centre-columns", "columns of their own")
    _present(path, columns, [*targets, *features], "column(s)", None)
    _one_role(targets, features, "are both targets and features")
    _one_role(meta_cols, [*features, *targets], "are --calibrate-across labels and also features or targets",
              "--features", "no label column")
    _one_role(group_cols, features, "are both group columns and features; group columns are never features",
              "--features", "no group column")
    if not features:
        raise InputError(f"{path}: no feature columns left besides the targets {targets}")
    return features, group_cols, centre_cols, meta_cols


def _one_role(these: list[str], those: list[str], what: str, flag: str | None = None, expected: str = "") -> None:
    """Refuse columns in both ``these`` and ``those``: ``column(s) [...] <what>``."""
    overlap = set(these) & set(those)
    if overlap:
        where = {} if flag is None else {"field": flag, "expected": expected, "received": ", ".join(sorted(overlap))}
        raise InputError(f"column(s) {sorted(overlap)} {what}", **where)


def _labelled(path: Path, df, col: str, flag: str, what: str, need: str) -> None:
    """Refuse a label column (a group, a unit) with an empty cell: ``<what> 'col' is empty at line L ...; every
    row needs <need>``."""
    if df[col].isna().any():
        row = int(np.flatnonzero(df[col].isna().to_numpy())[0])
        raise InputError(f"{path}: {what} {col!r} is empty at line {row + 2} of the file; every row needs {need}",
                         field=flag, expected="a label on every row", received="an empty cell")


def _matrix(path: Path, df, columns: list[str]) -> np.ndarray:
    """``(len(df), len(columns))`` float64: each column checked by :func:`_numeric`, :data:`GATHER_COLUMNS`
    at a time gathered side by side and copied in by tiles of :data:`TILE_ROWS` rows."""
    m = len(df)
    out = np.empty((m, len(columns)), dtype=np.float64)
    for start in range(0, len(columns), GATHER_COLUMNS):
        names = columns[start:start + GATHER_COLUMNS]
        block = np.empty((len(names), m), dtype=np.float64)
        for i, col in enumerate(names):
            block[i] = _numeric(path, df, col)
        for row in range(0, m, TILE_ROWS):
            out[row:row + TILE_ROWS, start:start + len(names)] = block[:, row:row + TILE_ROWS].T
    return out


def _numeric(path: Path, df, col: str) -> np.ndarray:
    """Column ``col`` as finite float64, or an error naming the column and the line of the file."""
    import pandas as pd

    values = pd.to_numeric(df[col], errors="coerce")
    bad = values.isna() & df[col].notna()
    if bad.any():
        row = int(np.flatnonzero(bad.to_numpy())[0])
        raise InputError(f"{path}: column {col!r} must be numeric; line {row + 2} of the file "
                         f"holds {df[col].iloc[row]!r}")
    arr = values.to_numpy(np.float64)
    if not np.isfinite(arr).all():
        row = int(np.flatnonzero(~np.isfinite(arr))[0])
        raise InputError(f"{path}: column {col!r} has a missing, NaN or infinite value at line {row + 2} "
                         "of the file; fill or drop such rows first")
    return arr
