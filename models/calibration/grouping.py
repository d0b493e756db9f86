"""How calibration groups are chosen, written once for ``train()``, ``lmve-train``, ``lmve-recalibrate`` and
``POST /admin/recalibrate``: rows that mostly repeat their exact position (more than :data:`REPEATED_SHARE` of
them) are a survey, and each position is one group (several readings of one place are one draw, not several),
so the guarantee is for readings at positions not in the survey. A ``groups`` setting is parsed by
:func:`parse_groups` (``"none"``: rows; ``"a,b"``: those label columns; absent: :data:`AUTO`)."""

from __future__ import annotations

import numpy as np

from models.exceptions import InputError

#: the share of rows repeating another row's exact position above which rows are grouped by position
REPEATED_SHARE = 0.5
#: a ``groups`` setting: group by position when the rows repeat positions (:data:`REPEATED_SHARE`), else rows
AUTO = "auto"
#: ``--group-rule`` / ``group_rule`` names -> calibration rules of :mod:`models.calibration.conformal`
GROUP_RULES = {"subsample": "group-subsample", "pooled": "group-pooled"}


def share_of_repeated_positions(points) -> float:
    """The share of rows whose exact position is also another row's.

    Parameters
    ----------
    points : array-like of shape (k, n)
        The rows' true positions.

    Returns
    -------
    float
        In [0, 1]; 0 for ``points`` that are not a numeric 2-D array (the model's own check then names what
        is wrong).
    """
    try:
        P = np.asarray(points, dtype=np.float64)
    except (TypeError, ValueError):
        return 0.0
    if P.ndim != 2 or P.shape[0] == 0:
        return 0.0
    _, inverse, counts = np.unique(P, axis=0, return_inverse=True, return_counts=True)
    return float(np.mean(counts[inverse.ravel()] > 1))


def position_codes(points) -> np.ndarray | None:
    """Each row's position as its group.

    Parameters
    ----------
    points : array-like of shape (k, n)
        One true position per row (a survey's reference point, repeated for each reading taken there).

    Returns
    -------
    ndarray of shape (k,) or None
        Codes ``0 .. g - 1`` in the sorted positions' order when the rows are a survey (more than
        :data:`REPEATED_SHARE` of them repeat another row's exact position); ``None`` (rows) otherwise.
    """
    if share_of_repeated_positions(points) <= REPEATED_SHARE:
        return None
    return np.unique(np.asarray(points, dtype=np.float64), axis=0, return_inverse=True)[1].ravel()


def parse_groups(text: str | None, field: str = "groups") -> str | list[str] | None:
    """A ``groups`` setting as its three forms.

    Parameters
    ----------
    text : str or None
        ``None``: :data:`AUTO`; ``"none"`` (any case): rows; else comma-separated label column names.
    field : str, default="groups"
        The flag or field an error names.

    Returns
    -------
    str, list of str or None
        :data:`AUTO`, the column names, or ``None`` for rows.

    Raises
    ------
    InputError
        A setting that names no column (``","``).
    """
    if text is None:
        return AUTO
    if text.strip().lower() == "none":
        return None
    columns = [c.strip() for c in text.split(",") if c.strip()]
    if not columns:
        raise InputError(f"{field} names no column; give COL[,COL], or none for rows", field=field,
                         expected="COL[,COL] | none", received=repr(text))
    return columns
