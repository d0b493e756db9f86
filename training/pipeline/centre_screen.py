"""The cheap rungs of ``centre="auto"`` (:mod:`training.pipeline.centre_selection`): the screen on a few rows of
one fold (:func:`screen`) or of every unit fold (:func:`screen_folds`), the projection of a candidate onto the unit
folds it has not run (:func:`cannot_win`), the recall of a dropped candidate that beat the chosen one where it was
scored (:func:`recall`), and the errors every rung compares (:func:`centre_errors`)."""

from __future__ import annotations

import time

import numpy as np

from models.centres.errors import criterion as unit_criterion
from models.centres.errors import unit_codes
from models.centres.kinds import KINDS
from models.parallel import side_by_side

#: TrainConfig.centre_criterion -> its words in the manifest and the report
CRITERIA = {"rmse": "RMSE", "quantile": "quantile at the coverage level"}

#: below the screen size the race judges from this fold on, whatever the rows of the first, and over unit folds
#: the screen too: one fold of a few groups is one draw of their spread. Visits (28 subjects, 3-4 a fold),
#: seed 2: after fold 1 ``paper`` was 12 % behind ``hgb`` (4.30 against 3.83) and dropped; after fold 2 it was
#: 7 % behind, and after five 5 % ahead (2.88 against 3.05); ``hgb``'s regions then held 36 % of the test
#: subjects' rows, paper's 83 %
RACE_FOLDS = 2


def screen(X, Y, config, first_fold, records, alive, say, workers=None):
    """Rung 1: every candidate fitted on ``centre_screen_rows`` rows of fold 1's training rows (drawn by
    ``numpy.random.default_rng(seed).choice``, sorted; a lazy learner, :attr:`models.centres.kinds.CentreSpec.lazy`,
    on all of them), scored on its held-out rows (each record's ``screen``); those more than
    ``centre_screen_margin`` behind the best are dropped.
    Returns the survivors, and the fold-1 predictions of those the screen fitted on all the training rows."""
    rest, fold = first_fold
    sub = _subsample(rest, config.centre_screen_rows, np.random.default_rng(config.seed))
    rows = {name: rest if lazy(name, config) else sub for name in alive}
    key, level = config.centre_criterion, config.coverage
    preds, errors = {}, {}
    say(f"screen {', '.join(alive)} on {len(sub)} rows")
    fitted = side_by_side(lambda name: fit_predict(config, name, X[rows[name]], Y[rows[name]], X[fold]), alive, workers)
    for name, (pred, seconds) in zip(alive, fitted):
        preds[name] = pred
        records[name]["seconds"] += seconds
        errors[name] = centre_errors(Y[fold], preds[name], level)
        records[name]["screen"] = {key: errors[name][key], "rows": len(rows[name])}
        records[name]["screen_errors"] = errors[name]  # popped before the records leave select_centre
    best, behind = trailing({n: e[key] for n, e in errors.items()}, config.centre_screen_margin)
    for name, excess in behind.items():
        n = len(rows[name])
        records[name].update(errors[name], rows=n, folds=1, stage="screen", status="dropped", scored_folds=[1],
                             reason=f"on the screen ({n} of fold 1's {len(rest)} training rows, scored on its "
                                    f"{len(fold)} held-out rows) its {CRITERIA[key]} {errors[name][key]:.4g} was "
                                    f"{100 * excess:.0f} % above {best}'s {errors[best][key]:.4g} (screen margin "
                                    f"{100 * config.centre_screen_margin:.0f} %)")
    survivors = [n for n in alive if n not in behind]
    return survivors, {n: preds[n] for n in survivors if len(rows[n]) == len(rest)}


def screen_folds(X, Y, config, folds, records, alive, say, workers=None, units=None):
    """Rung 1 over unit folds (``select_centre(units=True)``): every candidate fitted on
    ``centre_screen_rows`` rows of *each* fold's training rows (drawn by one
    ``numpy.random.default_rng(seed)``, sorted; all of them where a fold has fewer, and for a lazy learner,
    :attr:`models.centres.kinds.CentreSpec.lazy`) and scored on its held-out rows, fold after fold. From fold
    :data:`RACE_FOLDS` on, the dear candidates (not lazy) more than ``centre_screen_margin`` behind the best on
    all the held-out rows screened so far are dropped (a dear candidate far behind on two folds is not fitted on
    the rest); a lazy one, whose screen is its all-row fit, only after every fold (one fold is one draw of units).
    Each record's ``screen`` holds the error, the rows per fit, the folds and each fold's own error (their
    spread); with ``units`` (each row's unit) each unit weighs the same (:func:`centre_errors`). Returns the
    survivors, their screen centres of every row, and for each fold (index into ``folds``) the candidates whose
    screen fitted its training rows whole (their centres are the fold's own)."""
    k = len(folds)
    rng = np.random.default_rng(config.seed)
    preds = {name: np.full_like(Y, np.nan, dtype=np.float64) for name in alive}
    sizes = {name: [] for name in alive}
    whole: dict[int, list[str]] = {}
    seen = np.zeros(len(Y), dtype=bool)
    for i, (rest, fold) in enumerate(folds):
        sub = _subsample(rest, config.centre_screen_rows, rng)
        rows = {name: rest if lazy(name, config) else sub for name in alive}
        whole[i] = [name for name in alive if len(rows[name]) == len(rest)]
        say(f"screen {', '.join(alive)} on {len(sub)} rows of fold {i + 1}/{k}")
        fitted = side_by_side(lambda name: fit_predict(config, name, X[rows[name]], Y[rows[name]], X[fold]), alive,
                              workers)
        for name, (pred, seconds) in zip(alive, fitted):
            preds[name][fold] = pred
            records[name]["seconds"] += seconds
            sizes[name].append(len(rows[name]))
        seen[fold] = True
        if i + 1 >= RACE_FOLDS or i == k - 1:
            dear = alive if i == k - 1 else [name for name in alive if not lazy(name, config)]
            alive = _screened(Y, seen, folds[:i + 1], k, config, records, alive, preds, sizes, units, dear)
    return alive, {n: preds[n] for n in alive}, whole


def _screened(Y, seen, folds_run, k, config, records, alive, preds, sizes, units=None, droppable=None) -> list[str]:
    """:func:`screen_folds` after the folds ``folds_run``: each candidate's ``screen`` record; those of
    ``droppable`` (default all) more than the screen margin behind the best on the rows ``seen`` dropped (a
    dropped one's figures are those of the folds run). Returns the candidates left."""
    key, level, run = config.centre_criterion, config.coverage, len(folds_run)
    errors = {name: centre_errors(Y[seen], preds[name][seen], level, at(units, seen)) for name in alive}
    for name in alive:
        per_fold = [round(centre_errors(Y[fold], preds[name][fold], level, at(units, fold))[key], 6)
                    for _, fold in folds_run]
        records[name]["screen"] = {key: errors[name][key], "rows": int(round(np.mean(sizes[name]))), "folds": run,
                                   "per_fold": per_fold}
        records[name]["screen_errors"] = errors[name]  # popped before the records leave select_centre
    best, behind = trailing({n: e[key] for n, e in errors.items()}, config.centre_screen_margin)
    behind = {n: excess for n, excess in behind.items() if droppable is None or n in droppable}
    where = f"all {k} unit folds" if run == k else f"the first {run} of {k} unit folds"
    for name, excess in behind.items():
        rows = records[name]["screen"]["rows"]
        records[name].update(errors[name], rows=rows, folds=run, stage="screen", status="dropped",
                             scored_folds=list(range(1, run + 1)),
                             reason=f"on the screen ({rows} training rows of each of {where}, scored on all "
                                    f"their held-out rows) its {CRITERIA[key]} {errors[name][key]:.4g} was "
                                    f"{100 * excess:.0f} % above {best}'s {errors[best][key]:.4g} (screen margin "
                                    f"{100 * config.centre_screen_margin:.0f} %)")
    return [n for n in alive if n not in behind]


def lazy(name: str, config=None) -> bool:
    """Whether the centre kind ``name`` is a lazy learner, which the screen fits on all the training rows (a kind
    outside :data:`models.centres.kinds.KINDS`: the ``lazy`` attribute of ``config.make_centre(name)``)."""
    spec = KINDS.get(name)
    if spec is None and config is not None:
        return bool(getattr(config.make_centre(name), "lazy", False))
    return bool(spec is not None and spec.lazy)


def _subsample(rest: np.ndarray, n: int, rng) -> np.ndarray:
    """``n`` of the rows ``rest`` drawn by ``rng`` (sorted), or all of them where there are no more."""
    return rest if len(rest) <= n else np.sort(rng.choice(rest, n, replace=False))


def recall(chosen, X, Y, config, folds, records, oof, done, screen_pred, say, workers=None, units=None) -> str:
    """The selection's invariant over unit folds: no dropped candidate has a smaller error than the chosen
    one on the rows it was scored on (its ``scored_folds``). The chosen one's centres there are its
    out-of-fold ones where it ran the fold with all the rows, its screen ones elsewhere. A dropped
    candidate that beat it there (the one that beat it by most first) is *recalled*: both complete every
    fold with all their rows, the one of smaller error on all the rows stands and the other is dropped
    with that error (``stage="recall"``). Repeated until none beat the chosen one; returns its name."""
    key, level, k = config.centre_criterion, config.coverage, len(folds)

    def centres(name):
        out = screen_pred[name].copy() if name in screen_pred else np.full_like(Y, np.nan, dtype=np.float64)
        for i in done.get(name, ()):
            out[folds[i][1]] = oof[name][folds[i][1]]
        return out

    while True:
        mine, beaten = centres(chosen), {}
        for name, record in records.items():
            if record.get("status") != "dropped":
                continue
            rows = np.concatenate([folds[j - 1][1] for j in record["scored_folds"]])
            if np.isnan(mine[rows]).any():  # not scored there (cannot happen: the chosen ran those folds)
                continue
            error = centre_errors(Y[rows], mine[rows], level, at(units, rows))[key]
            if error > record[key]:
                beaten[name] = error / record[key]
        if not beaten:
            return chosen
        other = max(beaten, key=beaten.get)
        for name in (chosen, other):
            oof.setdefault(name, np.empty_like(Y, dtype=np.float64))
            todo = [i for i in range(k) if i not in done.setdefault(name, [])]
            say(f"recall {other}: {name} folds {', '.join(str(i + 1) for i in todo)}")
            fitted = side_by_side(lambda i: fit_predict(config, name, X[folds[i][0]], Y[folds[i][0]], X[folds[i][1]]),
                                  todo, workers)
            for i, (pred, seconds) in zip(todo, fitted):
                oof[name][folds[i][1]] = pred
                records[name]["seconds"] += seconds
                done[name].append(i)
        errors = {name: centre_errors(Y, oof[name], level, units) for name in (chosen, other)}
        winner, loser = (other, chosen) if errors[other][key] < errors[chosen][key] else (chosen, other)
        rows = fit_rows(folds)
        records[winner].update(errors[winner], rows=rows, folds=k, stage="cv", status="kept",
                               scored_folds=list(range(1, k + 1)))
        records[winner].pop("reason", None)
        if winner == other:
            records[winner]["recalled"] = True
        records[loser].update(errors[loser], rows=rows, folds=k, stage="recall", status="dropped",
                              scored_folds=list(range(1, k + 1)),
                              reason=f"{other} was recalled (its {CRITERIA[key]} where it was dropped was below "
                                     f"{chosen}'s there); on all {k} folds with all the rows its {CRITERIA[key]} "
                                     f"{errors[loser][key]:.4g} was above {winner}'s {errors[winner][key]:.4g}")
        chosen = winner


def centre_errors(Y: np.ndarray, P: np.ndarray, level: float | None = None, units=None) -> dict:
    """Root mean squared, median and mean Euclidean error of predictions ``P`` of ``Y`` (target units),
    and with ``level`` its ``level``-quantile (``"quantile"``). With ``units`` (each row's unit) the RMSE is each
    unit's averaged over the units and the quantile weighs each unit the same
    (:func:`models.centres.errors.criterion`: the criteria a centre is chosen by across units); the median and
    the mean stay over the rows."""
    e = np.linalg.norm(Y - P, axis=1)
    out = {"rmse": _criterion(e, "rmse", units=units), "median": float(np.median(e)), "mean": float(np.mean(e))}
    if level is not None:
        out["quantile"] = _criterion(e, "quantile", level, units)
    return out


def _criterion(e: np.ndarray, key: str, level: float | None = None, units=None) -> float:
    """The ``centre_criterion`` ``key`` of Euclidean errors ``e``, each of ``units`` weighing the same if given."""
    return unit_criterion(e, key, level, *(unit_codes(units) if units is not None else (None, None)))


def at(units, rows):
    """``units[rows]``, or ``None`` without units."""
    return None if units is None else units[rows]


def projected(Y, oof, screen_pred, folds, ran, key: str, level: float, widen: float, units=None
              ) -> tuple[float, float]:
    """A candidate's ``key`` error on every row as it would stand had it run every unit fold with all the
    rows: its out-of-fold centres ``oof`` on the folds ``ran`` (indices into ``folds``, one at least), its
    screen centres elsewhere, their errors scaled by its ratio of all-row to screen error on a fold it ran.
    ``(low, high)``: at the least of those ratios over ``1 + widen`` and at the greatest times ``1 + widen``,
    the range an unrun fold's ratio is assumed to lie in (the screen's rows give a candidate's fold errors
    to within a few per cent where they are thousands, folds alike: the ratios seen, widened). With ``units``
    (each row's unit) each unit weighs the same."""
    e_screen = np.linalg.norm(Y - screen_pred, axis=1)
    e_full = np.full(len(Y), np.nan)
    ratios = []
    for i in ran:
        fold = folds[i][1]
        e_full[fold] = np.linalg.norm(Y[fold] - oof[fold], axis=1)
        ratios.append(_criterion(e_full[fold], key, level, at(units, fold))
                      / max(_criterion(e_screen[fold], key, level, at(units, fold)), 1e-300))
    run = ~np.isnan(e_full)
    bounds = []
    for ratio in (min(ratios) / (1.0 + widen), max(ratios) * (1.0 + widen)):
        e = np.where(run, e_full, e_screen * ratio)
        bounds.append(_criterion(e, key, level, units))
    return bounds[0], bounds[1]


def cannot_win(Y, oof, screen_pred, folds, ran, alive, key: str, level: float, widen: float, units=None
               ) -> tuple[str, dict, list]:
    """After the unit folds ``ran``: the candidate of least ``high`` projection (:func:`projected`), each
    candidate's ``(low, high)``, and the candidates that cannot win: behind it on the rows scored, and with a
    ``low`` projection above its ``high`` (however their unrun folds fall within the ratios assumed, they end
    behind it). With ``units`` (each row's unit) each unit weighs the same."""
    bounds = {n: projected(Y, oof[n], screen_pred[n], folds, ran, key, level, widen, units) for n in alive}
    best = min(alive, key=lambda n: bounds[n][1])
    rows = np.concatenate([folds[i][1] for i in ran])
    scored = {n: centre_errors(Y[rows], oof[n][rows], level, at(units, rows))[key] for n in alive}
    return best, bounds, [n for n in alive if n != best and scored[n] > scored[best] and bounds[n][0] > bounds[best][1]]


def trailing(errors: dict[str, float], margin: float) -> tuple[str, dict[str, float]]:
    """The best name and, for each name more than ``margin`` above it, its excess share."""
    best = min(errors, key=errors.get)
    return best, {n: e / errors[best] - 1.0 for n, e in errors.items()
                  if errors[best] > 0 and e > (1.0 + margin) * errors[best]}


def fit_predict(config, name: str, X, Y, X_held) -> tuple[np.ndarray, float]:
    """Candidate ``name`` fitted on ``X, Y``; its centres at ``X_held`` and the seconds it took."""
    t0 = time.perf_counter()
    return config.make_centre(name).fit(X, Y).predict(X_held), time.perf_counter() - t0


def fit_rows(folds) -> int:
    """Rows per fit over ``folds`` (their training rows, averaged)."""
    return int(round(np.mean([len(rest) for rest, _ in folds])))
