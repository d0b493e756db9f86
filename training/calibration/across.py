"""``--calibrate-across COL[,COL]``: calibrate at units (phones, users, days) the scoring model never saw.

The *units* are the distinct values (combinations, with several columns) of ``COL``. Two modes:

* ``cross-fit`` (default, :class:`UnitCrossFit`): **every unit trains the served model and calibrates it**.
  The units are cut into folds; each unit's calibration scores come from a centre and shapes fitted
  without its fold (cross-conformal; approximate, and said so), the threshold is rule ``group-weighted``
  over all of them (every unit weighted ``1/m``). There is no test part: the held-out figures (coverage,
  area, the centre's error) are each unit's rows scored by its fold's models at the threshold the *other*
  units' scores give (leave one unit out, :mod:`training.calibration.unit_holdout`), what a new unit meets.
* ``held-out``: shuffled units go to a test part until it holds ``ceil(0.1 m)`` rows (at least one), then
  units holding 10 % of the rest's rows (at least two) are held out of training and calibrate alone;
  ``m >= ceil(eta / (1 - eta))`` of them make rule ``group-subsample`` exact. The training part is every
  other row that shares **no** value of any ``COL`` with a held-out unit.

When the dataset is grouped (``--groups``; the caller leaves an automatic grouping out, ``holds_positions``
in :mod:`training.calibration.modes`), whole groups holding 20 % of the rows are drawn too: test and
calibration keep their units' rows at those groups, training the rows elsewhere, so a calibration or test
reading comes from a unit *and* a position its model never saw (``Split.across`` counts the rows no part
can use as ``set_aside``). The guarantee is for a reading of a new unit; ``docs/concepts/training.md``
gives the reasoning."""

from __future__ import annotations

import math

import numpy as np

from models._validation import lookup
from models.exceptions import InputError
from training.calibration.splits import Split, count_units, groups_needed

#: a split needs one test unit, two calibration units (a pooled quantile over one unit is that
#: unit's alone) and two training units (the centre's and the shapes' unit folds)
MIN_TEST_UNITS, MIN_CALIBRATION_UNITS, MIN_TRAIN_UNITS = 1, 2, 2
MIN_UNITS = MIN_TEST_UNITS + MIN_CALIBRATION_UNITS + MIN_TRAIN_UNITS
#: a grouped split draws whole groups holding at least this share of the rows (test and calibration read there)
HELD_GROUPS = 0.2
#: the cross-fit without a test part: each unit held out in turn against at least two others
MIN_UNITS_CROSS = MIN_CALIBRATION_UNITS + 1


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
    from training.data.datasets import group_codes_of

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


MODES = ("cross-fit", "held-out")


def _refuse(name: str, what: str, least: int, have: int, detail: str = "") -> InputError:
    return InputError(f"--calibrate-across {name}: the {what} holds {have} {name} unit{'s' if have != 1 else ''}"
                      f"{detail}; at least {least} are needed", field="--calibrate-across",
                      expected=f"at least {least} {what.split()[0]} units", received=str(have))


def across_split(dataset, columns, seed: int, coverage: float, test_fraction: float | None = None,
                 calibration_fraction: float = 0.1, mode: str = "cross-fit", folds: int = 5):
    """A :class:`training.calibration.splits.Split` whose calibration scores come from models that never saw
    the unit scored (see the module docstring). ``mode="cross-fit"`` (default): every unit trains and
    calibrates, scored out of its unit fold (``folds`` folds, :class:`UnitCrossFit`; with groups, the
    calibration rows are the units' rows at the drawn groups, the training rows the others) and, unless
    ``test_fraction`` (default 0 here) asks for one, no test part. ``mode="held-out"``: a test part of
    ``test_fraction`` (default 0.1) of the rows and calibration units held out of training. ``Split.across``
    says how many units each part holds, the rows set aside, the rule and the guarantee in words."""
    lookup(MODES, mode, "the across mode", field="--across-mode")
    cols = check_columns(dataset, columns)
    codes = unit_codes(dataset, cols)
    name = ",".join(cols)
    n_units = int(codes.max()) + 1
    m = len(codes)
    cross = mode == "cross-fit"
    if test_fraction is None:
        test_fraction = 0.0 if cross else 0.1
    if not cross and not test_fraction > 0:
        raise InputError(f"the held-out across mode measures on a test part; test_fraction must be > 0, got "
                         f"{test_fraction!r}", field="test_fraction", expected="a share in (0, 1)",
                         received=repr(test_fraction))
    least_test = MIN_TEST_UNITS if test_fraction > 0 else 0
    least_units = MIN_UNITS if least_test else MIN_UNITS_CROSS
    if n_units < least_units:
        parts = (f"{MIN_TEST_UNITS} for test, {MIN_CALIBRATION_UNITS} for calibration, {MIN_TRAIN_UNITS} for training"
                 if least_test else f"each held out in turn, scored at a threshold from at least "
                 f"{MIN_CALIBRATION_UNITS} others")
        raise InputError(f"--calibrate-across {name}: the rows hold {n_units} distinct {name} value"
                         f"{'s' if n_units != 1 else ''}; calibrating across them needs at least {least_units} "
                         f"({parts})", field="--calibrate-across", expected=f"at least {least_units} {name} values",
                         received=str(n_units))
    rng = np.random.default_rng(seed)
    order = rng.permutation(n_units)
    sizes = np.bincount(codes, minlength=n_units)
    n_test = 0 if not least_test else _take(sizes, order, 0, math.ceil(test_fraction * m), MIN_TEST_UNITS,
                                            n_units - MIN_CALIBRATION_UNITS - MIN_TRAIN_UNITS)
    rest = m - int(sizes[order[:n_test]].sum())
    n_cal = 0 if cross else _take(sizes, order, n_test, math.ceil(calibration_fraction * rest),
                                  MIN_CALIBRATION_UNITS, n_units - n_test - MIN_TRAIN_UNITS)
    part = np.full(n_units, 2)
    part[order[:n_test]], part[order[n_test:n_test + n_cal]] = 0, 1
    where = part[codes]
    apart = ~sharing(dataset.meta, cols, where != 2)
    grouped = dataset.groups is not None
    at_held = held_groups(dataset.groups, max(test_fraction + calibration_fraction, HELD_GROUPS), rng) if grouped \
        else np.ones(m, dtype=bool)
    test = np.flatnonzero((where == 0) & at_held)
    train = np.flatnonzero(apart & ~at_held) if grouped else np.flatnonzero(apart)
    if cross:  # every training unit's rows at the drawn groups, scored out of fold
        cal = np.flatnonzero(apart & at_held) if grouped else train
    else:
        cal = np.flatnonzero((where == 1) & at_held)
    counts = {part_name: len(np.unique(codes[rows])) for part_name, rows in
              (("test", test), ("calibration", cal), ("train", train))}
    detail = (f" ({n_units} in the data) once the rows that share a value"
              f"{' or a ' + dataset.grouping.get('by', 'group') if grouped else ''} with another part are set aside")
    for part_name, least in (("test", least_test), ("calibration", MIN_CALIBRATION_UNITS),
                             ("train", MIN_TRAIN_UNITS)):
        if counts[part_name] < least:
            raise _refuse(name, f"{part_name} part", least, counts[part_name], detail)
    n_cal = counts["calibration"]
    need = groups_needed(coverage)
    exact = n_cal >= need and not cross
    rule = "group-weighted" if not exact else "group-subsample"
    words = _guarantee(dataset, name, coverage, counts, n_units, need, exact, cross, folds, n_test)
    used = len(np.union1d(np.union1d(test, cal), train))
    across = {"columns": list(cols), "mode": mode, "n_units": n_units, "units": counts,
              "rows": {"test": len(test), "calibration": len(cal), "train": len(train), "set_aside": m - used},
              "held_out_groups": None if not grouped else int(len(np.unique(dataset.groups[at_held]))),
              "folds": min(folds, counts["train"]) if cross else None,
              "held_out": "test part" if len(test) else "each unit scored by its fold's models at the threshold "
                                                        "of the other units' scores (leave one unit out)",
              "rule": rule, "exact": exact, "units_needed_for_exact": need, "guarantee": words}
    return Split(train=train, calibration=cal, test=test, across=across)

def _guarantee(dataset, name: str, coverage: float, counts: dict, n_units: int, need: int, exact: bool,
               cross: bool, folds: int, n_test: int) -> str:
    """:func:`across_split`'s guarantee in words."""
    grouped = dataset.groups is not None
    n_cal = counts["calibration"]
    at = f" at a {dataset.grouping['by']} not in the training data" if grouped else ""
    what = f"a reading from a new {name} unit{at}"
    if cross:
        k = min(folds, counts["train"])
        served = ("the served model is fitted on all of them" if not n_test else
                  f"the served model is fitted on them ({counts['test']} more units held out to test)")
        words = (f"P ~ {coverage} (approximate) for {what}: calibrated on all {n_cal} {name} units, each scored "
                 f"{'at groups out of training ' if grouped else ''}by a model fitted without it ({k} unit folds, "
                 f"cross-conformal), each unit weighted 1/{n_cal} (rule group-weighted); {served}")
    elif exact:
        words = (f"P >= {coverage} (exact) for {what}: calibrated on {n_cal} {name} units absent from training, "
                 f"one score per unit drawn at random (rule group-subsample)")
    else:
        words = (f"P ~ {coverage} (approximate) for {what}: calibrated on {n_cal} {name} units absent from training, "
                 f"each weighted 1/{n_cal} (rule group-weighted); the exact form needs {need} calibration units "
                 f"(m / (m + 1) >= {coverage}), the data has {n_units} in all")
    return words


def check_centre_folds(value) -> int:
    """``value`` (``TrainConfig.across_centre_folds``), or an :class:`InputError` unless an integer >= 2."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 2:
        raise InputError(f"the centre's unit folds must be an integer >= 2; got {value!r}", field="across_centre_folds",
                         expected="an integer >= 2", received=repr(value))
    return int(value)


def check_centre_seconds(value) -> float | None:
    """``value`` (``TrainConfig.across_centre_seconds``), or an :class:`InputError` unless positive seconds or
    ``None``."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0):
        raise InputError(f"across_centre_seconds must be a positive number of seconds or None; got {value!r}",
                         field="across_centre_seconds", expected="seconds > 0 or None", received=repr(value))
    return value


def centre_folds(n_units: int, most: int, least: int, fit_seconds: float | None, allowance: float | None
                 ) -> tuple[int, str]:
    """``(folds, why)``: the centre's unit folds over ``n_units`` training units: one unit per fold up to
    ``most`` folds, fewer when ``fit_seconds`` (the cost of one fit of the served centre,
    :func:`training.calibration.centre_cost.fit_seconds`) times the folds passes ``allowance`` seconds,
    never fewer than ``least`` (the shapes' folds) nor than 2. A function of its arguments alone."""
    want = max(2, min(check_centre_folds(most), n_units))
    afford = want if allowance is None or fit_seconds is None or fit_seconds * want <= allowance else \
        max(2, min(least, want), int(allowance // max(fit_seconds, 1e-9)))
    if afford >= want:
        return want, f"one unit per fold ({n_units} units)" if want == n_units else f"{want} folds (at most {most})"
    return afford, (f"{afford} folds, not {want}: a fit of the centre is costed at {fit_seconds:.1f} s and the "
                    f"folds' fits may take {allowance:g} s (TrainConfig.across_centre_seconds)")


class UnitCrossFit:
    """Unit folds of a train part, each with a centre fitted without the fold's units.

    Scores every *score* row (calibration rows at positions out of training) from a model that saw
    neither its unit nor its position, although its unit trains the served model elsewhere, so every
    unit of the survey calibrates. The scores come from the fold models, not the served one
    (cross-conformal): the guarantee is approximate.

    The centres and the shapes fold apart: ``centre_k`` unit folds for the centres (default 20: one unit
    per fold up to 20 units), ``k`` for the shapes.

    ``fit`` stores, after the ``k`` fits of ``make_centre()``:

    * ``train_centres_`` (len(train), n): each train row's centre from its fold's model (the out-of-
      fold residuals the shapes learn from);
    * ``score_centres_`` (len(score), n): each score row's centre from the model of its unit's fold;
      rows of units with no train row stay NaN (score them with the served model);
    * ``folds_``: ``(rest, fold, scored)`` positions into train, train and score: the shapes' folds;
    * ``centre_folds_``: how many unit folds the centres came from (0: the client's own centres)."""

    def __init__(self, k: int = 5, seed: int = 0, centre_k: int = 20):
        self.k = k
        self.seed = seed
        self.centre_k = centre_k

    def fit(self, make_centre, X: np.ndarray, Y: np.ndarray, train: np.ndarray, score: np.ndarray,
            units: np.ndarray, meta: dict | None = None, columns=(), centres: np.ndarray | None = None
            ) -> "UnitCrossFit":
        """Fold the units of ``train`` (row indices into ``X``, ``Y``); with ``meta`` and ``columns``, a
        fold's model also leaves out every train row that shares a value of a column with the fold's
        units (with ``PHONEID,USERID``, the phones of a held-out user). ``centres`` (m, n): the client's
        own estimates, used as every fold's centres (no centre is fitted; the folds serve the shapes)."""
        from models.centres.stack import fold_splits

        train_units, score_units = units[train], units[score]
        n_units = len(np.unique(train_units))
        k = min(self.k, n_units)
        if k < 2:
            raise InputError(f"cross-fitting over units needs at least 2 units in the train part; it holds {k}",
                             field="--calibrate-across", expected="at least 2 train units", received=str(k))
        check_centre_folds(self.centre_k)

        def folds(count):
            for rest, fold in fold_splits(len(train), count, self.seed, train_units):
                held = np.unique(train_units[fold])
                if meta is not None and len(columns) > 1:
                    rest = rest[~sharing(meta, columns, np.isin(units, held))[train[rest]]]
                yield rest, fold, np.flatnonzero(np.isin(score_units, held))

        self.train_centres_ = np.empty((len(train), Y.shape[1]))
        self.score_centres_ = np.full((len(score), Y.shape[1]), np.nan)
        self.centre_folds_ = 0 if centres is not None else min(int(self.centre_k), n_units)
        for rest, fold, scored in folds(max(self.centre_folds_, 2)):
            at = np.concatenate([train[fold], score[scored]])
            if centres is not None:  # the client's own estimates: nothing to fit
                pred = centres[at]
            else:
                pred = make_centre().fit(X[train[rest]], Y[train[rest]]).predict(X[at])
            self.train_centres_[fold], self.score_centres_[scored] = pred[:len(fold)], pred[len(fold):]
        self.folds_ = list(folds(k))
        return self

    def scores(self, make_regressor, X: np.ndarray, Y: np.ndarray, train: np.ndarray, score: np.ndarray,
               units: np.ndarray, on_fold=None) -> np.ndarray:
        """(len(score),) conformity scores of the score rows, each from its fold's centre and a shape
        ``make_regressor()`` (a :class:`models.predictor.SplitConformalRegressor` over a prefit centre)
        fits on the fold's out-of-fold residuals; NaN for the rows of units with no train row.
        ``on_fold(shape, fold, scored)``, when given, sees each fitted fold shape with its fold's positions
        into ``train`` (rows of units that shape never saw: held-out rows for the served-method choice) and
        into ``score`` (the score rows it scored), after scoring them."""
        out = np.full(len(score), np.nan)
        for rest, fold, scored in self.folds_:
            if not len(scored):
                continue
            rows = train[rest]
            shape = make_regressor().fit(X[rows], Y[rows], centers=self.train_centres_[rest],
                                         groups=units[rows]).shape_
            R = Y[score[scored]] - self.score_centres_[scored]
            shape.prepare_calibration(X[score[scored]], R)
            out[scored] = shape.conformity_scores(X[score[scored]], R)
            if on_fold is not None:
                on_fold(shape, fold, scored)
        return out


def conformalize_cross_fit(served, cross_fit: UnitCrossFit, make_regressor, X: np.ndarray, Y: np.ndarray,
                           train: np.ndarray, score: np.ndarray, units: np.ndarray, centres: np.ndarray,
                           rule: str, seed: int, coverage: float, on_fold=None):
    """``served`` (a :class:`models.predictor.SplitConformalRegressor` fitted on the train rows)
    calibrated on the cross-fitted scores of the score rows (:meth:`UnitCrossFit.scores`, which passes
    ``on_fold`` on); rows of a unit with no train row are scored by ``served`` itself at ``centres`` (the
    served centre's, (m, n)), which never saw that unit. Returns the calibrated regressor (``rule`` over
    ``units``)."""
    from models.calibration.conformal import SplitConformalCalibrator
    from models.predictor import SplitConformalRegressor

    s = cross_fit.scores(make_regressor, X, Y, train, score, units, on_fold)
    fold_centres = cross_fit.score_centres_
    R = Y[score] - np.where(np.isnan(fold_centres), centres[score], fold_centres)
    served.shape_.prepare_calibration(X[score], R)  # a copula's marginals; nothing for an ellipsoid
    new = np.isnan(s)
    if new.any():
        s[new] = served.shape_.conformity_scores(X[score[new]], R[new])
    calibrator = SplitConformalCalibrator(rule, seed).fit(s, units[score])
    return SplitConformalRegressor.from_fitted(served.centre_, served.shape_, calibrator, coverage)


def plan_across(dataset, config, split: Split, eta: float) -> tuple[np.ndarray, str, bool]:
    """:func:`training.pipeline.plan` with ``calibrate_across``: ``(each row's unit, the calibration rule,
    whether the calibration is cross-fitted)`` on ``split`` (:func:`across_split`'s or a caller's). The rule
    is ``config.calibration``, the split's, or for a caller's split exact when its calibration units, held out
    of training, attain the level. The cross-fit's settings are checked here, before any fit."""
    from models.calibration.conformal import check_rule

    units = unit_codes(dataset, config.calibrate_across)
    cross = (split.across or {}).get("mode", config.across_mode) == "cross-fit"
    if cross:
        check_centre_folds(config.across_centre_folds)
        check_centre_seconds(config.across_centre_seconds)
    if config.calibration:
        rule = check_rule(config.calibration)
    elif split.across:
        rule = split.across["rule"]
    else:
        exact = not cross and count_units(split.calibration, units) >= groups_needed(eta)
        rule = "group-subsample" if exact else "group-weighted"
    return units, rule, cross


def fold_regressor(config, name: str, fitted, centre, eta: float, rule: str):
    """A new regressor of method ``name`` on the prefit ``centre``, at the configurations its served fit
    ``fitted`` (a fitted shape) chose: LMVE's ``chosen_grid``, no search of its own; a shape without a search
    as configured."""
    from models.predictor import SplitConformalRegressor

    narrowed = getattr(fitted, "chosen_grid", None)
    shape = config.make_shape(name).set_params(**(narrowed() if narrowed is not None else {}))
    return SplitConformalRegressor(shape, centre=centre, coverage=eta, prefit_centre=True, calibration=rule,
                                   random_state=config.seed)
