"""How sure a coverage figure is: the exact binomial interval and test of a share of rows (or of groups, each
weighted alike) against a level, how many units a test needs to tell a shortfall, and what a
walk's intervals count (:class:`Units`, :func:`unit_test`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: the coverage tests' size (one-sided)
TEST_SIZE = 0.05


def binomial(hits: float, n: int, level: float, confidence: float = 0.95) -> dict:
    """``{"interval": exact (Clopper-Pearson) interval of hits / n at ``confidence``, "p_value": P(Binomial(n,
    level) <= hits)}``, from the beta distribution, so that ``hits`` may be a real number (a mean of shares
    times their count, :func:`coverage_interval`); for whole hits both equal ``scipy.stats.binomtest``'s."""
    from scipy.stats import beta

    x, n = float(hits), int(n)
    tail = (1.0 - confidence) / 2
    low = 0.0 if x <= 0 else float(beta.ppf(tail, x, n - x + 1))
    high = 1.0 if x >= n else float(beta.ppf(1 - tail, x + 1, n - x))
    p_value = 1.0 if x >= n else float(beta.cdf(1.0 - level, n - x, x + 1))  # I_{1-p}(n - k, k + 1)
    return {"interval": [low, high], "p_value": p_value}



def group_shares(inside: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """Each group's share of rows ``inside``, in the order of the sorted distinct ``groups`` (``np.unique``'s)."""
    codes = np.unique(np.asarray(groups), return_inverse=True)[1].ravel()
    return np.bincount(codes, weights=inside) / np.bincount(codes)



def coverage_interval(inside: np.ndarray, level: float, groups: np.ndarray | None = None,
                      confidence: float = 0.95) -> dict:
    """Test coverage as the guarantee counts it, its exact interval, and where ``level`` lies against it.

    Without ``groups`` the unit is the row: ``hits`` of ``inside`` out of n rows. With ``groups`` (each row's
    unit: a position, a phone) the guarantee is for a row of a new group, so the estimate is the mean of the
    groups' inside shares (each group weighs the same) and n the number of groups; the interval is
    :func:`binomial`'s with the real-valued hits estimate x n. A mean of n shares in [0, 1] has a variance
    of at most p (1 - p) / n, the binomial's: the interval is at least as wide as the groups need, where one
    over rows would be far too narrow (ten readings of one position are one draw, not ten).

    The interval counts the test rows' chance alone (the calibration's own draw adds to it, which is what the
    guarantee averages over). ``verdict``: ``"short"`` (the interval ends below the level: a shortfall beyond
    chance), ``"above"`` (it starts above: more coverage than asked, regions larger than needed),
    ``"inconclusive"`` (the level lies inside, but so does a shortfall of more than ``tolerance``: too few test
    units to tell; ``needed``: how many would tell, :func:`units_to_tell`) or ``"within"`` (the level lies
    inside and the interval rules out a shortfall beyond ``tolerance``, :func:`shortfall_tolerance`).
    """
    inside = np.asarray(inside, dtype=bool)
    if groups is None:
        unit, n, estimate = "rows", int(inside.size), float(inside.mean()) if inside.size else float("nan")
    else:
        shares = group_shares(inside, groups)
        unit, n, estimate = "groups", int(shares.size), float(shares.mean())
    test = binomial(estimate * n, n, level, confidence)
    low, high = test["interval"]
    tolerance = shortfall_tolerance(level)
    verdict = "short" if high < level else "above" if low > level else \
        "inconclusive" if low < level - tolerance - 1e-12 else "within"
    return {"unit": unit, "n": n, "estimate": estimate, "level": float(level), "confidence": confidence,
            "interval": [low, high], "p_value": test["p_value"], "verdict": verdict, "tolerance": tolerance,
            "needed": units_to_tell(level, confidence) if verdict == "inconclusive" else None}



def shortfall_tolerance(level: float) -> float:
    """The shortfall a verdict of "no shortfall" must rule out: half the promised miscoverage, at most 5 points
    (0.05 at 0.9: the error rate at most 1.5 times the promised one)."""
    return min(0.05, (1.0 - float(level)) / 2)



def units_to_tell(level: float, confidence: float = 0.95, most: int = 100_000) -> int:
    """The fewest test units (rows, or groups) whose exact interval, at a coverage equal to ``level``, rules out
    a shortfall beyond :func:`shortfall_tolerance`: the size at which a test part can say "no shortfall"."""
    floor = level - shortfall_tolerance(level)
    lo, hi = 1, most
    while lo < hi:  # the interval's low end at hits = level n rises with n
        mid = (lo + hi) // 2
        if binomial(level * mid, mid, level, confidence)["interval"][0] >= floor:
            hi = mid
        else:
            lo = mid + 1
    return lo


@dataclass(frozen=True)
class Units:
    """What an interval counts: ``name`` (``"rows"``, ``"positions"``, ``"PHONEID units"``), each row's unit
    (``labels``; ``None`` for rows), and whether it was chosen for the walk (``automatic``)."""

    name: str
    labels: np.ndarray | None = None
    automatic: bool = False

    def of(self, mask) -> np.ndarray | None:
        return None if self.labels is None else (self.labels if mask is None else self.labels[mask])

    def record(self) -> dict:
        n = None if self.labels is None else int(np.unique(self.labels).size)
        return {"unit": self.name, "n": n, "automatic": self.automatic}


def unit_test(inside: np.ndarray, level: float, labels: np.ndarray | None) -> dict:
    """Coverage over ``labels``' units (rows for ``None``): the estimate, its exact interval and the one-sided
    p-value of a shortfall against ``level``."""
    if labels is None:
        hits, n = int(inside.sum()), int(inside.size)
        test = binomial(hits, n, level)
        return {"coverage": hits / n, "interval": test["interval"], "p_value": test["p_value"]}
    test = coverage_interval(inside, level, labels)
    return {"coverage": test["estimate"], "interval": test["interval"], "p_value": test["p_value"]}
