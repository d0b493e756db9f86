"""``centre="auto"``: choosing the centre by cross-validation, in time proportionate to the data.

Every candidate's ``k``-fold out-of-fold error on the train part decides (:func:`select_centre`). On a
train part of at most ``screen_rows`` rows each candidate is fitted fold by fold on all its fold's
rows; once at least :data:`RACE_FOLDS` folds seen hold ``race_rows`` held-out rows (500; never on the
small sets of the paper, whose train parts hold fewer than 625 rows), one more than ``race_margin``
behind the best is dropped between folds (below; ``screen_rows=None`` turns both rungs off). Above ``screen_rows`` the
cost of a kernel SVR (about the square of the rows), of boosted trees on hundreds of columns or of a
network without a GPU outgrows what it can win, so the candidates run in two rungs (successive
halving over data, then racing over folds), all compared on the same held-out rows:

1. **screen**: each candidate is fitted on ``screen_rows`` rows drawn from fold 1's training rows and
   scored on fold 1's held-out rows; one whose error exceeds the best by more than ``screen_margin``
   is dropped;
2. **race**: the survivors are fitted fold by fold on all the rows; after each fold, one whose error
   on the folds seen so far exceeds the best by more than ``race_margin`` is dropped. The last one
   standing completes its folds alone, so the chosen centre's out-of-fold centres are whole (they
   are the shapes' cross-fitted residuals).

Each candidate's record says what it was fitted on (rows per fit, folds), its error there, and
whether it was kept, or dropped and why; the manifest and the report carry it. The candidate
``"stack"`` blends the candidates that completed every fold (it needs two).
"""

from __future__ import annotations

import time

import numpy as np

from models.centres.stack import fold_splits, stack_weights, stacked_out_of_fold
from models.parallel import side_by_side

#: the fewest rows ``centre_screen_rows`` may name (TrainConfig and ``--centre-screen`` both check it)
MIN_SCREEN_ROWS = 50

#: a fold's candidate that took more than this many times the others' seconds together, and more than
#: ``DOMINANT_SECONDS`` so far, fits alone after them (:func:`_schedule`)
DOMINANT, DOMINANT_SECONDS = 3.0, 10.0

#: below the screen size the race judges from this fold on, whatever the rows of the first: one fold of a
#: few groups is one draw of their spread. Visits (28 subjects, 3-4 a fold), seed 2: after fold 1 ``paper``
#: was 12 % behind ``hgb`` (4.30 against 3.83) and dropped; after fold 2 it was 7 % behind, and after five
#: 5 % ahead (2.88 against 3.05); ``hgb``'s regions then held 36 % of the test subjects' rows, paper's 83 %
RACE_FOLDS = 2

#: TrainConfig.centre_criterion -> its words in the manifest and the report
CRITERIA = {"rmse": "RMSE", "quantile": "quantile at the coverage level"}


def centre_errors(Y: np.ndarray, P: np.ndarray, level: float | None = None) -> dict:
    """Root mean squared, median and mean Euclidean error of predictions ``P`` of ``Y`` (target units),
    and with ``level`` its ``level``-quantile (``"quantile"``)."""
    e = np.linalg.norm(Y - P, axis=1)
    out = {"rmse": float(np.sqrt(np.mean(e**2))), "median": float(np.median(e)), "mean": float(np.mean(e))}
    if level is not None:
        out["quantile"] = float(np.quantile(e, level))
    return out


def out_of_fold_centers(X: np.ndarray, Y: np.ndarray, config, k: int, groups=None,
                        name: str | None = None) -> np.ndarray:
    """(m, n) centres of ``X`` (m, d), each row's from a centre (``name``, default the configured
    one) fitted without its fold.

    ``k`` folds shuffled with ``config.seed`` (:func:`models.centres.stack.fold_splits`); with ``groups``,
    whole groups per fold (a row's centre then comes from a centre that saw no row of its group).
    """
    out = np.empty_like(Y, dtype=np.float64)
    for rest, fold in fold_splits(len(X), k, config.seed, groups):
        out[fold] = config.make_centre(name).fit(X[rest], Y[rest]).predict(X[fold])
    return out


def _behind(errors: dict[str, float], margin: float) -> tuple[str, dict[str, float]]:
    """The best name and, for each name more than ``margin`` above it, its excess share."""
    best = min(errors, key=errors.get)
    return best, {n: e / errors[best] - 1.0 for n, e in errors.items()
                  if errors[best] > 0 and e > (1.0 + margin) * errors[best]}


class _Progress:
    """``centre auto: <what>`` on the caller's progress bar (or nothing)."""

    def __init__(self, bar):
        self.bar = bar

    def __call__(self, text: str) -> None:
        if self.bar is not None:
            self.bar.set_postfix_str(f"centre auto: {text}")


def select_centre(X: np.ndarray, Y: np.ndarray, config, k: int, groups=None,
                  progress=None, workers: int | None = None, complete: bool = True,
                  units: bool = False) -> tuple[str, dict, dict]:
    """``centre="auto"``: the candidate of smallest ``k``-fold cross-validated error on the train part
    ``X, Y`` (group folds with ``groups``) by ``config.centre_criterion``, screened and raced above
    ``config.centre_screen_rows`` rows (module docstring).

    Returns the chosen name, every candidate's record (its errors; ``rows``: rows per fit; ``folds``;
    ``scored_folds``: the 1-based folds whose held-out rows its error is on; ``status``: ``"kept"`` or
    ``"dropped"``, with a ``reason``; ``seconds``) and the out-of-fold centres of the candidates that
    completed every fold (reused as cross-fitted centres with the same folds). ``"stack"`` blends those
    candidates, each fold weighted by the other folds (:func:`models.centres.stack.stacked_out_of_fold`),
    so it costs no fit.

    The candidates of one fold (and of the screen) are fitted side by side on up to ``workers`` threads
    (:func:`models.parallel.side_by_side`; default the idle cores); the figures are those of fitting them
    one after the other.

    ``complete=False`` (the caller has no use for the chosen centre's out-of-fold centres) stops as soon as
    one candidate is left standing; its record then says so, and its out-of-fold centres are not returned.

    ``units=True`` (folds of whole units, ``--calibrate-across``) judges on more than one fold: the screen
    fits every candidate on ``centre_screen_rows`` rows of *each* fold's training rows and decides on all the
    held-out rows (:func:`_screen_folds`), the race judges from fold :data:`RACE_FOLDS` on, and no dropped
    candidate may have beaten the chosen one on the rows it was scored on (:func:`_recall`)."""
    sel = _Selection(X, Y, config, k, groups, _Progress(progress), workers, units)
    sel.screen()
    sel.run_folds(complete)
    chosen = sel.choose()
    return chosen, _ordered(sel.records, config), {n: sel.oof[n] for n in sel.whole}


class _Selection:
    """One run of :func:`select_centre`: the candidates still standing (``alive``), their records, their
    out-of-fold centres (``oof``), the folds each fitted on all its training rows (``done``) and the rows
    scored so far (``seen``)."""

    def __init__(self, X, Y, config, k: int, groups, say, workers, units: bool):
        self.X, self.Y, self.config, self.k, self.say, self.workers, self.units = X, Y, config, k, say, workers, units
        self.key, self.level = config.centre_criterion, config.coverage
        self.singles = [n for n in config.centre_candidates if n != "stack"]
        self.folds = fold_splits(len(X), k, config.seed, groups)
        self.screened = config.centre_screen_rows is not None and len(X) > config.centre_screen_rows
        self.records = {n: {"seconds": 0.0} for n in self.singles}
        self.alive = list(self.singles)
        self.first = None  # fold 1's predictions when the screen fitted on all of its training rows
        self.screen_pred: dict[str, np.ndarray] = {}  # units: every candidate's screen centres of every row
        self.stopped = None  # the fold the selection stopped before (complete=False)

    def screen(self) -> None:
        """Above the screen size: drop the candidates far behind on a screen of fold 1 (of every fold, with units)."""
        if not (self.screened and len(self.alive) > 1):
            return
        args = (self.X, self.Y, self.config)
        if self.units:
            self.alive, self.screen_pred = _screen_folds(*args, self.folds, self.records, self.alive, self.say,
                                                         self.workers)
        else:
            self.alive, self.first = _screen(*args, self.folds[0], self.records, self.alive, self.say, self.workers)

    def run_folds(self, complete: bool) -> None:
        """Every fold, candidates fitted side by side, raced between folds; without ``complete``, stop when one
        candidate is left standing."""
        self.oof = {n: np.empty_like(self.Y, dtype=np.float64) for n in self.alive}
        self.done: dict[str, list[int]] = {n: [] for n in self.alive}
        self.seen = np.zeros(len(self.X), dtype=bool)
        for i, (rest, fold) in enumerate(self.folds):
            if not complete and len(self.alive) == 1 and (i > 0 or "screen" in self.records[self.alive[0]]):
                self.stopped = i
                return
            self._fold(i, rest, fold)
            self._race(i)

    def _fold(self, i: int, rest: np.ndarray, fold: np.ndarray) -> None:
        """Fold ``i``: each standing candidate fitted on ``rest`` and predicting ``fold`` (fold 1 taken from the
        screen where it fitted all the rows)."""
        X, Y, config, k = self.X, self.Y, self.config, self.k
        todo = [n for n in self.alive if not (i == 0 and self.first is not None and n in self.first)]
        runs = _schedule(todo, self.records)
        todo = [name for run in runs for name in run]
        self.say(f"{', '.join(todo)} fold {i + 1}/{k}" if todo else f"fold {i + 1}/{k} from the screen")
        fitted = [out for run in runs for out in
                  side_by_side(lambda name: _fit_predict(config, name, X[rest], Y[rest], X[fold]), run, self.workers)]
        for name, (pred, seconds) in zip(todo, fitted):
            self.oof[name][fold] = pred
            self.records[name]["seconds"] += seconds
        for name in set(self.alive) - set(todo):
            self.oof[name][fold] = self.first[name]
        for name in self.alive:
            self.done[name].append(i)
        self.seen[fold] = True

    def _race(self, i: int) -> None:
        """After fold ``i``: drop the candidates more than the race margin behind the best on the rows seen."""
        config, k, key, seen = self.config, self.k, self.key, self.seen
        race = self.screened or (config.centre_screen_rows is not None and config.centre_race_rows is not None
                                 and i + 1 >= RACE_FOLDS and seen.sum() >= config.centre_race_rows)
        if not (race and (not self.units or i + 1 >= RACE_FOLDS) and len(self.alive) > 1 and i < k - 1):
            return
        errors = {n: centre_errors(self.Y[seen], self.oof[n][seen], self.level) for n in self.alive}
        best, behind = _behind({n: e[key] for n, e in errors.items()}, config.centre_race_margin)
        for name, excess in behind.items():
            self.records[name].update(errors[name], rows=_fit_rows(self.folds[:i + 1]), folds=i + 1, stage="race",
                                      status="dropped", scored_folds=list(range(1, i + 2)),
                                      reason=f"after {i + 1} of {k} folds its {CRITERIA[key]} {errors[name][key]:.4g} "
                                             f"was {100 * excess:.0f} % above {best}'s {errors[best][key]:.4g} "
                                             f"(race margin {100 * config.centre_race_margin:.0f} %)")
        self.alive = [n for n in self.alive if n not in behind]

    def choose(self) -> str:
        """The kept candidate of smallest error (recalled across units; the ``stack`` blend when it beats it);
        ``whole``: the candidates whose out-of-fold centres cover every row."""
        Y, k, key, records = self.Y, self.k, self.key, self.records
        if self.stopped is not None:
            _last_standing(self.alive[0], records, Y, self.oof, self.seen, self.folds[:self.stopped], k, self.level)
        else:
            rows = _fit_rows(self.folds)
            for name in self.alive:
                records[name].update(centre_errors(Y, self.oof[name], self.level), rows=rows, folds=k, stage="cv",
                                     status="kept", scored_folds=list(range(1, k + 1)))
        kept = [n for n, r in records.items() if r["status"] == "kept"]
        chosen = min(kept, key=lambda n: records[n][key])
        if self.units:
            chosen = _recall(chosen, self.X, Y, self.config, self.folds, records, self.oof, self.done,
                             self.screen_pred, self.say, self.workers)
        self.whole = [n for n in self.singles if records[n]["status"] == "kept" and len(self.done.get(n, ())) == k]
        if "stack" in self.config.centre_candidates:
            folds = self.folds if self.stopped is None else self.folds[:self.stopped]
            records["stack"] = _stack(Y, self.oof, self.whole, folds, self.config, self.say)
            if records["stack"]["status"] == "kept":
                self.oof["stack"] = records["stack"].pop("oof")
                self.whole.append("stack")
                if records["stack"][key] < records[chosen][key]:
                    chosen = "stack"
        return chosen


def _ordered(records: dict, config) -> dict:
    """The records in the candidates' order, each with its figures first (the screen's own errors dropped)."""
    first_keys = ("status", "rmse", "median", "mean", "quantile", "rows", "folds", "stage")
    for record in records.values():
        record.pop("screen_errors", None)
    return {n: {**{f: records[n][f] for f in first_keys if f in records[n]}, **records[n]}
            for n in config.centre_candidates if n in records}


def _last_standing(name: str, records: dict, Y, oof: dict, seen, folds_run, k: int, level) -> None:
    """``select_centre(complete=False)``'s record of ``name`` left standing after ``folds_run`` (none: the
    screen, whose figures then stand)."""
    record = records[name]
    if folds_run:
        record.update(centre_errors(Y[seen], oof[name][seen], level), rows=_fit_rows(folds_run), folds=len(folds_run),
                      scored_folds=list(range(1, len(folds_run) + 1)))
        where = f"after {len(folds_run)} of {k} folds"
    else:
        screen = record["screen"]
        record.update(record.pop("screen_errors"), rows=screen["rows"], folds=screen.get("folds", 1),
                      scored_folds=list(range(1, screen.get("folds", 1) + 1)))
        where = "at the screen (its error: the screen's)"
    record.update(stage="race" if folds_run else "screen", status="kept",
                  reason=f"the last one standing {where}; its other folds were skipped (their out-of-fold "
                         "centres serve no one: --calibrate-across refits the centre per unit fold)")


def _schedule(todo: list[str], records: dict) -> list[list[str]]:
    """The runs a fold fits ``todo`` in, each side by side (:func:`models.parallel.side_by_side`): one run,
    the slowest so far first, so that the cores finish together; or, when the slowest is *dominant*
    (more than ``DOMINANT`` times the others' seconds together), the others first and then it alone, on
    the idle cores, where its own threads use both cores instead of one beside fits that finished long
    before. Not below ``DOMINANT_SECONDS`` so far: a fit of a second or so uses a second core poorly."""
    todo = sorted(todo, key=lambda n: -records[n]["seconds"])
    slowest = records[todo[0]]["seconds"] if todo else 0.0
    if len(todo) > 1 and slowest > DOMINANT_SECONDS and slowest > DOMINANT * sum(records[n]["seconds"] for n in todo[1:]):
        return [todo[1:], todo[:1]]
    return [todo] if todo else []


def _fit_predict(config, name: str, X, Y, X_held) -> tuple[np.ndarray, float]:
    """Candidate ``name`` fitted on ``X, Y``; its centres at ``X_held`` and the seconds it took."""
    t0 = time.perf_counter()
    return config.make_centre(name).fit(X, Y).predict(X_held), time.perf_counter() - t0


def _fit_rows(folds) -> int:
    """Rows per fit over ``folds`` (their training rows, averaged)."""
    return int(round(np.mean([len(rest) for rest, _ in folds])))


def _screen(X, Y, config, first_fold, records, alive, say, workers=None):
    """Rung 1: every candidate fitted on ``centre_screen_rows`` rows of fold 1's training rows (drawn by
    ``numpy.random.default_rng(seed).choice``, sorted), scored on its held-out rows (each record's
    ``screen``); those more than ``centre_screen_margin`` behind the best are dropped.
    Returns the survivors, and their fold-1 predictions when the screen used all the training rows."""
    rest, fold = first_fold
    n = config.centre_screen_rows
    whole = len(rest) <= n
    sub = rest if whole else np.sort(np.random.default_rng(config.seed).choice(rest, n, replace=False))
    key, level = config.centre_criterion, config.coverage
    preds, errors = {}, {}
    say(f"screen {', '.join(alive)} on {len(sub)} rows")
    fitted = side_by_side(lambda name: _fit_predict(config, name, X[sub], Y[sub], X[fold]), alive, workers)
    for name, (pred, seconds) in zip(alive, fitted):
        preds[name] = pred
        records[name]["seconds"] += seconds
        errors[name] = centre_errors(Y[fold], preds[name], level)
        records[name]["screen"] = {key: errors[name][key], "rows": len(sub)}
        records[name]["screen_errors"] = errors[name]  # popped before the records leave select_centre
    best, behind = _behind({n: e[key] for n, e in errors.items()}, config.centre_screen_margin)
    for name, excess in behind.items():
        records[name].update(errors[name], rows=len(sub), folds=1, stage="screen", status="dropped", scored_folds=[1],
                             reason=f"on the screen ({len(sub)} of fold 1's {len(rest)} training rows, scored on its "
                                    f"{len(fold)} held-out rows) its {CRITERIA[key]} {errors[name][key]:.4g} was "
                                    f"{100 * excess:.0f} % above {best}'s {errors[best][key]:.4g} (screen margin "
                                    f"{100 * config.centre_screen_margin:.0f} %)")
    survivors = [n for n in alive if n not in behind]
    return survivors, ({n: preds[n] for n in survivors} if whole else None)


def _screen_folds(X, Y, config, folds, records, alive, say, workers=None):
    """Rung 1 over unit folds (``select_centre(units=True)``): every candidate fitted on
    ``centre_screen_rows`` rows of *each* fold's training rows (drawn by one
    ``numpy.random.default_rng(seed)``, sorted; all of them where a fold has fewer) and scored on its
    held-out rows; those more than ``centre_screen_margin`` behind the best on all the rows together are
    dropped. Each record's ``screen`` holds the pooled error, the rows per fit, the folds and each fold's
    own error (their spread). Returns the survivors and every candidate's screen centres of every row."""
    n = config.centre_screen_rows
    key, level = config.centre_criterion, config.coverage
    rng = np.random.default_rng(config.seed)
    preds = {name: np.empty_like(Y, dtype=np.float64) for name in alive}
    sizes = []
    for i, (rest, fold) in enumerate(folds):
        sub = rest if len(rest) <= n else np.sort(rng.choice(rest, n, replace=False))
        sizes.append(len(sub))
        say(f"screen {', '.join(alive)} on {len(sub)} rows of fold {i + 1}/{len(folds)}")
        fitted = side_by_side(lambda name: _fit_predict(config, name, X[sub], Y[sub], X[fold]), alive, workers)
        for name, (pred, seconds) in zip(alive, fitted):
            preds[name][fold] = pred
            records[name]["seconds"] += seconds
    rows, k = int(round(np.mean(sizes))), len(folds)
    errors = {name: centre_errors(Y, preds[name], level) for name in alive}
    for name in alive:
        per_fold = [round(centre_errors(Y[fold], preds[name][fold], level)[key], 6) for _, fold in folds]
        records[name]["screen"] = {key: errors[name][key], "rows": rows, "folds": k, "per_fold": per_fold}
        records[name]["screen_errors"] = errors[name]  # popped before the records leave select_centre
    best, behind = _behind({n: e[key] for n, e in errors.items()}, config.centre_screen_margin)
    for name, excess in behind.items():
        records[name].update(errors[name], rows=rows, folds=k, stage="screen", status="dropped",
                             scored_folds=list(range(1, k + 1)),
                             reason=f"on the screen ({rows} training rows of each of the {k} unit folds, scored on all "
                                    f"their held-out rows) its {CRITERIA[key]} {errors[name][key]:.4g} was "
                                    f"{100 * excess:.0f} % above {best}'s {errors[best][key]:.4g} (screen margin "
                                    f"{100 * config.centre_screen_margin:.0f} %)")
    return [n for n in alive if n not in behind], preds


def _recall(chosen, X, Y, config, folds, records, oof, done, screen_pred, say, workers=None) -> str:
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
            error = centre_errors(Y[rows], mine[rows], level)[key]
            if error > record[key]:
                beaten[name] = error / record[key]
        if not beaten:
            return chosen
        other = max(beaten, key=beaten.get)
        for name in (chosen, other):
            oof.setdefault(name, np.empty_like(Y, dtype=np.float64))
            todo = [i for i in range(k) if i not in done.setdefault(name, [])]
            say(f"recall {other}: {name} folds {', '.join(str(i + 1) for i in todo)}")
            fitted = side_by_side(lambda i: _fit_predict(config, name, X[folds[i][0]], Y[folds[i][0]], X[folds[i][1]]),
                                  todo, workers)
            for i, (pred, seconds) in zip(todo, fitted):
                oof[name][folds[i][1]] = pred
                records[name]["seconds"] += seconds
                done[name].append(i)
        errors = {name: centre_errors(Y, oof[name], level) for name in (chosen, other)}
        winner, loser = (other, chosen) if errors[other][key] < errors[chosen][key] else (chosen, other)
        rows = _fit_rows(folds)
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


def _stack(Y, oof, complete, folds, config, say) -> dict:
    """The ``"stack"`` record: the blend of the candidates that completed every fold (with its
    nested out-of-fold centres under ``"oof"``), or dropped when fewer than two did."""
    if len(complete) < 2:
        return {"seconds": 0.0, "rows": 0, "folds": 0, "stage": "screen", "status": "dropped",
                "reason": f"it blends the candidates that complete every fold, and {len(complete)} did "
                          f"({', '.join(complete) or 'none'})"}
    say("stack")
    t0 = time.perf_counter()
    preds = [oof[n] for n in complete]
    stacked = stacked_out_of_fold(preds, Y, folds)
    weights = stack_weights(preds, Y)
    return {**centre_errors(Y, stacked, config.coverage), "seconds": time.perf_counter() - t0,
            "rows": _fit_rows(folds), "folds": len(folds), "stage": "cv", "status": "kept",
            "weights": {n: [round(float(w), 4) for w in weights[i]] for i, n in enumerate(complete)}, "oof": stacked}
