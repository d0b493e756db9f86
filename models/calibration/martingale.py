"""An online conformal test of exchangeability over a stream of query scores, with a false-alarm bound.

Each query's nonconformity score (its typicality score, :mod:`models.typicality`) is ranked among the
calibration scores *and every earlier query's* (the bag grows): under exchangeability of the
calibration rows and the stream, these smoothed conformal p-values are independent and uniform on
[0, 1] (Vovk, Nouretdinov and Gammerman, "Testing exchangeability on-line", ICML 2003). A betting
martingale multiplies its capital by ``f(p)`` per query, ``f >= 0`` integrating to 1 on [0, 1], so
under exchangeability its expected capital stays 1, and by Ville's inequality
``P(the capital ever reaches 1 / delta) <= delta``: an alarm at ``1 / delta`` is a false alarm with
probability at most ``delta``, however long the stream.

The bettor is Vovk's Simple Jumper, one-sided: bets ``f_l(p) = 1 + l (1 - 2 p)`` for ``l`` in
:data:`BETS` (``l > 0`` wins on small p-values, queries less typical than the calibration's), a share
``jump`` of the capital moving between them after each query so that a bettor who lost through a
long typical stretch still bets when the shift comes. Large p-values (queries *more* typical than the
calibration's, e.g. at surveyed positions) raise no alarm: they do not put the coverage at risk.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from models.exceptions import InputError

#: the one-sided bets: 0 (keep the capital), a half and a full bet on small p-values
BETS = (0.0, 0.5, 1.0)


@dataclass(eq=False)
class ShiftTest:
    """A conformal test martingale over the scores of a stream of queries.

    Parameters
    ----------
    calibration : (n,) the calibration rows' scores (larger: less typical)
    delta : float, default=0.01
        The false-alarm level: the alarm sounds when the evidence reaches ``1 / delta``.
    jump : float, default=0.01
        The share of capital moved between the bets after each query.
    seed : int, default=0
        Seeds the smoothing of tied ranks.

    Attributes
    ----------
    bag_ : sorted scores ranked against (the calibration's and every query's so far)
    capital_ : (len(BETS),) each bet's capital; ``evidence`` is their sum (1 at the start)
    queries_ : the queries seen; ``alarm_at_``: the query at which the evidence first reached
    ``1 / delta`` (``None`` until then)
    """

    calibration: np.ndarray
    delta: float = 0.01
    jump: float = 0.01
    seed: int = 0
    bag_: np.ndarray = field(init=False, repr=False)
    capital_: np.ndarray = field(init=False, repr=False)
    queries_: int = field(init=False, default=0)
    alarm_at_: int | None = field(init=False, default=None)

    def __post_init__(self):
        if isinstance(self.delta, bool) or not isinstance(self.delta, (int, float)) or not 0.0 < self.delta < 1.0:
            raise InputError(f"the shift test's delta must be in (0, 1); got {self.delta!r}", field="delta",
                             expected="a number in (0, 1)", received=repr(self.delta))
        if not 0.0 <= self.jump <= 1.0:
            raise InputError(f"the shift test's jump must be in [0, 1]; got {self.jump!r}", field="jump",
                             expected="a number in [0, 1]", received=repr(self.jump))
        cal = np.sort(np.asarray(self.calibration, dtype=np.float64).ravel())
        if not len(cal) or not np.isfinite(cal).all():
            raise InputError("the shift test needs finite calibration scores", field="calibration",
                             expected="a non-empty array of finite scores", received=f"{len(cal)} scores")
        self.bag_ = cal
        self.capital_ = np.full(len(BETS), 1.0 / len(BETS))
        self._rng = np.random.default_rng(self.seed)

    @property
    def evidence(self) -> float:
        return float(self.capital_.sum())

    @property
    def alarm(self) -> bool:
        return self.alarm_at_ is not None

    def update(self, scores) -> np.ndarray:
        """Take ``scores`` (a batch of queries, in order); returns their p-values."""
        scores = np.asarray(scores, dtype=np.float64).ravel()
        bets = np.asarray(BETS)
        out = np.empty(len(scores))
        threshold = 1.0 / self.delta
        for i, s in enumerate(scores):
            if not math.isfinite(s):  # an unscorable query is no evidence either way
                out[i] = np.nan
                continue
            lo, hi = np.searchsorted(self.bag_, s, "left"), np.searchsorted(self.bag_, s, "right")
            p = (len(self.bag_) - hi + self._rng.random() * (hi - lo + 1)) / (len(self.bag_) + 1)
            self.bag_ = np.insert(self.bag_, hi, s)
            total = self.capital_.sum()
            self.capital_ = (1.0 - self.jump) * self.capital_ + self.jump * total / len(bets)
            self.capital_ = self.capital_ * (1.0 + bets * (1.0 - 2.0 * p))
            self.queries_ += 1
            if self.alarm_at_ is None and self.capital_.sum() >= threshold:
                self.alarm_at_ = self.queries_
            out[i] = p
        return out

    def summary(self) -> dict:
        """``{"evidence", "alarm", "queries", "delta"}`` as the service reports it."""
        return {"evidence": self.evidence, "alarm": self.alarm, "queries": self.queries_, "delta": self.delta}
