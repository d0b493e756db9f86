"""Held-out figures of a unit cross-fit with no test part: every unit left out in turn.

Across units in ``cross-fit`` mode every unit trains the served model and calibrates it
(:mod:`training.calibration.across`), so no unit is left to test on. What a new unit meets is measured on the
cross-fit itself: each unit's calibration rows are scored by the centre and the shape of its unit fold (models
that never saw the unit), at the threshold the calibration rule gives over the **other** units' scores (the
served threshold had the unit not calibrated), and its regions are that shape's at that threshold about that
centre. Pooled over the units, these are the run's test figures (coverage, area, the centre's error), with
the lowest unit's coverage beside them.

The figures are the cross-conformal guarantee's own evidence, not an independent test: the fold models saw
``(k - 1) / k`` of the units where the served one sees them all, so they lean a little pessimistic on area.
"""

from __future__ import annotations

from dataclasses import fields

import numpy as np

from models.calibration.conformal import SplitConformalCalibrator


def _parts(shape, X):
    """What an ellipsoid shape's score and region share (``None`` for a box)."""
    return shape.predict_parts(X) if hasattr(shape, "predict_parts") else None


def _slice(parts, at):
    return None if parts is None else tuple(None if p is None else p[at] for p in parts)


def _score(shape, X, R, parts):
    return shape.conformity_scores(X, R) if parts is None else shape.conformity_scores(X, R, parts=parts)


def _region(shape, X, centres, q: float, eta: float, parts):
    return shape.region(X, centres, q, eta) if parts is None else shape.region(X, centres, q, eta, parts=parts)


def leave_unit_out(folds, X: np.ndarray, Y: np.ndarray, centres: np.ndarray, units: np.ndarray, rule: str,
                   seed: int, eta: float, alpha_q: float):
    """``(regions, thresholds)``: each row's region scored out of its unit, as the module docstring says.

    ``folds``: ``(shape, rows)`` pairs, each fold's fitted shape and the rows (indices into ``X``, ``Y``,
    ``centres`` (m, n), the fold models' centres, and ``units`` (m,)) of the units it never saw; the rows
    of all folds are the calibration rows, each in one fold. ``regions``: one batch of the shapes' region
    type over the rows in the order of ``np.concatenate([rows for _, rows in folds])`` sorted, reporting
    ``alpha_q`` (the served threshold; each row's own is its unit's). ``thresholds``: unit -> the
    threshold of the other units' scores at ``eta`` under ``rule``."""
    rows = np.concatenate([np.asarray(r, dtype=np.int64) for _, r in folds])
    parts = [_parts(shape, X[r]) for shape, r in folds]
    scores = np.concatenate([_score(shape, X[r], Y[r] - centres[r], p) for (shape, r), p in zip(folds, parts)])
    scores = np.where(np.isfinite(scores), scores, np.inf)
    own = units[rows]
    thresholds = {}
    for u in np.unique(own):
        others = own != u
        thresholds[u] = SplitConformalCalibrator(rule, seed).fit(scores[others], own[others]).quantile(eta)
    pieces = []
    for (shape, r), p in zip(folds, parts):
        for u in np.unique(units[r]):
            at = np.flatnonzero(units[r] == u)
            pieces.append((r[at], _region(shape, X[r[at]], centres[r[at]], thresholds[u], eta, _slice(p, at))))
    return _joined([piece for _, piece in pieces], np.argsort(np.concatenate([i for i, _ in pieces]), kind="stable"),
                   alpha_q), thresholds


def _joined(batches, order: np.ndarray, alpha_q: float):
    """One region batch of ``batches`` (all of one type) stacked, rows taken in ``order``, reporting ``alpha_q``."""
    first = batches[0]
    values = {}
    for f in fields(first):
        v = getattr(first, f.name)
        if isinstance(v, np.ndarray) and v.ndim and v.shape[0] == len(first):
            values[f.name] = np.concatenate([getattr(b, f.name) for b in batches])[order]
        else:
            values[f.name] = v
    values["alpha_q"] = float(alpha_q)
    return type(first)(**values)


def unit_coverages(inside: np.ndarray, units: np.ndarray) -> dict:
    """Each unit's share of rows inside its region: ``{"lowest", "mean", "units"}`` (every unit weighted the
    same, as the calibration weighs them)."""
    codes, where = np.unique(units, return_inverse=True)
    share = np.bincount(where.ravel(), weights=inside.astype(np.float64)) / np.bincount(where.ravel())
    return {"lowest": float(share.min()), "mean": float(share.mean()), "units": int(len(codes))}
