"""How the calibration scores of a grouped survey are drawn: ``split`` or ``cross-fit`` (``--calibration``).

* ``split``: whole positions (groups) held out of training score the served model
  (:func:`training.calibration.splits.group_split`). Exact: ``P >= eta`` for a reading at a position not in the survey.
* ``cross-fit``: every position of the training part calibrates. Its positions are cut into folds; the centre
  and each shape fitted without a fold score the fold's readings (:class:`training.calibration.across.UnitCrossFit`
  with the positions as units); the served model is fitted on every training position and its threshold
  is rule ``group-pooled`` over those out-of-fold scores (the pooled quantile at ``eta (m + 1) / m``).
  Approximate: no finite-sample bound holds in general for one model calibrated on other models' scores;
  its relatives that keep the fold models (cross-conformal, CV+ / jackknife+) guarantee
  ``P >= 1 - 2 (1 - eta)``.
* ``auto`` (the default): ``cross-fit`` for a grouped survey whose split would calibrate on fewer than
  ``CROSS_FIT_BELOW`` groups, ``split`` otherwise (and always for rows, for ``--calibrate-across``, which has
  its own modes, and for floors, calibrated on held-out rows).

``docs/concepts/training.md`` and ``docs/guides/guarantee.md`` discuss the trade."""

from __future__ import annotations

import math

import numpy as np

from models._validation import lookup
from models.exceptions import InputError
from training.calibration.splits import Split, group_split, groups_needed

#: the calibration modes ``--calibration`` names
MODES = ("auto", "split", "cross-fit")
#: ``auto`` cross-fits while a split would calibrate on fewer groups than this: below it the split's threshold
#: (the largest or near-largest of a few scores) swings its coverage by tens of points between draws and its
#: regions run 1.6-2x the cross-fit's; above it the gap narrows while the cross-fit's extra fits (20 of the
#: centre) grow with the survey, and the split keeps the exact form (docs/benchmarks/small-survey.md)
CROSS_FIT_BELOW = 30
#: the rule over the out-of-fold scores: every group weighted the same, the level corrected by (m + 1) / m
CROSS_FIT_RULE = "group-pooled"


def check_mode(mode) -> str:
    """``mode`` when it is one of :data:`MODES`, else an :class:`InputError` naming them."""
    return lookup(MODES, mode, "calibration mode", field="--calibration")


def split_groups(groups, seed: int, coverage: float) -> int:
    """How many calibration groups the ``split`` mode's :func:`~training.calibration.splits.group_split` would hold."""
    from models.calibration.conformal import group_codes

    split = group_split(groups, seed, coverage=coverage)
    cal = np.asarray(groups)[split.calibration]
    return int(group_codes(cal, len(cal)).max()) + 1


def resolve_mode(dataset, config) -> tuple[str, str]:
    """``(mode, why)``: ``config.calibration_mode`` with ``auto`` resolved for ``dataset``, and why in words."""
    mode = check_mode(config.calibration_mode)
    grouped = config.grouped(dataset)
    if mode == "cross-fit":
        refuse = ("--calibrate-across, which has its own cross-fit (--across-mode)" if config.calibrate_across else
                  "--floor-column: floors are calibrated on held-out positions" if config.floor_column else
                  "rows that are not grouped: cross-fit calibrates over positions (name them with --groups)"
                  if not grouped else None)
        if refuse:
            raise InputError(f"--calibration cross-fit does not go with {refuse}", field="--calibration",
                             expected="split or auto", received="cross-fit")
        return mode, "asked for (--calibration cross-fit)"
    if mode == "split":
        return mode, "asked for (--calibration split)"
    if config.calibrate_across or config.floor_column or not grouped:
        return "split", ("--calibrate-across" if config.calibrate_across else "floors" if config.floor_column
                         else "rows, not groups")
    n_cal = split_groups(dataset.groups, config.seed, config.coverage)
    if n_cal < CROSS_FIT_BELOW:
        return "cross-fit", (f"a split would calibrate on {n_cal} groups, fewer than {CROSS_FIT_BELOW}: every "
                             "position calibrates instead")
    return "split", f"a split calibrates on {n_cal} groups ({CROSS_FIT_BELOW} or more)"


def cross_fit_split(groups, seed: int, coverage: float, split: Split | None = None, why: str = "") -> Split:
    """The ``cross-fit`` mode's split: the test part of ``split`` (default: :func:`~training.calibration.splits.group_split`'s
    whole test groups), and every other row in the training part, whose rows are also the calibration rows
    (scored out of fold). ``Split.cross_fit`` records the counts and ``why``."""
    from models.calibration.conformal import group_codes

    base = split or group_split(groups, seed)
    train = np.union1d(base.train, base.calibration)
    codes = group_codes(groups, len(groups))
    m = len(np.unique(codes[train]))
    need = groups_needed(coverage)
    if m < need:
        top = m / (m + 1)
        raise InputError(f"the training part holds {m} groups, which attain coverage at most {top:.4g} (m / (m + 1)); "
                         f"coverage {coverage} needs at least {need} groups beside the test part",
                         field="coverage", expected=f"at most {math.floor(top * 1e4) / 1e4:g} with {m} groups",
                         received=str(coverage))
    record = {"mode": "cross-fit", "why": why, "groups": m, "test_groups": len(np.unique(codes[base.test])),
              "rows": len(train)}
    return Split(train=train, calibration=train, test=base.test, selection=base.selection, cross_fit=record)


def cross_fit_guarantee(eta: float, unit: str, m: int, rows: int, folds: int, centre_folds: int) -> str:
    """The ``cross-fit`` mode's guarantee in words, with its bound and the split form's beside it."""
    low = 1 - 2 * (1 - eta)
    return (f"P ~ {eta} (approximate, cross-fit) for a {unit}: calibrated on all {m} positions of the training part, "
            f"{rows} rows, each scored by a centre ({centre_folds} folds) and shapes ({folds} folds) fitted without "
            f"it, every position weighted the same (rule {CROSS_FIT_RULE}); the served model is fitted on all of "
            f"them. No finite-sample bound holds for this form in general: its cross-conformal (CV+) relative "
            f"guarantees P >= {low:.4g} (1 - 2 (1 - {eta})), split conformal P >= {eta} with fewer positions "
            f"calibrating (--calibration split)")
