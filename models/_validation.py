"""Input checks shared by every estimator: shapes, finiteness, fitted state."""

from __future__ import annotations

import numbers

import numpy as np

from models.exceptions import InputError, NotFittedError


def all_finite(A: np.ndarray) -> bool:
    """Whether every entry of the array ``A`` is finite: ``np.isfinite(A).all()`` as one ufunc
    reduction, without ``ndarray.all``'s Python-level wrapper (half the cost on the serving path's
    small arrays, where this runs several times per request)."""
    return bool(np.logical_and.reduce(np.isfinite(A), axis=None))


def check_matrix(
    A,
    name: str,
    *,
    n_columns: int | None = None,
    owner: str | None = None,
    min_rows: int = 1,
    allow_nonfinite: bool = False,
) -> np.ndarray:
    """Return ``A`` as a C-contiguous float64 array of shape (rows, columns).

    Raises :class:`InputError` with a message that names ``name``, what was expected and
    what came: wrong dimensionality, too few rows, wrong column count, NaN or inf.
    """
    if (type(A) is np.ndarray and A.dtype == np.float64 and A.ndim == 2 and A.shape[0] >= min_rows
            and (n_columns is None or A.shape[1] == n_columns) and A.flags.c_contiguous
            and (allow_nonfinite or all_finite(A))):
        return A  # the common case on the serving path, already checked upstream: a few microseconds
    try:
        arr = np.asarray(A, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise InputError(f"{name} must be a numeric 2-D array; could not convert it: {exc}") from None
    if arr.ndim == 1 and n_columns is not None and arr.shape[0] == n_columns and n_columns > 1:
        raise InputError(
            f"{name} must be 2-D with shape (n_rows, {n_columns}); got a 1-D array of length "
            f"{arr.shape[0]}. Use {name}.reshape(1, -1) for a single row."
        )
    if arr.ndim != 2:
        raise InputError(f"{name} must be a 2-D array (n_rows, n_columns); got {arr.ndim}-D with shape {arr.shape}")
    if arr.shape[0] < min_rows:
        raise InputError(f"{name} has {arr.shape[0]} rows; at least {min_rows} are required")
    if n_columns is not None and arr.shape[1] != n_columns:
        who = f"{owner} expects" if owner else "expected"
        raise InputError(f"{name} has {arr.shape[1]} columns, but {who} {n_columns}")
    if not allow_nonfinite and not np.isfinite(arr).all():
        bad = np.argwhere(~np.isfinite(arr))[0]
        raise InputError(
            f"{name} contains NaN or inf (first at row {int(bad[0])}, column {int(bad[1])}); "
            "only finite values are accepted"
        )
    return np.ascontiguousarray(arr)


def check_Xy(X, Y, *, x_name: str = "X", y_name: str = "R", min_rows: int = 1):
    """Check a feature matrix and a 2-D target/residual matrix with the same number of rows."""
    X = check_matrix(X, x_name, min_rows=min_rows)
    Y = check_matrix(Y, y_name, min_rows=min_rows)
    if X.shape[0] != Y.shape[0]:
        raise InputError(f"{x_name} has {X.shape[0]} rows but {y_name} has {Y.shape[0]}; they must match")
    if Y.shape[1] < 1:
        raise InputError(f"{y_name} must have at least one column; got shape {Y.shape}")
    return X, Y


def check_coverage(eta, name: str = "coverage") -> float:
    """Check a coverage level ``eta`` lies in the open interval (0, 1)."""
    if isinstance(eta, bool) or not isinstance(eta, numbers.Real):
        raise InputError(f"{name} must be a number in (0, 1); got {eta!r}")
    eta = float(eta)
    if not (0.0 < eta < 1.0) or not np.isfinite(eta):
        raise InputError(f"{name} must lie in the open interval (0, 1); got {eta}")
    return eta


def is_positive_int(value) -> bool:
    """``value`` is an integer (Python or NumPy, not a bool) of at least 1."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool) and bool(value >= 1)


def check_is_fitted(estimator, attribute: str, action: str = "used") -> None:
    """Raise :class:`NotFittedError` if ``estimator`` lacks the learned ``attribute``."""
    if getattr(estimator, attribute, None) is None:
        raise NotFittedError(
            f"This {type(estimator).__name__} is not fitted yet; call fit before it is {action}"
        )


def check_features(estimator, X, name: str = "X") -> np.ndarray:
    """Check ``X`` against the feature count an estimator learned in ``fit``."""
    check_is_fitted(estimator, "n_features_in_", "asked to predict")
    return check_matrix(X, name, n_columns=estimator.n_features_in_, owner=type(estimator).__name__)
