"""``--primary``: which method the plain routes serve, chosen on rows the calibration does not use.

``auto`` serves the ellipsoid method of smallest **expected calibrated volume** on held-out rows: the
train part cross-fitted (``folds`` >= 2; each fold scored by the method fitted on the other folds, whole
groups per fold with groups) pooled with the test part (or ``Split.selection``). The figure is the mean
volume of a method's regions at ``E[alpha_q]``, the threshold a calibration part of this split's size
``m`` drawn from the held-out scores gives in expectation; for the ``rows`` rule, exactly
``P(alpha_q <= s_(j)) = P(Binomial(m, W_j) >= k)``, ``k = ceil((m + 1) eta)``; the group rules likewise
over groups. An ellipsoid's volume at threshold ``q`` is ``q^(n/2)`` times its volume at 1.

The cross-fit stops early (:func:`leader_excess`) once, over ``RESAMPLES`` resamples of the held-out units,
the ``CONFIDENCE`` quantile of the leader's excess volume over the smallest is within ``tolerance``.

Nothing the choice reads depends on a calibration row (only the calibration part's size), so the served
method's split-conformal guarantee stays exact. Box methods (Copula) are never served by the plain routes,
never ranked. ``docs/concepts/training.md`` gives the reasoning."""

from __future__ import annotations

import numpy as np

from models import registry
from models.exceptions import InputError
from models.parallel import side_by_side

#: what ``--primary`` accepts besides a method name
AUTO = "auto"
#: resamples of the held-out units behind the decision to stop the cross-fit (:func:`leader_excess`)
RESAMPLES = 200
#: ... and the quantile of the leader's excess in them that must stay within the tolerance
CONFIDENCE = 0.95
#: fewer held-out units than this settle nothing (a resample of 1 unit is that unit again)
MIN_UNITS = 10


def check_primary(primary: str, methods) -> str:
    """``primary`` if it is ``"auto"`` or an ellipsoid method among ``methods``; else an :class:`InputError`."""
    allowed = [m for m in methods if registry.METHODS[m].kind == "ellipsoid"]
    if primary != AUTO and primary not in allowed:
        raise InputError(f"primary must be auto or an ellipsoid method being trained ({', '.join(allowed)}); got "
                         f"{primary!r}", field="primary", expected=" | ".join([AUTO, *allowed]), received=str(primary))
    return primary


def check_folds(folds) -> int:
    """``folds`` if it is 0 (the test part alone) or an int >= 2; else an :class:`InputError`."""
    if isinstance(folds, bool) or not isinstance(folds, (int, np.integer)) or folds < 0 or folds == 1:
        raise InputError(f"primary_folds must be 0 (choose on the test part alone) or a fold count >= 2; got "
                         f"{folds!r}", field="primary_folds", expected="0 or an integer >= 2", received=repr(folds))
    return int(folds)


def check_tolerance(tolerance) -> float | None:
    """``tolerance`` if it is ``None`` (every fold) or a share in ``[0, 1)``; else an :class:`InputError`."""
    if tolerance is None:
        return None
    if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float, np.integer, np.floating)) \
            or not 0.0 <= float(tolerance) < 1.0:
        raise InputError(f"primary_tolerance must be a share in [0, 1) (0.02: the leader within 2 % of the best) or "
                         f"off; got {tolerance!r}", field="primary_tolerance", expected="a number in [0, 1) or off",
                         received=repr(tolerance))
    return float(tolerance)


def unit_figures(shape, X: np.ndarray, R: np.ndarray, eta: float) -> tuple[np.ndarray, np.ndarray]:
    """``(scores, unit volumes)`` (N,) of standardised rows ``X`` with residuals ``R`` under a fitted
    ellipsoid ``shape``: the conformity scores (``+inf`` where not finite) and the volume of each row's
    region at threshold 1."""
    s = np.asarray(shape.conformity_scores(X, R), dtype=np.float64)
    v = shape.region(X, np.zeros_like(R), 1.0, eta).volume("lebesgue")
    return np.where(np.isfinite(s), s, np.inf), np.asarray(v, dtype=np.float64)


def expected_threshold(scores: np.ndarray, eta: float, m: int, rule: str = "rows", groups=None) -> float:
    """``E[alpha_q]``: the threshold a calibration part of ``m`` rows (``rule="rows"``) or ``m`` groups
    would give at level ``eta``, in expectation over such parts drawn from held-out ``scores`` (N,)
    (``groups`` (N,) or (N, g) labels their groups for the group rules). ``inf`` when the level needs
    more than ``m`` units or when the draw can meet an infinite score."""
    from scipy.stats import binom

    from models.calibration.conformal import conformal_rank

    s = np.asarray(scores, dtype=np.float64)
    if rule == "rows" or groups is None:
        w = np.full(s.size, 1.0 / s.size)
    else:
        _, codes = np.unique(np.asarray(groups), axis=0, return_inverse=True)
        codes = codes.reshape(-1)
        sizes = np.bincount(codes)
        w = 1.0 / (sizes.size * sizes[codes])
    order = np.argsort(s, kind="stable")
    s, W = s[order], np.minimum(np.cumsum(w[order]), 1.0)
    if rule in ("group-pooled", "group-weighted"):
        target = eta * (m + 1) / m if rule == "group-pooled" else eta
        if target > 1.0 + 1e-9:
            return np.inf
        return float(s[min(int(np.searchsorted(W, target - 1e-9)), s.size - 1)])
    k = conformal_rank(m, eta)
    if k > m:
        return np.inf
    F = binom.sf(k - 1, m, W)  # P(alpha_q <= s_(j))
    F[-1] = 1.0
    mass = np.diff(F, prepend=0.0)
    if not np.isfinite(s).all() and mass[~np.isfinite(s)].sum() > 0:
        return np.inf
    finite = np.isfinite(s)
    return float(np.sum(s[finite] * mass[finite]))


def pooled_figures(scores: np.ndarray, unit_volumes: np.ndarray, eta: float, n_targets: int,
                   calibration: tuple[str, int] | None = None, groups=None) -> dict:
    """Held-out figures of one method from its rows' ``scores`` and ``unit_volumes`` (N,): ``quantile``
    (the rows' empirical ``eta``-quantile, an order statistic) and ``quantile_volume`` (the mean volume
    at it), and with ``calibration=(rule, m)`` ``threshold`` (:func:`expected_threshold`) and ``volume``
    (the mean volume at it, what :func:`choose` ranks; without, the ``quantile`` ones)."""
    def at(q):
        return float(q ** (n_targets / 2) * np.mean(unit_volumes)) if np.isfinite(q) else np.inf

    q = float(np.quantile(scores, eta, method="higher"))
    out = {"quantile": q, "quantile_volume": at(q)}
    t = q if calibration is None else expected_threshold(scores, eta, calibration[1], calibration[0], groups)
    out.update(threshold=t, volume=at(t))
    return out


def leader_excess(figures: dict[str, tuple[np.ndarray, np.ndarray]], eta: float, n_targets: int,
                  calibration: tuple[str, int] | None = None, groups=None, seed: int = 0,
                  resamples: int = RESAMPLES, confidence: float = CONFIDENCE, min_units: int = MIN_UNITS) -> dict:
    """How much larger than the smallest the leader's volume can be, judged on the held-out rows.

    ``figures``: per method, ``(scores, unit volumes)`` (N,) of the same held-out rows; the leader is
    the method of smallest :func:`pooled_figures` ``volume`` on them (ties: the given order). The
    units (the rows' ``groups``, (N,) or (N, g), else the rows) are drawn with replacement
    ``resamples`` times (``numpy.random.default_rng(seed)``; a group drawn twice counts as two); in
    each, every method's volume is recomputed and the leader's excess ``V_leader / min V - 1`` taken
    (``inf`` where the leader's volume is unbounded). Returns ``leader``, ``excess`` (the excesses'
    ``confidence`` quantile; ``inf`` with fewer than ``min_units`` units, whose resamples cannot show
    how the ranking varies), ``wins`` (the share of resamples where the leader is smallest),
    ``resamples``, ``confidence``, ``units`` and ``rows``."""
    names = list(figures)
    n_rows = len(next(iter(figures.values()))[0])
    volume = {m: _finite(pooled_figures(s, v, eta, n_targets, calibration, groups)["volume"])
              for m, (s, v) in figures.items()}
    leader = min(names, key=lambda m: (volume[m], names.index(m)))
    if groups is None:
        members = [np.array([i]) for i in range(n_rows)]
    else:
        from models.calibration.conformal import group_codes

        codes = group_codes(groups, n_rows)
        order = np.argsort(codes, kind="stable")
        members = np.split(order, np.cumsum(np.bincount(codes))[:-1])
    rng = np.random.default_rng(seed)
    excess, wins = np.empty(resamples), 0
    for b in range(resamples):
        drawn = rng.integers(0, len(members), len(members))
        rows = np.concatenate([members[u] for u in drawn])
        labels = None if groups is None else np.repeat(np.arange(len(drawn)), [len(members[u]) for u in drawn])
        v = {m: _finite(pooled_figures(s[rows], u[rows], eta, n_targets, calibration, labels)["volume"])
             for m, (s, u) in figures.items()}
        best = min(v.values())
        excess[b] = np.inf if not np.isfinite(v[leader]) else v[leader] / best - 1.0
        wins += v[leader] == best
    q = float(np.quantile(excess, confidence, method="higher")) if len(members) >= min_units else np.inf
    return {"leader": leader, "excess": q,
            "wins": wins / resamples, "resamples": int(resamples), "confidence": float(confidence),
            "units": len(members), "rows": int(n_rows)}


def cross_fit_figures(make_regressor, names, X: np.ndarray, Y: np.ndarray, centers: np.ndarray, folds: int,
                      seed: int, eta: float, groups=None, bar=None, stop=None, unsettled=None,
                      workers: int | None = None) -> tuple[dict, np.ndarray]:
    """Per ellipsoid method in ``names``: ``(scores, unit volumes)`` of train rows ``X`` (m, d), ``Y``
    (m, n) (residuals about ``centers``), each from the method fitted on the other folds
    (``make_regressor(name)``: an unfitted regressor with a prefit centre); ``bar`` (a tqdm bar) counts the fits.

    ``stop(figures, rows, folds)``, called before each fold after the first with what is done so far (the
    figures, their rows, how many folds made them), ends the cross-fit when it returns true.
    ``unsettled(rows)`` says whether ``stop`` cannot yet decide on these rows (too few units,
    :data:`MIN_UNITS`): the leading folds that run whatever ``stop`` says (every fold
    without ``stop``) are fitted concurrently (:func:`models.parallel.side_by_side`), the rest one by one. Returns
    ``(figures, rows)``: the figures of the rows whose folds ran, and those rows' indices into ``X`` (the
    folds' rows in fold order); the same figures whichever way the folds ran."""
    from models.centres.stack import fold_splits

    splits = fold_splits(len(X), folds, seed, groups)
    g = None if groups is None else np.asarray(groups)

    def one(i: int) -> dict:
        rest, fold = splits[i]
        out = {}
        for name in names:
            if bar is not None:
                bar.set_postfix_str(f"fold {i + 1}/{len(splits)} {name}")
            reg = make_regressor(name).fit(X[rest], Y[rest], centers=centers[rest],
                                           groups=None if g is None else g[rest])
            out[name] = unit_figures(reg.shape_, X[fold], Y[fold] - centers[fold], eta)
            if bar is not None:
                bar.update()
        return out

    lead = len(splits)  # folds that run whatever stop says
    if stop is not None:
        lead = 1
        while lead < len(splits) and unsettled is not None and unsettled(
                np.concatenate([f for _, f in splits[:lead]])):
            lead += 1
    results = side_by_side(one, range(lead), workers)
    for i in range(lead, len(splits)):
        if stop(*_pooled(names, results, splits), len(results)):
            break
        results.append(one(i))
    return _pooled(names, results, splits)


def _pooled(names, results: list[dict], splits) -> tuple[dict, np.ndarray]:
    """The figures of the folds in ``results`` (the first ``len(results)`` of ``splits``), and their rows."""
    figures = {name: (np.concatenate([r[name][0] for r in results]), np.concatenate([r[name][1] for r in results]))
               for name in names}
    return figures, np.concatenate([splits[i][1] for i in range(len(results))])


def ellipsoid_figures(model, X_raw: np.ndarray, Y: np.ndarray, centers=None) -> dict:
    """Per ellipsoid method of ``model``: :func:`unit_figures` of held-out rows ``X_raw``, ``Y`` about
    the model's centres."""
    X = model.standardise(X_raw)
    R = Y - model.predict_center(X_raw, centers)
    return {name: unit_figures(reg.shape_, X, R, model.coverage) for name, reg in model.methods.items()
            if registry.METHODS[name].kind == "ellipsoid"}


def held_out_figures(model, X_raw: np.ndarray, Y: np.ndarray, eta: float, centers=None,
                     cross_fit: dict | None = None, calibration: tuple[str, int] | None = None,
                     groups=None) -> dict:
    """Per method of ``model``, on held-out rows ``X_raw`` (k, d), ``Y`` (k, n) pooled with the
    ``cross_fit`` rows (:func:`cross_fit_figures`) for the ellipsoid methods, :func:`pooled_figures`
    (``calibration=(rule, m)``: the calibration part's rule and size; ``groups``: the pooled rows'
    groups, the cross-fit rows' first; ``volume`` and ``threshold`` are ``None`` for boxes), and the
    calibrated regions' ``coverage`` and ``volume_calibrated`` on ``X_raw`` (report only)."""
    X = model.standardise(X_raw)
    mu = model.predict_center(X_raw, centers)
    scores = model.score_points(X_raw, Y, centers)
    units = ellipsoid_figures(model, X_raw, Y, centers)
    n = Y.shape[1]
    out = {}
    for name, reg in model.methods.items():
        figures = {"coverage": float(np.mean(scores[name] <= reg.alpha_q_)),
                   "volume_calibrated": float(np.mean(reg.shape_.region(X, mu, reg.alpha_q_, eta).volume("lebesgue")))}
        if name in units:
            s, v = units[name]
            if cross_fit and name in cross_fit:
                s, v = np.concatenate([cross_fit[name][0], s]), np.concatenate([cross_fit[name][1], v])
            figures.update(pooled_figures(s, v, eta, n, calibration, groups))
        else:
            figures.update(volume=None, threshold=None)
        out[name] = figures
    return out


def choose(model, X_raw: np.ndarray, Y: np.ndarray, eta: float, primary: str = AUTO, centers=None,
           rows: str = "test part", cross_fit: dict | None = None, folds: int = 0, skipped: str | None = None,
           calibration: tuple[str, int] | None = None, groups=None, folds_run: int | None = None,
           evidence: dict | None = None, n_train: int | None = None, how: str | None = None) -> dict:
    """The ``selection`` record of ``model`` (see :attr:`models.model.RegionModel.selection`):
    ``order``, the ellipsoid methods by held-out volume (ties: the registry's order), with a forced
    ``primary`` first; ``primary``; ``rule`` (``"auto"`` or ``"forced"``); ``rows`` and ``n_rows``
    (what the figures were measured on: ``rows`` of ``X_raw``, plus the ``cross_fit`` train rows of
    ``folds_run`` (default all) of the ``folds`` folds of a train part of ``n_train`` rows);
    ``criterion`` in words; ``held_out`` (:func:`held_out_figures`); ``skipped``, when given, why the
    cross-fit did not run or stopped (the record's ``cross_fit_skipped``); ``evidence``, when given,
    the last :func:`leader_excess` read, with the ``tolerance`` it was held to; ``how``, when given,
    whose folds the cross-fit's are (the record's ``cross_fit_by``)."""
    figures = held_out_figures(model, X_raw, Y, eta, centers, cross_fit, calibration, groups)
    fallback = registry.fallback_order()
    ellipsoids = [m for m in fallback if m in model.methods]
    if not ellipsoids:
        raise InputError(f"the model has no ellipsoid method to serve; it has {sorted(model.methods)}")
    ranked = sorted(ellipsoids, key=lambda m: (_finite(figures[m]["volume"]), fallback.index(m)))
    if primary != AUTO:
        ranked = [primary, *[m for m in ranked if m != primary]]
    n_scored = len(next(iter(cross_fit.values()))[0]) if cross_fit else 0
    n_train = n_train or n_scored
    folds_run = folds if folds_run is None else folds_run
    if not n_scored:
        where = rows
    elif folds_run >= folds and n_scored < n_train:  # folds of units that calibrate nothing have no fit
        where = f"{folds}-fold cross-fit of the train part ({n_scored} of {n_train} rows) and the {rows}"
    elif folds_run >= folds:
        where = f"{folds}-fold cross-fit of the train part ({n_train} rows) and the {rows}"
    else:
        where = (f"{folds_run} of the {folds} folds of a cross-fit of the train part ({n_scored} of {n_train} rows) "
                 f"and the {rows}")
    record = {"rule": "auto" if primary == AUTO else "forced", "primary": ranked[0], "order": ranked,
              "rows": where, "n_rows": int(len(Y) + n_scored), "folds": int(folds) if n_scored else 0,
              "folds_run": int(folds_run) if n_scored else 0, "criterion": _criterion(eta, calibration),
              "held_out": {m: {k: _json(v) for k, v in f.items()} for m, f in figures.items()}}
    if skipped:
        record["cross_fit_skipped"] = skipped
    if how and n_scored:
        record["cross_fit_by"] = how
    if evidence:  # ``checks``: each read of the evidence before it (after how many folds, on how many rows)
        record["evidence"] = {k: _json(v) if isinstance(v, float) else v for k, v in evidence.items()}
    return record


def stop_reason(evidence: dict, tolerance: float, where: str) -> str:
    """Why the cross-fit stopped, in words, from a :func:`leader_excess` record."""
    return (f"{where}: on {evidence['rows']} held-out rows ({evidence['units']} units resampled "
            f"{evidence['resamples']} times) {registry.METHODS[evidence['leader']].label}'s expected volume was "
            f"within {100 * evidence['excess']:.1f} % of the smallest with {100 * evidence['confidence']:.0f} % "
            f"confidence (tolerance {100 * tolerance:g} %; smallest in {100 * evidence['wins']:.0f} % of resamples)")


def _criterion(eta: float, calibration) -> str:
    if calibration is None:
        return f"mean volume at the {eta:g}-quantile of the held-out rows' own scores (no calibration row is read)"
    rule, m = calibration
    unit = "rows" if rule == "rows" else "groups"
    return (f"expected calibrated volume: the mean volume at the threshold a calibration part of {m} {unit} "
            f"({rule}) would give at {eta:g}, in expectation over such parts drawn from the held-out rows (no "
            "calibration row is read)")


def _finite(v) -> float:
    return v if v is not None and np.isfinite(v) else np.inf


def _json(v):
    return float(v) if v is not None and np.isfinite(v) else None


def selection_line(selection: dict) -> str:
    """``NLE (auto: smallest held-out volume on 1600 rows of the 3-fold cross-fit ...: NLE 119, GE 130, LMVE 156)``."""
    if not selection:
        return "not recorded (the registry's order: LMVE, then NLE, then GE)"
    held = selection.get("held_out", {})
    figures = ", ".join(f"{registry.METHODS[m].label} {_fmt(held.get(m, {}).get('volume'))}"
                        for m in selection["order"])
    why = "auto: smallest held-out volume" if selection["rule"] == "auto" else "forced by --primary; held-out volume"
    skipped = f"; {selection['cross_fit_skipped']}" if selection.get("cross_fit_skipped") else ""
    skipped += f"; the cross-fit by {selection['cross_fit_by']}" if selection.get("cross_fit_by") else ""
    return (f"{registry.METHODS[selection['primary']].label} ({why} on {selection['n_rows']} rows, the "
            f"{selection['rows']}: {figures}); fallbacks in that order{skipped}")


def _fmt(v) -> str:
    return "unbounded" if v is None else f"{v:.4g}"
