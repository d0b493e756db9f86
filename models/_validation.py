"""Input checks for the public boundaries of ``models/`` (``fit`` methods and :class:`~models.model.RegionModel`).

Each check raises :class:`~models.exceptions.InputError` with the field at fault, what was
expected and what came; internals called after a check take the checked arrays as they are.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Mapping
from typing import TypeVar

import numpy as np

from models.exceptions import InputError, NotFittedError


T = TypeVar("T")


def lookup(table: Mapping[str, T] | tuple[str, ...], name, what: str, field: str | None = None,
           error: type = InputError) -> T | str:
    """``table[name]`` (a tuple of names: ``name`` itself), or ``error`` naming the choices: ``"<what> must be
    one of a, b; got 'c'"`` (``field`` defaults to ``what``). The one lookup behind every registry of names
    (methods, centres, floor classifiers, calibration rules)."""
    try:
        if isinstance(table, Mapping):
            return table[name]
        if name in table:
            return name
    except (KeyError, TypeError):  # TypeError: an unhashable name (a list from JSON)
        pass
    raise error(f"{what} must be one of {', '.join(table)}; got {name!r}", field=field or what,
                expected=" | ".join(table), received=repr(name))


def all_finite(A: np.ndarray) -> bool:
    """Whether every entry of the array ``A`` is finite (one ufunc reduction)."""
    return bool(np.logical_and.reduce(np.isfinite(A), axis=None))


def rows(n: int) -> str:
    """``"1 row"``, ``"3 rows"``."""
    return f"{n} row" if n == 1 else f"{n} rows"


def _columns_hint(describe: str | Callable[[], str] | None) -> str:
    if describe is None:
        return ""
    return f" ({describe() if callable(describe) else describe})"


def _first_bad_row(A, n_columns: int | None) -> tuple[int, int] | None:
    """(row, length) of the first row of a list-like ``A`` that is not a sequence of ``n_columns``."""
    lengths = [len(r) if hasattr(r, "__len__") and not isinstance(r, (str, bytes)) else -1 for r in A]
    want = n_columns if n_columns is not None else (lengths[0] if lengths else 0)
    for i, n in enumerate(lengths):
        if n != want:
            return i, n
    return None


def check_matrix(A, field: str, *, n_columns: int | None = None, owner: str | None = None, min_rows: int = 1,
                 describe: str | Callable[[], str] | None = None, missing: bool = False) -> np.ndarray:
    """Return ``A`` (an array or a list of rows) as a C-contiguous float64 array (rows, columns).

    ``owner`` names who expects ``n_columns`` ("the bundle", "GaussianEllipsoid"); ``describe``
    (a string, or a callable built only for a message) says what the columns are. Raises
    :class:`InputError` naming ``field`` (``features[3]``, ``features[0][15]``) for a ragged or
    non-numeric row, the wrong column count, too few rows, or NaN/inf. With ``missing``, ``None`` and NaN
    are kept as NaN (a missing value for the caller to resolve); inf is still refused.
    """
    who = f"{owner} expects" if owner else "expected"
    try:
        arr = np.asarray(A, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        bad = _first_bad_row(A, n_columns) if isinstance(A, (list, tuple)) else None
        if bad is None:
            raise InputError(f"{field} must be a numeric 2-D array; could not convert it: {exc}", field=field,
                             expected="a numeric 2-D array", received=type(A).__name__) from None
        i, n = bad
        raise InputError(f"{field}[{i}] has {n} values, but {who} {n_columns}{_columns_hint(describe)}",
                         field=f"{field}[{i}]", expected=f"{n_columns} values", received=f"{n} values") from None
    if arr.ndim == 1 and arr.shape[0] == 0:  # an empty list of rows
        arr = arr.reshape(0, n_columns or 0)
    if arr.ndim == 1 and n_columns is not None and arr.shape[0] == n_columns and n_columns > 1:
        raise InputError(f"{field} must be 2-D with shape (n_rows, {n_columns}); got a 1-D array of length "
                         f"{arr.shape[0]}. Use {field}.reshape(1, -1) for a single row.", field=field,
                         expected=f"shape (n_rows, {n_columns})", received=f"shape {arr.shape}")
    if arr.ndim != 2:
        raise InputError(f"{field} must be a 2-D array (n_rows, n_columns); got {arr.ndim}-D with shape {arr.shape}",
                         field=field, expected="a 2-D array", received=f"shape {arr.shape}")
    if arr.shape[0] < min_rows:
        raise InputError(f"{field} has {arr.shape[0]} rows; at least {min_rows} are required", field=field,
                         expected=f"at least {rows(min_rows)}", received=rows(arr.shape[0]))
    if n_columns is not None and arr.shape[1] != n_columns:
        if isinstance(A, np.ndarray):
            raise InputError(f"{field} has {arr.shape[1]} columns, but {who} {n_columns}{_columns_hint(describe)}",
                             field=field, expected=f"{n_columns} columns", received=f"{arr.shape[1]} columns")
        raise InputError(f"{field}[0] has {arr.shape[1]} values, but {who} {n_columns}{_columns_hint(describe)}",
                         field=f"{field}[0]", expected=f"{n_columns} values", received=f"{arr.shape[1]} values")
    if not all_finite(arr) and not (missing and not np.isinf(arr).any()):
        i, j = (int(v) for v in np.argwhere(~np.isfinite(arr) if not missing else np.isinf(arr))[0])
        raise InputError(f"{field} contains NaN or inf (first at row {i}, column {j}); only finite values "
                         "are accepted", field=f"{field}[{i}][{j}]",
                         expected="a finite number", received=str(arr[i, j]))
    return np.ascontiguousarray(arr)


def check_same_rows(A: np.ndarray, B: np.ndarray, a_name: str, b_name: str) -> None:
    """Refuse ``B`` unless it has as many rows as ``A`` (the error names ``b_name``)."""
    if A.shape[0] != B.shape[0]:
        raise InputError(f"{a_name} has {A.shape[0]} rows but {b_name} has {B.shape[0]}; they must match",
                         field=b_name, expected=rows(A.shape[0]), received=rows(B.shape[0]))


def check_Xy(X, Y, *, x_name: str = "X", y_name: str = "R", min_rows: int = 1):
    """Check a feature matrix and a 2-D target/residual matrix with the same number of rows."""
    X = check_matrix(X, x_name, min_rows=min_rows)
    Y = check_matrix(Y, y_name, min_rows=min_rows)
    check_same_rows(X, Y, x_name, y_name)
    if Y.shape[1] < 1:
        raise InputError(f"{y_name} must have at least one column; got shape {Y.shape}", field=y_name,
                         expected="at least 1 column", received="0 columns")
    return X, Y


def check_coverage(eta, field: str = "coverage") -> float:
    """Check a coverage level ``eta`` lies in the open interval (0, 1)."""
    if isinstance(eta, bool) or not isinstance(eta, numbers.Real):
        raise InputError(f"{field} must be a number in (0, 1); got {eta!r}", field=field,
                         expected="a number in (0, 1)", received=repr(eta))
    eta = float(eta)
    if not (0.0 < eta < 1.0) or not np.isfinite(eta):
        raise InputError(f"{field} must lie in the open interval (0, 1); got {eta}", field=field,
                         expected="a number in (0, 1)", received=str(eta))
    return eta


def is_positive_int(value) -> bool:
    """``value`` is an integer (Python or NumPy, not a bool) of at least 1."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool) and bool(value >= 1)


def check_is_fitted(estimator, attribute: str, action: str = "used") -> None:
    """Raise :class:`NotFittedError` if ``estimator`` lacks the learned ``attribute``."""
    if getattr(estimator, attribute, None) is None:
        raise NotFittedError(f"This {type(estimator).__name__} is not fitted yet; call fit before it is {action}")
