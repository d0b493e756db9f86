"""The split protocols: which rows train, calibrate and test (``docs/concepts/conformal.md``).

:func:`paper_split` draws rows at random (the paper); :func:`group_split` draws whole groups and, with
few groups, moves whole groups into calibration until the level is attainable;
:func:`training.calibration.across.across_split` holds whole units (phones, users) out of training. All return a
:class:`Split`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from models.exceptions import InputError
from training.data.datasets import MIN_ROWS


@dataclass(frozen=True)
class Split:
    """Row indices of each part. ``selection``: the rows that choose the served method (``None``: the
    test rows); never calibration rows. ``adjustment``: what :func:`group_split` changed to reach
    the level, in figures and words (``None``: the default fractions). ``across``: for a split over units
    held out of training (:func:`training.calibration.across.across_split`), its units, rows dropped, rule and guarantee.
    ``cross_fit``: for the ``cross-fit`` calibration mode (:func:`training.calibration.cross_fit.cross_fit_split`, whose
    calibration rows are the training rows, scored out of fold), its counts and why it was chosen."""

    train: np.ndarray
    calibration: np.ndarray
    test: np.ndarray
    selection: np.ndarray | None = None
    adjustment: dict | None = None
    across: dict | None = None
    cross_fit: dict | None = None


def paper_split(m: int, seed: int, test_fraction: float = 0.1, calibration_fraction: float = 0.1) -> Split:
    """Shuffle with ``seed``; ``ceil(test_fraction m)`` test rows, then ``ceil(calibration_fraction * rest)``
    calibration rows; the remainder trains."""
    if m < MIN_ROWS:
        raise InputError(f"the data has {m} rows; at least {MIN_ROWS} are needed for the split protocol")
    perm = np.random.default_rng(seed).permutation(m)
    n_test = math.ceil(test_fraction * m)
    n_cal = math.ceil(calibration_fraction * (m - n_test))
    return Split(train=np.sort(perm[n_test + n_cal:]), calibration=np.sort(perm[n_test:n_test + n_cal]),
                 test=np.sort(perm[:n_test]))


#: a grouped split keeps at least this many test groups (the report and the choice of the served
#: method) and train groups (the centre's group cross-validation and the cross-fitted residuals)
MIN_TEST_GROUPS, MIN_TRAIN_GROUPS = 1, 2


def groups_needed(eta: float) -> int:
    """The fewest calibration groups ``m`` whose level ``m / (m + 1)`` reaches ``eta``: ``ceil(eta / (1 - eta))``."""
    return math.ceil(eta / (1 - eta) - 1e-9)


def group_split(groups, seed: int, test_fraction: float = 0.1, calibration_fraction: float = 0.1,
                coverage: float | None = None) -> Split:
    """The paper's split over whole groups: shuffled groups go to test until ``ceil(test_fraction m)``
    rows, then to calibration until ``ceil(calibration_fraction * rest)`` rows; the rest trains.
    Every part holds at least one group; no group is in two parts.

    With ``coverage``, when the calibration part holds fewer than :func:`groups_needed` groups (too
    few for the level, ``m / (m + 1) < eta``), whole groups move into calibration, from the train
    part (its first in the shuffled order) down to :data:`MIN_TRAIN_GROUPS`, then from the test part
    down to :data:`MIN_TEST_GROUPS`; ``Split.adjustment`` records it. The guarantee is unchanged
    (calibration still holds whole groups, never seen in training); the cost is fewer training rows.
    When even that cannot reach the level, an :class:`InputError` names the highest level the groups
    attain. Without ``coverage``, no group moves."""
    from models.calibration.conformal import group_codes, max_coverage

    m = len(groups)
    if m < MIN_ROWS:
        raise InputError(f"the data has {m} rows; at least {MIN_ROWS} are needed for the split protocol")
    codes = group_codes(groups, m)
    n_groups = int(codes.max()) + 1
    if n_groups < 3:
        raise InputError(f"the rows form {n_groups} group{'s' if n_groups != 1 else ''}; a grouped split needs at "
                         "least 3 (test, calibration and train each hold whole groups)", field="groups",
                         expected="at least 3 groups", received=f"{n_groups}")
    order = np.random.default_rng(seed).permutation(n_groups)
    sizes = np.bincount(codes, minlength=n_groups)
    cum = np.cumsum(sizes[order])
    n_test = min(int(np.searchsorted(cum, math.ceil(test_fraction * m))) + 1, n_groups - 2)
    rest = m - cum[n_test - 1]
    target = cum[n_test - 1] + math.ceil(calibration_fraction * rest)
    n_cal = min(max(int(np.searchsorted(cum, target)) + 1 - n_test, 1), n_groups - n_test - 1)
    adjustment = None
    need = groups_needed(coverage) if coverage is not None else 0
    if n_cal < need:
        most = n_groups - MIN_TEST_GROUPS - MIN_TRAIN_GROUPS
        if most < need:
            top = max_coverage(max(most, 0))
            raise InputError(
                f"the rows form {n_groups} groups; coverage {coverage} needs {need} calibration groups "
                f"(m / (m + 1) >= {coverage}) beside {MIN_TEST_GROUPS} test and {MIN_TRAIN_GROUPS} training groups, "
                f"{need + MIN_TEST_GROUPS + MIN_TRAIN_GROUPS} groups in all. The highest level {n_groups} groups "
                f"attain is {max(most, 0)}/{max(most, 0) + 1} = {top:.4g} ({max(most, 0)} calibration groups): train at --coverage {_floor(top)} or "
                f"below, or bring more groups", field="coverage", expected=f"at most {_floor(top)} with {n_groups} "
                f"groups", received=f"{coverage}")
        before = {"test": n_test, "calibration": n_cal, "train": n_groups - n_test - n_cal}
        train_rows_before = int(m - cum[n_test + n_cal - 1])
        from_train = min(need - n_cal, n_groups - n_test - n_cal - MIN_TRAIN_GROUPS)
        from_test = need - n_cal - from_train
        n_test -= from_test  # the boundaries move in the shuffled order: calibration takes its neighbours
        n_cal = need
        after = {"test": n_test, "calibration": n_cal, "train": n_groups - n_test - n_cal}
        train_rows = int(m - np.cumsum(sizes[order])[n_test + n_cal - 1])
        adjustment = {"groups_before": before, "groups": after, "moved_from_train": int(from_train),
                      "moved_from_test": int(from_test), "train_rows_before": train_rows_before,
                      "train_rows": train_rows,
                      "words": f"the default fractions left {before['calibration']} of the {n_groups} groups "
                               f"for calibration, which attain at most {max_coverage(before['calibration']):.4g}; "
                               f"{from_train + from_test} whole groups moved into calibration ({from_train} from "
                               f"training, {from_test} from test) so that its {need} groups attain {coverage}. Cost: training "
                               f"has {after['train']} groups, {train_rows} rows (was {train_rows_before})"}
    part = np.empty(n_groups, dtype=int)
    part[order[:n_test]], part[order[n_test:n_test + n_cal]], part[order[n_test + n_cal:]] = 0, 1, 2
    where = part[codes]
    return Split(train=np.flatnonzero(where == 2), calibration=np.flatnonzero(where == 1),
                 test=np.flatnonzero(where == 0), adjustment=adjustment)


def _floor(level: float) -> str:
    """``level`` rounded down to 4 decimals, as a flag value that does not exceed it."""
    return f"{math.floor(level * 1e4) / 1e4:g}"


def count_units(rows: np.ndarray, groups) -> int:
    """How many exchangeable units ``rows`` hold: rows, or their groups (``groups`` for every row)."""
    return len(rows) if groups is None else len(np.unique(np.asarray(groups)[rows], axis=0))


def check_calibration_groups(groups, split: Split, eta: float) -> None:
    """Refuse a grouped split whose calibration groups cannot attain ``eta`` (``m_g / (m_g + 1) < eta``)."""
    from models.calibration.conformal import group_codes, max_coverage

    cal = np.asarray(groups)[split.calibration]
    m_g = int(group_codes(cal, len(cal)).max()) + 1
    top = max_coverage(m_g)
    if eta > top:
        n_all = int(group_codes(groups, len(groups)).max()) + 1
        need = math.ceil(eta / (1 - eta) - 1e-9)
        raise InputError(f"the calibration part holds {m_g} groups (of {n_all}), which attain coverage at most "
                         f"{top:.4g} (m / (m + 1) per group); coverage {eta} needs at least {need} calibration "
                         f"groups, about {need * 11} groups in all", field="groups",
                         expected=f"at least {need} calibration groups", received=f"{m_g}")
