"""Where to survey next: ``add`` new positions, in the order to walk them, chosen to shrink the served regions most.

A conformal region is as large as the survey's worst-placed readings make it: the calibrated threshold is a
high quantile of scores over every surveyed position, so the positions where a centre that never saw them
errs most set every region's size. New readings near those positions shrink that tail. The plan
(:func:`plan`) weighs each cell of the survey map (:mod:`models.survey_map`) by its *demand*, the expected
centre error squared times the expected region area (a reading that the centre places badly, in a part of
the site where the regions are large already), and by how *unsurveyed* it is: the product over surveyed
(and already proposed) positions ``p`` of ``1 - exp(-|g - p|^2 / 2 l^2)``, ``l`` the spacing the survey
will have once the positions are added (its spacing times ``sqrt(k / (k + add))``). It adds, one at a time,
the candidate that removes the most weighted unsurveyedness (a greedy weighted covering, whose gain only
falls as positions are added: a submodular objective, for which greedy is within ``1 - 1/e`` of the best
set), then orders the proposals as a walk (:func:`walking_order`).

Candidates are the caller's (for a site whose walkable positions are known, e.g. a building's other
reference points) or the map's cell centres, each jittered within its cell (seeded). A candidate outside
the extent is never proposed. The same inputs and seed give the same plan.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from models._validation import check_matrix, lookup
from models.exceptions import InputError
from models.survey_map import SurveyMap, interpolate

#: demands: what a cell's weight is ("error-area": error squared times area, the default)
WEIGHTS = ("error-area", "area", "uniform")


@dataclass(frozen=True)
class Plan:
    """``positions`` (add, 2) in walking order and ``index`` (add,), their rows in the candidates given (None when
    the map's cells were the candidates); per position its ``expected_area`` and ``expected_error`` (the
    map's, before the walk) and ``gain`` (the weighted unsurveyedness it removed when chosen, as a share of
    the map's total before the plan); ``walk_length`` (target units, from the first proposal to the last);
    ``candidates`` (offered) and ``outside`` (of those, dropped as outside the extent); ``weight`` and
    ``length_scale`` (``l``)."""

    positions: np.ndarray
    index: np.ndarray | None
    expected_area: np.ndarray
    expected_error: np.ndarray
    gain: np.ndarray
    walk_length: float
    candidates: int
    outside: int
    weight: str
    length_scale: float


def demand(smap: SurveyMap, weight: str = "error-area") -> np.ndarray:
    """(c,) each map cell's demand under ``weight`` (:data:`WEIGHTS`); where the bundle kept no honest error,
    ``error-area`` falls back to ``area``."""
    lookup(WEIGHTS, weight, "weight")
    if weight == "uniform":
        return np.ones(len(smap.centres))
    area = np.nan_to_num(smap.expected_area, nan=float(np.nanmedian(smap.expected_area)))
    if weight == "area" or not np.isfinite(smap.expected_error).any():
        return area
    error = np.nan_to_num(smap.expected_error, nan=float(np.nanmedian(smap.expected_error)))
    return area * error**2


def plan(smap: SurveyMap, add: int, *, candidates=None, seed: int = 0, weight: str = "error-area") -> Plan:
    """``add`` positions to survey next on the map ``smap``, from ``candidates`` (m, 2; default: its cells'
    centres, jittered within the cell by ``seed``), in walking order. Raises :class:`InputError` when ``add``
    is not a positive integer or fewer candidates lie inside the extent."""
    if not isinstance(add, (int, np.integer)) or isinstance(add, bool) or add < 1:
        raise InputError(f"add must be a positive integer; got {add!r}", field="add", expected="an integer >= 1",
                         received=repr(add))
    rng = np.random.default_rng(seed)
    if candidates is None:
        C = smap.centres + rng.uniform(-0.5, 0.5, size=smap.centres.shape) * smap.cell
    else:
        C = check_matrix(candidates, "candidates", n_columns=2, describe="target coordinates")
    offered, inside = len(C), smap.extent.contains(C)
    _, first = np.unique(C[inside], axis=0, return_index=True)  # a position offered twice is one candidate
    origin = np.flatnonzero(inside)[np.sort(first)]
    C = C[origin]
    if len(C) < add:
        raise InputError(f"{add} positions asked for, but only {len(C)} of the {offered} candidates lie inside the "
                         "site's extent", field="add", expected=f"<= {len(C)}", received=str(add))
    shuffle = rng.permutation(len(C))  # ties go to the seed's order
    C, origin = C[shuffle], origin[shuffle]
    k = len(smap.positions)
    ell = smap.spacing * np.sqrt(k / (k + add))
    w = demand(smap, weight)
    left = _unsurveyed(smap.centres, smap.positions, ell)
    total = float((w * left).sum()) or 1.0
    chosen, gains = [], []
    reach = _kernel(C, smap.centres, ell)  # (m, c): how much of each cell a candidate would survey
    for _ in range(add):
        gain = reach @ (w * left)
        if chosen:
            gain[chosen] = -np.inf
        best = int(np.argmax(gain))
        chosen.append(best)
        gains.append(float(gain[best]) / total)
        left = left * (1.0 - reach[best])
    order = walking_order(C[chosen])
    P = C[chosen][order]
    return Plan(positions=P, index=None if candidates is None else origin[chosen][order],
                expected_area=_read(smap, smap.expected_area, P, log=True),
                expected_error=np.sqrt(_read(smap, np.square(smap.expected_error), P)), gain=np.asarray(gains)[order],
                walk_length=_length(P), candidates=offered, outside=int(offered - inside.sum()), weight=weight,
                length_scale=float(ell))


def _kernel(A: np.ndarray, B: np.ndarray, ell: float) -> np.ndarray:
    d2 = ((A[:, None, :] - B[None, :, :]) ** 2).sum(axis=-1)
    return np.exp(-0.5 * d2 / ell**2)


def _unsurveyed(G: np.ndarray, P: np.ndarray, ell: float) -> np.ndarray:
    """(c,) the product over positions ``P`` of ``1 - k(g, p)``, in chunks of positions (a large survey)."""
    left = np.ones(len(G))
    for start in range(0, len(P), 512):
        left *= np.prod(1.0 - _kernel(P[start:start + 512], G, ell), axis=0)
    return left


def _read(smap: SurveyMap, values: np.ndarray, P: np.ndarray, log: bool = False) -> np.ndarray:
    """The map's per-cell ``values`` read at points ``P`` (a cell wide kernel over the nearest cells)."""
    return interpolate(smap.centres, values, P, smap.cell, log=log)


def _length(P: np.ndarray) -> float:
    return float(np.linalg.norm(np.diff(P, axis=0), axis=1).sum()) if len(P) > 1 else 0.0


def walking_order(P: np.ndarray) -> np.ndarray:
    """An order of the points ``P`` (m, 2) to walk them, open-ended: nearest neighbour from the point farthest
    from their mean (one end of the site), then 2-opt reversals while one shortens the walk."""
    m = len(P)
    if m <= 2:
        return np.arange(m)
    D = np.linalg.norm(P[:, None] - P[None], axis=-1)
    order = [int(np.argmax(np.linalg.norm(P - P.mean(axis=0), axis=1)))]
    free = np.ones(m, bool)
    free[order[0]] = False
    while free.any():
        d = np.where(free, D[order[-1]], np.inf)
        order.append(int(np.argmin(d)))
        free[order[-1]] = False
    order = np.asarray(order)
    improved = True
    while improved:
        improved = False
        for i in range(m - 2):
            a, b = order[i], order[i + 1]
            c, e = order[i + 2:], np.append(order[i + 3:], -1)
            after = np.where(e >= 0, D[b, np.maximum(e, 0)], 0.0)  # reversing order[i+1..j] joins b to order[j+1]
            before = np.where(e >= 0, D[c, np.maximum(e, 0)], 0.0)
            delta = D[a, c] + after - D[a, b] - before
            j = int(np.argmin(delta))
            if delta[j] < -1e-12:
                order[i + 1:i + 3 + j] = order[i + 1:i + 3 + j][::-1]
                improved = True
    return order
