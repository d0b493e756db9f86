"""Shift protocols: how the guarantee holds at groups held out of the survey.

One split of a protocol holds out whole *units* as the test part (``random``: rows;
``leave-location-out``: surveyed positions; ``leave-phone-out``: PHONEID; ``leave-user-out``:
USERID). Of the rest, whole positions (10 % of its rows) form the *group* calibration part and a
random 10 % of the remaining rows the *row* calibration part; the rest trains one centre. Both
calibrations then serve the same centre and the same test rows:

* ``rows``: the paper's protocol, shapes from the centre's in-sample residuals, calibrated on the
  random rows (which share their positions with training rows);
* ``groups``: the grouped protocol, shapes from group out-of-fold residuals (``cross_fit`` group
  folds), calibrated on the held-out positions with the exact group rule (one score per position);
* ``groups-pooled``: the same shapes and positions with the pooled-CDF rule (every reading, each
  position weighted equally).

* ``across-<COL>`` (leave-phone-out: PHONEID, leave-user-out: USERID; ``lmve-train
  --calibrate-across``, :mod:`training.calibration.across`): of the rest, whole units of the protocol's column
  (10 % of its rows, at least two) at whole positions (20 % of its rows) calibrate, and a centre of
  its own trains on the rows that share neither a unit's value nor a drawn position: the scores
  carry a new unit's shift. Shapes learn from out-of-fold residuals with the folds over units
  (``across-<COL>``) or over positions (``across-<COL>-position-folds``); the rule is exact
  (``group-subsample``) with 9 or more calibration units at 0.9, else ``group-weighted``
  (approximate). This is ``lmve-train --across-mode held-out``.
* ``across-<COL>-cv`` (``lmve-train --calibrate-across``'s default, ``--across-mode cross-fit``):
  every unit of the rest trains at the positions not drawn (80 % of its rows) and is scored at the
  drawn ones by a centre and shapes of its unit fold (``cross_fit`` folds,
  :class:`training.calibration.across.UnitCrossFit`), so all units calibrate, rule ``group-weighted``;
  ``across-<COL>-cv-subsample``: the same scores, one per unit drawn at random (``group-subsample``).

The guarantee of ``groups`` is for a reading at a position not in the survey; it says nothing of
a new phone or a new user, which the other two protocols measure, and ``across-<COL>`` is for.
"""

from __future__ import annotations

import math
import time

import numpy as np

from models.exceptions import InputError

PROTOCOLS = {"random": None, "leave-location-out": "position", "leave-phone-out": "PHONEID",
             "leave-user-out": "USERID"}
#: the protocols that hold out a unit column: what ``--calibrate-across`` is measured on
ACROSS_PROTOCOLS = {"leave-phone-out": "PHONEID", "leave-user-out": "USERID"}
CALIBRATIONS = ("rows", "groups", "groups-pooled", "across")
RULES = {"rows": "rows", "groups": "group-subsample", "groups-pooled": "group-pooled"}


def unit_coverage(inside: np.ndarray, units: np.ndarray) -> float:
    """The mean over the test units of each one's own coverage."""
    _, codes = np.unique(units, return_inverse=True)
    return float(np.mean(np.bincount(codes, weights=inside) / np.bincount(codes)))


def _units(ds, protocol: str) -> np.ndarray | None:
    from training.data.datasets import group_codes_of

    if protocol not in PROTOCOLS:
        raise InputError(f"protocol must be one of {', '.join(PROTOCOLS)}; got {protocol!r}", field="--protocol",
                         expected=" | ".join(PROTOCOLS), received=protocol)
    by = PROTOCOLS[protocol]
    if by is None:
        return None
    if by == "position":
        return group_codes_of({"y0": ds.Y[:, 0], "y1": ds.Y[:, 1]})
    if by not in ds.meta:
        raise InputError(f"protocol {protocol} needs the column {by}, which {ds.name} does not have",
                         field="--protocol", expected=f"a dataset with {by}", received=ds.name)
    return group_codes_of({by: ds.meta[by]})


def take_groups(codes: np.ndarray, rows: np.ndarray, n_rows: int, rng) -> np.ndarray:
    """Whole groups (of ``codes`` over ``rows``), in random order, until at least ``n_rows`` rows."""
    groups = np.unique(codes[rows])
    order = rng.permutation(groups)
    sizes = np.bincount(codes[rows], minlength=codes.max() + 1)[order]
    k = min(int(np.searchsorted(np.cumsum(sizes), n_rows)) + 1, len(order) - 1)
    return rows[np.isin(codes[rows], order[:k])]


def shift_split(ds, protocol: str, seed: int) -> dict[str, np.ndarray]:
    """Row indices of ``test``, ``cal_groups``, ``cal_rows`` and ``train`` for one split."""
    from training.data.datasets import group_codes_of

    rng = np.random.default_rng(seed)
    m = ds.X.shape[0]
    units = _units(ds, protocol)
    everything = np.arange(m)
    if units is None:
        test = rng.choice(m, size=math.ceil(0.1 * m), replace=False)
    else:
        test = take_groups(units, everything, math.ceil(0.1 * m), rng)
    pool = np.setdiff1d(everything, test)
    positions = group_codes_of({"y0": ds.Y[:, 0], "y1": ds.Y[:, 1]})
    cal_groups = take_groups(positions, pool, math.ceil(0.1 * len(pool)), rng)
    rest = np.setdiff1d(pool, cal_groups)
    cal_rows = rng.choice(rest, size=math.ceil(0.1 * len(pool)), replace=False)
    train = np.setdiff1d(rest, cal_rows)
    return {"test": np.sort(test), "cal_groups": np.sort(cal_groups), "cal_rows": np.sort(cal_rows),
            "train": train, "positions": positions, "units": units}


def run_shift_split(ds, protocol: str, seed: int, methods: tuple[str, ...], coverage: float = 0.9,
                    centre: str = "scaled", cross_fit: int = 5, method_params: dict | None = None,
                    rssi: str = "off") -> dict:
    """Fit one centre and both calibrations' shapes on one split; per calibration and method: test
    coverage, coverage per test unit, and volumes; and the centre's test errors. ``rssi="auto"``
    runs the RSSI "not detected" step (fitted on the train part) before the scaler."""
    from sklearn.preprocessing import StandardScaler

    from models import registry
    from models.predictor import SplitConformalRegressor
    from training.pipeline import TrainConfig, centre_errors, fit_preprocess, out_of_fold_centers

    t0 = time.perf_counter()
    parts = shift_split(ds, protocol, seed)
    train, test = parts["train"], parts["test"]
    config = TrainConfig(coverage=coverage, seed=seed, methods=methods, centre=centre,
                         method_params=method_params or {}, rssi=rssi)
    X = ds.X
    step = fit_preprocess(X[train], config)
    if step is not None:
        X = step.transform(X)
    scaler = StandardScaler().fit(X[train])
    Xs, Y = scaler.transform(X), ds.Y
    fitted = config.make_centre().fit(Xs[train], Y[train])
    centers = fitted.predict(Xs)
    timings = {"centre": time.perf_counter() - t0}
    t1 = time.perf_counter()
    oof = out_of_fold_centers(Xs[train], Y[train], config, cross_fit, parts["positions"][train])
    timings["cross_fit"] = time.perf_counter() - t1
    test_units = parts["units"][test] if parts["units"] is not None else parts["positions"][test]
    out = {}
    _, test_codes = np.unique(test_units, return_inverse=True)
    for name in methods:
        shapes = {}
        for calibration, rule in RULES.items():
            grouped = calibration != "rows"
            cal = parts["cal_groups"] if grouped else parts["cal_rows"]
            t1 = time.perf_counter()
            reg = SplitConformalRegressor(config.make_shape(name), centre=fitted, coverage=coverage,
                                          prefit_centre=True, calibration=rule, random_state=seed)
            if grouped and "groups" in shapes:  # the pooled rule reuses the grouped protocol's shape
                reg.centre_, reg.shape_ = fitted, shapes["groups"]
            else:  # an interpolating centre (kNN) has zero in-sample residuals: out-of-fold ones then
                in_sample = oof if registry.centre(centre).interpolates else centers[train]
                reg.fit(Xs[train], Y[train], centers=oof if grouped else in_sample,
                        groups=parts["positions"][train] if grouped else None)
                shapes[calibration] = reg.shape_
            reg.conformalize(Xs[cal], Y[cal], centers=centers[cal], groups=parts["positions"][cal] if grouped else None)
            out[f"{calibration}/{name}"] = _test_figures(reg, Xs[test], Y[test], centers[test], test_codes, t1)
    across = None
    if PROTOCOLS[protocol] not in (None, "position"):
        t1 = time.perf_counter()
        across = _run_across(ds, parts, PROTOCOLS[protocol], seed, methods, config, coverage, cross_fit,
                             test_codes, out)
        timings["across"] = time.perf_counter() - t1
    return {"protocol": protocol, "seed": seed, "results": out, "timings": timings,
            "wall_seconds": time.perf_counter() - t0, "centre": centre, "rssi": None if step is None else step.describe(),
            "centre_test": centre_errors(Y[test], centers[test]),
            "rows": {k: int(len(v)) for k, v in parts.items() if k in ("train", "test", "cal_rows", "cal_groups")},
            **({} if across is None else {"across": across})}


def _test_figures(reg, X, Y, centers, test_codes, t0: float) -> dict:
    """One calibrated method on the test rows: coverage (pooled and per test unit) and volume."""
    region = reg._regions(X, None, centers)
    inside = region.contains(Y)
    per_unit = np.bincount(test_codes, weights=inside) / np.bincount(test_codes)
    return {"coverage": float(inside.mean()), "unit_coverage_mean": float(per_unit.mean()),
            "share_units_below_80": float(np.mean(per_unit < 0.8)), "n_units": int(per_unit.size),
            "volume_paper": float(region.volume("paper").mean()), "alpha_q": float(reg.alpha_q_),
            "n_calibration": int(reg.calibrator_.n_calibration_), "fit_seconds": time.perf_counter() - t0}


def _run_across(ds, parts, column: str, seed: int, methods, config, coverage: float, cross_fit: int,
                test_codes: np.ndarray, out: dict) -> dict:
    """The ``across-<column>`` calibrations of one split, into ``out``; returns the rows and units of each part."""
    from sklearn.preprocessing import StandardScaler

    from models.predictor import SplitConformalRegressor
    from training.calibration.across import MIN_CALIBRATION_UNITS, held_groups, sharing
    from training.pipeline import fit_preprocess, groups_needed, out_of_fold_centers

    rng = np.random.default_rng([seed, 1])
    m = ds.X.shape[0]
    pool = np.setdiff1d(np.arange(m), parts["test"])
    units = parts["units"]
    order = rng.permutation(np.unique(units[pool]))
    sizes = np.bincount(units[pool], minlength=units.max() + 1)[order]
    k = int(np.clip(np.searchsorted(np.cumsum(sizes), math.ceil(0.1 * len(pool))) + 1, MIN_CALIBRATION_UNITS,
                    len(order) - 2))
    in_pool = np.zeros(m, dtype=bool)
    in_pool[pool] = True
    cal_unit = in_pool & np.isin(units, order[:k])
    at_held = np.zeros(m, dtype=bool)
    at_held[pool] = held_groups(parts["positions"][pool], 0.2, rng)
    cal = np.flatnonzero(cal_unit & at_held)
    train = np.flatnonzero(in_pool & ~sharing(ds.meta, [column], cal_unit) & ~at_held)
    X = ds.X
    step = fit_preprocess(X[train], config)
    if step is not None:
        X = step.transform(X)
    Xs = StandardScaler().fit(X[train]).transform(X)
    Y, test = ds.Y, parts["test"]
    fitted = config.make_centre().fit(Xs[train], Y[train])
    centers = fitted.predict(Xs)
    n_cal_units = len(np.unique(units[cal]))
    rule = "group-subsample" if n_cal_units >= groups_needed(coverage) else "group-weighted"
    for suffix, folds in (("", units), ("-position-folds", parts["positions"])):
        oof = out_of_fold_centers(Xs[train], Y[train], config, cross_fit, folds[train])
        label = f"across-{column}{suffix}"
        for name in methods:
            t1 = time.perf_counter()
            reg = SplitConformalRegressor(config.make_shape(name), centre=fitted, coverage=coverage,
                                          prefit_centre=True, calibration=rule, random_state=seed)
            reg.fit(Xs[train], Y[train], centers=oof, groups=folds[train])
            reg.conformalize(Xs[cal], Y[cal], centers=centers[cal], groups=units[cal])
            out[f"{label}/{name}"] = {**_test_figures(reg, Xs[test], Y[test], centers[test], test_codes, t1),
                                       "rule": rule}
    cv = _run_across_cv(ds, parts, column, seed, methods, config, coverage, cross_fit, test_codes, out)
    return {"rows": {"train": len(train), "calibration": len(cal)}, "calibration_units": n_cal_units, "rule": rule,
            "cv": cv}


def _run_across_cv(ds, parts, column: str, seed: int, methods, config, coverage: float, cross_fit: int,
                   test_codes: np.ndarray, out: dict) -> dict:
    """``across-<column>-cv`` (rule group-weighted) and ``-cv-subsample`` (group-subsample): every unit
    of the rest trains at the positions not drawn (80 % of its rows) and is scored at the drawn ones by
    a model of its unit fold (:class:`training.calibration.across.UnitCrossFit`), so all of them calibrate."""
    from sklearn.preprocessing import StandardScaler

    from models.predictor import SplitConformalRegressor
    from training.calibration.across import UnitCrossFit, conformalize_cross_fit, held_groups
    from training.pipeline import fit_preprocess

    rng = np.random.default_rng([seed, 2])
    m = ds.X.shape[0]
    pool = np.setdiff1d(np.arange(m), parts["test"])
    at_held = held_groups(parts["positions"][pool], 0.2, rng)
    score, train = pool[at_held], pool[~at_held]
    X = ds.X
    step = fit_preprocess(X[train], config)
    if step is not None:
        X = step.transform(X)
    Xs = StandardScaler().fit(X[train]).transform(X)
    Y, test, units = ds.Y, parts["test"], parts["units"]
    t0 = time.perf_counter()
    fitted = config.make_centre().fit(Xs[train], Y[train])
    cf = UnitCrossFit(cross_fit, seed, centre_k=cross_fit).fit(config.make_centre, Xs, Y, train, score, units)
    centre_seconds = time.perf_counter() - t0
    centers = fitted.predict(Xs)
    for name in methods:
        t1 = time.perf_counter()
        for suffix, rule in (("-cv", "group-weighted"), ("-cv-subsample", "group-subsample")):
            def regressor():
                return SplitConformalRegressor(config.make_shape(name), centre=fitted, coverage=coverage,
                                               prefit_centre=True, calibration=rule, random_state=seed)

            served = regressor().fit(Xs[train], Y[train], centers=cf.train_centres_, groups=units[train])
            reg = conformalize_cross_fit(served, cf, regressor, Xs, Y, train, score, units, centers, rule, seed,
                                         coverage)
            out[f"across-{column}{suffix}/{name}"] = {
                **_test_figures(reg, Xs[test], Y[test], centers[test], test_codes, t1), "rule": rule}
    return {"rows": {"train": len(train), "calibration": len(score)},
            "calibration_units": len(np.unique(units[score])), "centre_seconds": centre_seconds}


SHIFT_COLUMNS = ["dataset", "protocol", "calibration", "method", "n_splits", "coverage_mean", "coverage_std",
                 "volume_mean", "volume_std"]


def shift_tables(records: list[dict], calibrations: list[str], command: str, wall: float):
    """``shift.csv`` (one row per dataset, protocol, calibration and method; volumes in m^2 for
    indoor_localization) and a markdown summary with the paired LMVE ratios."""
    import pandas as pd

    rows = []
    for r in records:
        factor = 1e6 if r["task"]["dataset"] == "indoor_localization" else 1.0  # km^2 -> m^2
        for key, m in r["results"].items():
            calibration, method = key.split("/")
            if calibration in calibrations or (calibration.startswith("across-") and "across" in calibrations):
                rows.append({"dataset": r["task"]["dataset"], "protocol": r["protocol"], "seed": r["seed"],
                             "calibration": calibration, "method": method, "coverage": m["coverage"],
                             "unit_coverage": m["unit_coverage_mean"], "below_80": m["share_units_below_80"],
                             "volume": m["volume_paper"] * factor, "n_calibration": m["n_calibration"],
                             "wall_seconds": r["wall_seconds"]})
    runs = pd.DataFrame(rows)
    g = runs.groupby(["dataset", "protocol", "calibration", "method"], sort=False)
    table = g.agg(n_splits=("seed", "nunique"), coverage_mean=("coverage", "mean"),
                  coverage_std=("coverage", "std"), volume_mean=("volume", "mean"), volume_std=("volume", "std"),
                  below_80_mean=("below_80", "mean"), n_calibration_mean=("n_calibration", "mean")).reset_index()
    lines = ["## Coverage at held-out groups: shift protocols", "",
             f"Command: `{command}`; this invocation's wall time {wall:.0f} s (cached splits are not re-run). "
             "Coverage over the held-out test rows (mean and std over splits), the share of held-out units "
             "(positions, phones, users; positions for `random`) whose own coverage is below 80 %, and the mean "
             "det(C)^1/2 (m^2 for indoor_localization). `rows`: calibrated on random rows (the paper); `groups`: "
             "on held-out positions, one score per position (exact rule), shapes from group out-of-fold residuals.",
             "", "| dataset | protocol | calibration | method | splits | coverage % | std | units < 80 % | volume "
             "| calibration m |", "|---|---|---|---|---|---|---|---|---|---|"]
    for _, t in table.iterrows():
        lines.append(f"| {t.dataset} | {t.protocol} | {t.calibration} | {t.method} | {t.n_splits} | "
                     f"{100 * t.coverage_mean:.1f} | {100 * (t.coverage_std if t.coverage_std == t.coverage_std else 0):.1f} "
                     f"| {100 * t.below_80_mean:.0f} % | {t.volume_mean:.4g} | {t.n_calibration_mean:.0f} |")
    paired = []
    for (d, p, c), sub in runs.groupby(["dataset", "protocol", "calibration"], sort=False):
        wide = sub.pivot_table(index="seed", columns="method", values="volume")
        if "lmve" in wide:
            for other in (x for x in ("ge", "nle") if x in wide):
                both = wide[["lmve", other]].dropna()
                if len(both):
                    ratio = (both["lmve"] / both[other])
                    paired.append(f"- {d}, {p}, {c}: LMVE / {other.upper()} volume, paired over {len(both)} splits: "
                                  f"mean {ratio.mean():.3f} (range {ratio.min():.3f}-{ratio.max():.3f})")
    if paired:
        lines += ["", "Paired ratios (same splits):", *paired]
    return table[SHIFT_COLUMNS], "\n".join(lines) + "\n"
