"""``centre="auto"``: choosing the centre by cross-validation, in time proportionate to the data.

Every candidate's ``k``-fold out-of-fold error on the train part decides (:func:`select_centre`). On a
train part of at most ``screen_rows`` rows each candidate is fitted fold by fold on all its fold's
rows; once at least :data:`RACE_FOLDS` folds seen hold ``race_rows`` held-out rows, one more than
``race_margin`` behind the best is dropped between folds (``screen_rows=None`` turns both rungs off). Above
``screen_rows`` the candidates run in two rungs (successive halving over data, then racing over folds), all
compared on the same held-out rows:

1. **screen**: each candidate is fitted on ``screen_rows`` rows drawn from fold 1's training rows (a lazy
   learner such as k-NN on all of them: storing rows costs little, and fewer would judge a sparser search) and
   scored on fold 1's held-out rows; one whose error exceeds the best by more than ``screen_margin``
   is dropped;
2. **race**: the survivors are fitted fold by fold on all the rows; after each fold, one whose error
   on the folds seen so far exceeds the best by more than ``race_margin`` is dropped. The last one
   standing completes its folds alone, so the chosen centre's out-of-fold centres are whole (they
   are the shapes' cross-fitted residuals).

Over unit folds (``--calibrate-across``) each unit weighs the same in every error (the guarantee is for a new
unit), the screen fits every fold, the race drops only a candidate that cannot win
(:func:`training.pipeline.centre_screen.cannot_win`): a margin on the few units run misjudges. A fold the screen
fitted whole is not refitted.

Each candidate's record says what it was fitted on (rows per fit, folds), its error there, and
whether it was kept, or dropped and why; the manifest and the report carry it. The candidate
``"stack"`` blends the candidates that completed every fold (it needs two).
"""

from __future__ import annotations

import time

import numpy as np

from models.centres.stack import fold_splits, stack_weights, stacked_out_of_fold
from models.parallel import side_by_side
from training.pipeline.centre_screen import (CRITERIA, RACE_FOLDS, at, cannot_win, centre_errors, fit_predict, fit_rows,
                                             recall, screen, screen_folds, trailing)

#: the fewest rows ``centre_screen_rows`` may name (TrainConfig and ``--centre-screen`` both check it)
MIN_SCREEN_ROWS = 50

#: a fold's candidate that took more than this many times the others' seconds together, and more than
#: ``DOMINANT_SECONDS`` so far, fits alone after them (:func:`_schedule`)
DOMINANT, DOMINANT_SECONDS = 3.0, 10.0




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
    fits every candidate on ``centre_screen_rows`` rows of *each* fold's training rows (a lazy one on all) and decides on all the
    held-out rows (:func:`screen_folds`); after each fold a candidate that cannot win is dropped: behind the
    leader on the folds run, and behind it on every row once the folds still to run are projected from the
    screen, each candidate's screen errors scaled by its ratio of all-row to screen error on the folds run,
    widened by the race margin (:func:`cannot_win`), with no margin race; every error weighs each unit the same;
    and no dropped candidate may have beaten the chosen one on the rows it was scored on (:func:`recall`)."""
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
        self.unit_of = None if not units or groups is None else np.asarray(groups)  # each unit weighs the same
        self.key, self.level = config.centre_criterion, config.coverage
        self.singles = [n for n in config.centre_candidates if n != "stack"]
        self.folds = fold_splits(len(X), k, config.seed, groups)
        self.screened = config.centre_screen_rows is not None and len(X) > config.centre_screen_rows
        self.records = {n: {"seconds": 0.0} for n in self.singles}
        self.alive = list(self.singles)
        self.reuse: dict[int, dict] = {}  # fold -> the screen's centres of its held-out rows where it fitted all its rows
        self.screen_pred: dict[str, np.ndarray] = {}  # units: every candidate's screen centres of every row
        self.stopped = None  # the fold the selection stopped before (complete=False)

    def screen(self) -> None:
        """Above the screen size: drop the candidates far behind on a screen of fold 1 (of every fold, with units)."""
        if not (self.screened and len(self.alive) > 1):
            return
        args = (self.X, self.Y, self.config)
        if self.units:
            self.alive, self.screen_pred, whole = screen_folds(*args, self.folds, self.records, self.alive, self.say,
                                                                self.workers, self.unit_of)
            self.reuse = {i: {n: self.screen_pred[n][self.folds[i][1]] for n in names if n in self.alive}
                          for i, names in whole.items()}
        else:
            self.alive, first = screen(*args, self.folds[0], self.records, self.alive, self.say, self.workers)
            self.reuse = {0: first}

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
        """Fold ``i``: each standing candidate fitted on ``rest`` and predicting ``fold`` (taken from the screen
        where it fitted all the fold's training rows)."""
        X, Y, config, k = self.X, self.Y, self.config, self.k
        reused = self.reuse.get(i, {})
        todo = [n for n in self.alive if n not in reused]
        runs = _schedule(todo, self.records)
        todo = [name for run in runs for name in run]
        self.say(f"{', '.join(todo)} fold {i + 1}/{k}" if todo else f"fold {i + 1}/{k} from the screen")
        fitted = [out for run in runs for out in
                  side_by_side(lambda name: fit_predict(config, name, X[rest], Y[rest], X[fold]), run, self.workers)]
        for name, (pred, seconds) in zip(todo, fitted):
            self.oof[name][fold] = pred
            self.records[name]["seconds"] += seconds
        for name in set(self.alive) - set(todo):
            self.oof[name][fold] = reused[name]
        for name in self.alive:
            self.done[name].append(i)
        self.seen[fold] = True

    def _race(self, i: int) -> None:
        """After fold ``i``: over screened unit folds, drop the candidates that cannot win (:meth:`_project`); then
        those more than the race margin behind the best on the rows seen."""
        config, k, key, seen = self.config, self.k, self.key, self.seen
        if len(self.alive) < 2 or i >= k - 1:
            return
        if self.screen_pred:
            self._project(i)
        race = self.screened or (config.centre_screen_rows is not None and config.centre_race_rows is not None
                                 and i + 1 >= RACE_FOLDS and seen.sum() >= config.centre_race_rows)
        if not (race and not self.units and len(self.alive) > 1):
            return
        errors = {n: centre_errors(self.Y[seen], self.oof[n][seen], self.level) for n in self.alive}
        best, behind = trailing({n: e[key] for n, e in errors.items()}, config.centre_race_margin)
        for name, excess in behind.items():
            self.records[name].update(errors[name], rows=fit_rows(self.folds[:i + 1]), folds=i + 1, stage="race",
                                      status="dropped", scored_folds=list(range(1, i + 2)),
                                      reason=f"after {i + 1} of {k} folds its {CRITERIA[key]} {errors[name][key]:.4g} "
                                             f"was {100 * excess:.0f} % above {best}'s {errors[best][key]:.4g} "
                                             f"(race margin {100 * config.centre_race_margin:.0f} %)")
        self.alive = [n for n in self.alive if n not in behind]

    def _project(self, i: int) -> None:
        """Over screened unit folds, after fold ``i`` (the first too: the folds still to run are judged by the
        screen, not left out): drop the candidates that cannot win (:func:`cannot_win`)."""
        config, k, key = self.config, self.k, self.key
        ran = list(range(i + 1))
        best, bounds, out = cannot_win(self.Y, self.oof, self.screen_pred, self.folds, ran, self.alive, key,
                                       self.level, config.centre_race_margin, self.unit_of)
        seen, against_high = self.seen, bounds[best][1]
        for name in out:
            low, high = bounds[name]
            self.records[name].update(
                centre_errors(self.Y[seen], self.oof[name][seen], self.level, at(self.unit_of, seen)),
                rows=fit_rows(self.folds[:i + 1]),
                folds=i + 1, stage="race", status="dropped", scored_folds=list(range(1, i + 2)),
                projected={"low": low, "high": high, "against": best, "against_high": against_high},
                reason=f"it cannot win: after {i + 1} of {k} folds it was behind {best} on their rows, and with the "
                       f"{k - i - 1} folds to run projected from the screen (at the least and the greatest ratio of "
                       f"all-row to screen error its folds so far gave, widened by the race margin) its "
                       f"{CRITERIA[key]} would be {low:.4g} at best, above {best}'s {against_high:.4g} at worst")
        self.alive = [n for n in self.alive if n not in out]

    def choose(self) -> str:
        """The kept candidate of smallest error (recalled across units; the ``stack`` blend when it beats it);
        ``whole``: the candidates whose out-of-fold centres cover every row."""
        Y, k, key, records = self.Y, self.k, self.key, self.records
        if self.stopped is not None:
            _last_standing(self.alive[0], records, Y, self.oof, self.seen, self.folds[:self.stopped], k, self.level,
                           self.unit_of)
        else:
            rows = fit_rows(self.folds)
            for name in self.alive:
                records[name].update(centre_errors(Y, self.oof[name], self.level, self.unit_of), rows=rows, folds=k,
                                     stage="cv",
                                     status="kept", scored_folds=list(range(1, k + 1)))
        kept = [n for n, r in records.items() if r["status"] == "kept"]
        chosen = min(kept, key=lambda n: records[n][key])
        if self.units:
            chosen = recall(chosen, self.X, Y, self.config, self.folds, records, self.oof, self.done,
                             self.screen_pred, self.say, self.workers, self.unit_of)
        self.whole = [n for n in self.singles if records[n]["status"] == "kept" and len(self.done.get(n, ())) == k]
        if "stack" in self.config.centre_candidates:
            folds = self.folds if self.stopped is None else self.folds[:self.stopped]
            records["stack"] = _stack(Y, self.oof, self.whole, folds, self.config, self.say, self.unit_of)
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


def _last_standing(name: str, records: dict, Y, oof: dict, seen, folds_run, k: int, level, units=None) -> None:
    """``select_centre(complete=False)``'s record of ``name`` left standing after ``folds_run`` (none: the
    screen, whose figures then stand)."""
    record = records[name]
    if folds_run:
        record.update(centre_errors(Y[seen], oof[name][seen], level, at(units, seen)), rows=fit_rows(folds_run),
                      folds=len(folds_run),
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


def _stack(Y, oof, complete, folds, config, say, units=None) -> dict:
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
    return {**centre_errors(Y, stacked, config.coverage, units), "seconds": time.perf_counter() - t0,
            "rows": fit_rows(folds), "folds": len(folds), "stage": "cv", "status": "kept",
            "weights": {n: [round(float(w), 4) for w in weights[i]] for i, n in enumerate(complete)}, "oof": stacked}
