"""``--calibrate-across COL[,COL]``: calibrate at units (phones, users, days) absent from training.

A survey's calibration part usually shares its phones and users with the training part, so its
scores do not carry the shift a new phone brings (``benchmarks/results/shift.md``: 90 % regions held
62 % of readings from held-out phones). Here the *units* are the distinct values (combinations, with
several columns) of ``COL``; a split holds whole units out:

1. shuffled units go to the test part until it holds ``ceil(0.1 m)`` rows (at least one unit), then
   to the calibration part until it holds ``ceil(0.1 * rest)`` rows (at least two units);
2. the training part is every other row that shares **no** value of any ``COL`` with a held-out
   unit (with ``PHONEID,USERID``, a held-out user's phone leaves training too);
3. when the dataset is grouped (by position for a survey), whole groups holding 20 % of the rows
   are drawn too: test and calibration keep their units' rows at those groups, training the rows
   elsewhere. Calibration and test readings then come from a unit *and* a position the model never
   saw, like a new phone's readings between the survey's points. Crossing the two costs fewer
   training rows than dropping every position a held-out unit surveyed (UJIIndoorLoc: a phone
   surveys a third of the positions, and held-out phones' positions took 40-60 % of the rows);
   the rows no part can use (held-out units elsewhere, other units at the drawn groups) are
   counted as ``set_aside`` in ``Split.across``.

The calibration scores then stand for a new unit, and the guarantee is for a reading of a new unit
(SPEC section 9). With ``m`` calibration units: when ``m >= ceil(eta / (1 - eta))`` (9 at 0.9), one
score per unit drawn at random (rule ``group-subsample``) covers it with ``P >= eta``, exactly;
with fewer, every unit weighted ``1/m`` (rule ``group-weighted``, the pooled quantile at ``eta``),
which is approximate, and said so. Units are not moved into calibration to reach the exact form:
each one moved leaves training, and a survey has few phones (UJIIndoorLoc: 16, 18 users).
"""

from __future__ import annotations

import math

import numpy as np

from models.exceptions import InputError
from training.splits import Split, groups_needed

#: a split needs one test unit, two calibration units (a pooled quantile over one unit is that
#: unit's alone) and two training units (the centre's and the shapes' unit folds)
MIN_TEST_UNITS, MIN_CALIBRATION_UNITS, MIN_TRAIN_UNITS = 1, 2, 2
MIN_UNITS = MIN_TEST_UNITS + MIN_CALIBRATION_UNITS + MIN_TRAIN_UNITS


def check_columns(dataset, columns) -> tuple[str, ...]:
    """``columns`` as a tuple of names of ``dataset.meta``, or an :class:`InputError` naming what is missing."""
    cols = tuple(dict.fromkeys(c.strip() for c in columns if c.strip()))
    if not cols:
        raise InputError("--calibrate-across needs at least one column (e.g. PHONEID)", field="--calibrate-across",
                         expected="COL[,COL]", received="none")
    missing = [c for c in cols if c not in dataset.meta]
    if missing:
        have = ", ".join(dataset.meta) or "none"
        raise InputError(f"--calibrate-across names {', '.join(missing)}, which {dataset.name} does not have as a "
                         f"per-row label column; it has {have}", field="--calibrate-across",
                         expected=f"one of: {have}", received=", ".join(missing))
    return cols


def unit_codes(dataset, columns) -> np.ndarray:
    """(m,) integer code of each row's unit: its combination of ``columns`` values (``dataset.meta``)."""
    from training.datasets import group_codes_of

    cols = check_columns(dataset, columns)
    return group_codes_of({c: dataset.meta[c] for c in cols})


def _take(sizes: np.ndarray, order: np.ndarray, start: int, rows: int, least: int, most: int) -> int:
    """How many units of ``order[start:]`` reach ``rows`` rows, within ``[least, most]``."""
    cum = np.cumsum(sizes[order[start:]])
    return int(min(max(int(np.searchsorted(cum, rows)) + 1, least), most))


def sharing(meta: dict, columns, held: np.ndarray) -> np.ndarray:
    """(m,) mask of the rows that share a value of any of ``columns`` with a ``held`` row (held rows included)."""
    out = np.zeros(held.shape[0], dtype=bool)
    for c in columns:
        out |= np.isin(meta[c], np.unique(meta[c][held]))
    return out


def held_groups(groups: np.ndarray, share: float, rng) -> np.ndarray:
    """(m,) mask of the rows of whole groups (positions) drawn in random order until they hold ``share`` of
    the rows (at least one group, never all)."""
    codes = np.unique(groups, return_inverse=True)[1].ravel()
    n = int(codes.max()) + 1
    order = rng.permutation(n)
    k = _take(np.bincount(codes, minlength=n), order, 0, math.ceil(share * len(codes)), 1, max(n - 1, 1))
    return np.isin(codes, order[:k])


def across_split(dataset, columns, seed: int, coverage: float, test_fraction: float = 0.1,
                 calibration_fraction: float = 0.1):
    """A :class:`training.splits.Split` whose test and calibration parts hold whole units of ``columns``
    absent from training (see the module docstring); ``Split.across`` says how many units each part
    holds, the rows set aside, the rule and the guarantee in words."""
    cols = check_columns(dataset, columns)
    codes = unit_codes(dataset, cols)
    name = ",".join(cols)
    n_units = int(codes.max()) + 1
    if n_units < MIN_UNITS:
        raise InputError(f"--calibrate-across {name}: the rows hold {n_units} distinct {name} value"
                         f"{'s' if n_units != 1 else ''}; calibrating across them needs at least {MIN_UNITS} "
                         f"({MIN_TEST_UNITS} for test, {MIN_CALIBRATION_UNITS} for calibration, {MIN_TRAIN_UNITS} "
                         "for training)", field="--calibrate-across", expected=f"at least {MIN_UNITS} {name} values",
                         received=str(n_units))
    m = len(codes)
    rng = np.random.default_rng(seed)
    order = rng.permutation(n_units)
    sizes = np.bincount(codes, minlength=n_units)
    n_test = _take(sizes, order, 0, math.ceil(test_fraction * m), MIN_TEST_UNITS,
                   n_units - MIN_CALIBRATION_UNITS - MIN_TRAIN_UNITS)
    rest = m - int(sizes[order[:n_test]].sum())
    n_cal = _take(sizes, order, n_test, math.ceil(calibration_fraction * rest), MIN_CALIBRATION_UNITS,
                  n_units - n_test - MIN_TRAIN_UNITS)
    part = np.full(n_units, 2)
    part[order[:n_test]], part[order[n_test:n_test + n_cal]] = 0, 1
    where = part[codes]
    apart = ~sharing(dataset.meta, cols, where != 2)
    at_held = np.ones(m, dtype=bool) if dataset.groups is None else \
        held_groups(dataset.groups, test_fraction + calibration_fraction, rng)
    test, cal = np.flatnonzero((where == 0) & at_held), np.flatnonzero((where == 1) & at_held)
    train = np.flatnonzero(apart & ~at_held) if dataset.groups is not None else np.flatnonzero(apart)
    counts = {part_name: len(np.unique(codes[rows])) for part_name, rows in
              (("test", test), ("calibration", cal), ("train", train))}
    for part_name, least in (("test", MIN_TEST_UNITS), ("calibration", MIN_CALIBRATION_UNITS),
                             ("train", MIN_TRAIN_UNITS)):
        if counts[part_name] < least:
            raise InputError(f"--calibrate-across {name}: the {part_name} part holds {counts[part_name]} {name} "
                             f"unit{'s' if counts[part_name] != 1 else ''} ({n_units} in the data) once the rows that "
                             f"share a value{' or a ' + dataset.grouping.get('by', 'group') if dataset.groups is not None else ''} "
                             f"with another part are set aside; at least {least} are needed",
                             field="--calibrate-across", expected=f"at least {least} {part_name} units",
                             received=str(counts[part_name]))
    n_cal = counts["calibration"]
    need = groups_needed(coverage)
    exact = n_cal >= need
    rule = "group-subsample" if exact else "group-weighted"
    at = f" at a {dataset.grouping['by']} not in the training data" if dataset.groups is not None else ""
    what = f"a reading from a new {name} unit{at}"
    if exact:
        words = (f"P >= {coverage} (exact) for {what}: calibrated on {n_cal} {name} units absent from training, "
                 f"one score per unit drawn at random (rule group-subsample)")
    else:
        words = (f"P ~ {coverage} (approximate) for {what}: calibrated on {n_cal} {name} units absent from training, "
                 f"each weighted 1/{n_cal} (rule group-weighted); the exact form needs {need} calibration units "
                 f"(m / (m + 1) >= {coverage}), the data has {n_units} in all")
    used = len(test) + len(cal) + len(train)
    across = {"columns": list(cols), "n_units": n_units, "units": counts,
              "rows": {"test": len(test), "calibration": len(cal), "train": len(train), "set_aside": m - used},
              "held_out_groups": None if dataset.groups is None else int(len(np.unique(dataset.groups[at_held]))),
              "rule": rule, "exact": exact, "units_needed_for_exact": need, "guarantee": words}
    return Split(train=train, calibration=cal, test=test, across=across)
