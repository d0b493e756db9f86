"""An online conformal test of exchangeability over a stream of query scores, with a false-alarm bound.

Each query's nonconformity score (its typicality score, :mod:`models.typicality`) is ranked among the
calibration scores *and every earlier query's* (the bag grows): under exchangeability of the calibration
rows and the stream, these smoothed conformal p-values are independent and uniform on [0, 1] (Vovk,
Nouretdinov and Gammerman, "Testing exchangeability on-line", ICML 2003).

The bag is kept as counts over fixed bins (``edges``, which must depend on nothing the test ranks:
:class:`models.typicality.Typicality` takes them from the train part's scores); scores are ranked by their
bin, ties within a bin smoothed, so the p-values stay exactly uniform and a test's state is a few hundred
integers and three floats whatever the stream's length.

A betting martingale multiplies its capital by ``f(p)`` per query (``f >= 0``, integrating to 1), so by
Ville's inequality ``P(the capital ever reaches 1 / delta) <= delta``. The bettor is Vovk's Simple Jumper,
one-sided: bets ``f_l(p) = 1 + l (1 - 2 p)`` for ``l`` in ``BETS``, a share ``jump`` of the capital moving
between them after each query. Large p-values (queries *more* typical than the calibration's) raise no
alarm. With a ``tolerance`` ``e`` the bets are ``1 + l (1 - 2 e - 2 p)`` (``l`` scaled by ``1 / (1 + 2 e)``):
the capital is a supermartingale whenever each query's p-value has conditional mean at least ``0.5 - e``,
so Ville's bound holds for that composite null too. ``docs/concepts/shift-alarm.md`` explains the choice."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from models.exceptions import InputError

#: the one-sided bets: 0 (keep the capital), a half and a full bet on small p-values
BETS = (0.0, 0.5, 1.0)
#: the default tolerance (see the module)
TOLERANCE = 0.075


@dataclass(eq=False)
class ShiftTest:
    """A conformal test martingale over the scores of a stream of queries.

    Parameters
    ----------
    calibration : array-like of shape (n,)
        The calibration rows' scores (larger: less typical), finite.
    edges : array-like of shape (b,)
        Increasing, finite bin edges; a score's bin is the number of edges at or below it.
    delta : float, default=0.01
        The false-alarm level: the alarm sounds when the evidence reaches ``1 / delta``.
    tolerance : float, default=0.075
        How far below 0.5 the queries' mean p-value may lie before the evidence grows (see the module).
    jump : float, default=0.01
        The share of capital moved between the bets after each query.
    seed : int, default=0
        Seeds the smoothing of tied ranks.

    Attributes
    ----------
    counts_ : ndarray of shape (b + 1,)
        The bag's scores per bin: the calibration's and every query's so far.
    capital_ : ndarray of shape (len(BETS),)
        Each bet's capital; ``evidence`` is their sum (1 at the start).
    queries_ : int
        The queries seen.
    alarm_at_ : int or None
        The query at which the evidence first reached ``1 / delta`` (``None`` until then).

    Raises
    ------
    InputError
        ``delta`` outside (0, 1), ``tolerance`` outside [0, 0.5), ``jump`` outside [0, 1], edges that are not
        finite and increasing, or calibration scores that are empty or not finite.
    """

    calibration: np.ndarray
    edges: np.ndarray
    delta: float = 0.01
    tolerance: float = TOLERANCE
    jump: float = 0.01
    seed: int = 0
    counts_: np.ndarray = field(init=False, repr=False)
    capital_: np.ndarray = field(init=False, repr=False)
    queries_: int = field(init=False, default=0)
    alarm_at_: int | None = field(init=False, default=None)

    def __post_init__(self):
        check_delta(self.delta)
        t = self.tolerance
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0.0 <= t < 0.5:
            raise InputError(f"the shift test's tolerance must be in [0, 0.5); got {t!r}", field="tolerance",
                             expected="a number in [0, 0.5)", received=repr(t))
        if isinstance(self.jump, bool) or not isinstance(self.jump, (int, float)) or not 0.0 <= self.jump <= 1.0:
            raise InputError(f"the shift test's jump must be in [0, 1]; got {self.jump!r}", field="jump",
                             expected="a number in [0, 1]", received=repr(self.jump))
        edges = np.asarray(self.edges, dtype=np.float64).ravel()
        if not len(edges) or not np.isfinite(edges).all() or np.any(np.diff(edges) <= 0):
            raise InputError("the shift test's edges must be finite and increasing", field="edges",
                             expected="an increasing array of finite numbers", received=f"{len(edges)} values")
        cal = np.asarray(self.calibration, dtype=np.float64).ravel()
        if not len(cal) or not np.isfinite(cal).all():
            raise InputError("the shift test needs finite calibration scores", field="calibration",
                             expected="a non-empty array of finite scores", received=f"{len(cal)} scores")
        self.edges = edges
        self.counts_ = np.bincount(self.bins(cal), minlength=len(edges) + 1).astype(np.int64)
        self.capital_ = np.full(len(BETS), 1.0 / len(BETS))
        self._rng = np.random.default_rng(self.seed)

    def bins(self, scores) -> np.ndarray:
        """Each score's bin.

        Parameters
        ----------
        scores : array-like of shape (N,)
            Scores.

        Returns
        -------
        ndarray of shape (N,)
            How many edges lie at or below each score.
        """
        return np.searchsorted(self.edges, np.asarray(scores, dtype=np.float64), side="right")

    @property
    def bets(self) -> tuple[float, ...]:
        """:data:`BETS` scaled by ``1 / (1 + 2 tolerance)``: every bet's factor stays non-negative."""
        return tuple(b / (1.0 + 2.0 * self.tolerance) for b in BETS)

    @property
    def evidence(self) -> float:
        """The capital over all bets: the evidence against exchangeability (1 at the start)."""
        return float(self.capital_.sum())

    @property
    def alarm(self) -> bool:
        """Whether the evidence has ever reached ``1 / delta``."""
        return self.alarm_at_ is not None

    def update(self, scores) -> np.ndarray:
        """Take a batch of queries' scores, in order, and bet on their p-values.

        Parameters
        ----------
        scores : array-like of shape (N,)
            The queries' scores; a non-finite one is skipped (no evidence either way).

        Returns
        -------
        ndarray of shape (N,)
            Their smoothed conformal p-values among the bag (``nan`` where skipped).
        """
        scores = np.asarray(scores, dtype=np.float64).ravel()
        out = np.full(len(scores), np.nan)
        ok = np.flatnonzero(np.isfinite(scores))
        if not len(ok):
            return out
        b = self.bins(scores[ok])
        above_bag = np.concatenate([np.cumsum(self.counts_[::-1])[::-1][1:], [0]])  # in higher bins
        earlier = np.tri(len(b), k=-1, dtype=bool)  # [i, j]: j came before i in this batch
        above = above_bag[b] + (earlier & (b[None, :] > b[:, None])).sum(axis=1)
        ties = self.counts_[b] + (earlier & (b[None, :] == b[:, None])).sum(axis=1)
        n = int(self.counts_.sum()) + np.arange(len(b))
        p = (above + self._rng.random(len(b)) * (ties + 1)) / (n + 1)
        np.add.at(self.counts_, b, 1)
        out[ok] = p
        self._bet(p)
        return out

    def _bet(self, p: np.ndarray) -> None:
        """The Simple Jumper over the p-values ``p`` in order (plain floats: a step is about a microsecond)."""
        capital = [float(c) for c in self.capital_]
        jump, share, threshold = self.jump, 1.0 / len(BETS), 1.0 / self.delta
        bets, edge = self.bets, 1.0 - 2.0 * self.tolerance
        for pi in p.tolist():
            total = sum(capital)
            capital = [((1.0 - jump) * c + jump * total * share) * (1.0 + bet * (edge - 2.0 * pi))
                       for c, bet in zip(capital, bets)]
            self.queries_ += 1
            if self.alarm_at_ is None and sum(capital) >= threshold:
                self.alarm_at_ = self.queries_
        self.capital_ = np.asarray(capital)

    def summary(self) -> dict:
        """The test as the service reports it.

        Returns
        -------
        dict
            ``evidence``, ``alarm``, ``queries``, ``delta`` and ``tolerance``.
        """
        return {"evidence": self.evidence, "alarm": self.alarm, "queries": self.queries_, "delta": self.delta,
                "tolerance": self.tolerance}

    # ------------------------------------------------------------------ state (shared by a fleet)
    def state(self) -> dict:
        """The test's state as JSON, what :meth:`restore` reads (shared by a fleet).

        Returns
        -------
        dict
            ``counts``, ``capital``, ``queries`` and ``alarm_at``.
        """
        return {"counts": self.counts_.tolist(), "capital": self.capital_.tolist(), "queries": self.queries_,
                "alarm_at": self.alarm_at_}

    def restore(self, state: dict) -> "ShiftTest":
        """Set the test to a state :meth:`state` gave.

        Parameters
        ----------
        state : dict
            ``counts``, ``capital``, ``queries`` and ``alarm_at``.

        Returns
        -------
        self : ShiftTest

        Raises
        ------
        InputError
            The state is another test's: its bins differ.
        """
        counts = np.asarray(state["counts"], dtype=np.int64)
        if counts.shape != self.counts_.shape:
            raise InputError(f"the shift test's state has {counts.size} bins; this test has {self.counts_.size}",
                             field="counts", expected=f"{self.counts_.size} bins", received=str(counts.size))
        self.counts_, self.capital_ = counts, np.asarray(state["capital"], dtype=np.float64)
        self.queries_, self.alarm_at_ = int(state["queries"]), state["alarm_at"]
        return self


def check_delta(delta) -> float:
    """A false-alarm level, checked.

    Parameters
    ----------
    delta : float
        The level.

    Returns
    -------
    float
        ``delta``, in (0, 1).

    Raises
    ------
    InputError
        ``delta`` is not a number in (0, 1).
    """
    if isinstance(delta, bool) or not isinstance(delta, (int, float)) or not 0.0 < delta < 1.0:
        raise InputError(f"the shift test's delta must be in (0, 1); got {delta!r}", field="delta",
                         expected="a number in (0, 1)", received=repr(delta))
    return float(delta)
