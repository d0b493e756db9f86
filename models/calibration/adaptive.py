"""Online adjustment of the served level from labelled feedback, for coverage under drift.

Two rules, one interface (:class:`OnlineRule`: a state, the level or threshold it serves, and
``update`` with the next feedback row's conformity score):

* :class:`AdaptiveConformal` (adaptive conformal inference, Gibbs & Candes, NeurIPS 2021). It
  keeps a miscoverage ``a_t`` and serves the calibrated region at level ``1 - a_t``::

      a_{t+1} = a_t + gamma * (a - err_t),   err_t = 1 if the point fell outside, else 0

  with ``a = 1 - target``. For any sequence, ``|mean_t err_t - a| <= (max(a_1, 1 - a_1) + gamma) /
  (gamma T)`` when the region at ``a_t <= 0`` is the whole space. The service cannot answer the
  whole space, so it clips the level to ``[min_level, max_coverage]`` (``m / (m + 1)``); the bound
  then holds as long as the largest calibration score still covers, which the drift benchmark
  checks rather than assumes.
* :class:`QuantileTracker` (the P part of conformal PID control, Angelopoulos, Candes & Tibshirani,
  NeurIPS 2023): it tracks the threshold in score space, ``q_{t+1} = q_t + lr * B_t * (err_t - a)``
  (``B_t`` the largest score seen), with no ceiling from the calibration set. The service serves ACI.

Both are plain Python over floats so that a state can live in a database row between requests.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Protocol

import numpy as np


class OnlineRule(Protocol):
    """What the service asks of an online rule: the threshold it serves now, and an update per feedback row."""

    def threshold(self) -> float:
        """The threshold on conformity scores served now."""

    def update(self, score: float) -> bool:
        """Take the next labelled row's conformity score.

        Parameters
        ----------
        score : float
            The row's conformity score under the served method.

        Returns
        -------
        bool
            Whether it fell outside the region served before the update (``err_t``).
        """


@dataclass
class AdaptiveConformal:
    """ACI over a calibrated quantile function.

    Parameters
    ----------
    target : float
        The coverage to track (the bundle's level).
    quantile : callable
        ``level -> alpha_q``, the calibrated threshold at a level (``calibrator.quantile``).
    gamma : float, default=0.005
        Step size: larger reacts faster and fluctuates more.
    min_level : float, default=0.5
        The lowest level served: ``1 - alpha`` is clipped to ``[min_level, max_level]``.
    max_level : float, default=1.0
        The highest level served: the calibration's ``m / (m + 1)``.
    alpha : float or None, default=None
        The state ``a_t``; ``None`` starts at ``1 - target``.
    """

    target: float
    quantile: Callable[[float], float]
    gamma: float = 0.005
    min_level: float = 0.5
    max_level: float = 1.0
    alpha: float | None = None

    def __post_init__(self):
        if self.alpha is None:
            self.alpha = 1.0 - self.target

    @property
    def level(self) -> float:
        """The level served now: ``1 - a_t`` clipped to ``[min_level, max_level]``."""
        return clip_level(1.0 - self.alpha, self.min_level, self.max_level)

    def threshold(self) -> float:
        """The calibrated threshold at the level served now.

        Returns
        -------
        float
            ``quantile(level)``.
        """
        return self.quantile(self.level)

    def update(self, score: float) -> bool:
        """Take the next labelled row's score and move the miscoverage: ``a += gamma (1 - target - err)``.

        Parameters
        ----------
        score : float
            The row's conformity score.

        Returns
        -------
        bool
            Whether it fell outside the region served before the update.
        """
        miss = bool(score > self.threshold())
        self.alpha += self.gamma * ((1.0 - self.target) - float(miss))
        return miss


@dataclass
class QuantileTracker:
    """Online quantile tracking of the threshold (conformal P control).

    ``q`` starts at the calibrated threshold ``q0``. Each step moves it by ``lr`` times the largest
    score seen so far (``q0`` before any), the scale-free step of Angelopoulos et al.: a step in
    fixed score units would crawl when the scores under drift are orders of magnitude above ``q0``.

    Parameters
    ----------
    target : float
        The coverage to track.
    q0 : float
        The calibrated threshold at ``target``.
    lr : float, default=0.05
        Step size, in units of the largest score seen.
    q : float or None, default=None
        The state ``q_t``; ``None`` starts at ``q0``.
    scale : float or None, default=None
        The largest score seen; ``None`` starts at ``q0``.
    """

    target: float
    q0: float
    lr: float = 0.05
    q: float | None = None
    scale: float | None = None

    def __post_init__(self):
        if self.q is None:
            self.q = float(self.q0)
        if self.scale is None:
            self.scale = float(self.q0)

    def threshold(self) -> float:
        """The threshold served now.

        Returns
        -------
        float
            ``q_t``, kept above ``1e-6 q0`` (a zero threshold would be a degenerate region).
        """
        return max(self.q, 1e-6 * float(self.q0))

    def update(self, score: float) -> bool:
        """Take the next labelled row's score: ``q += lr * scale * (err - (1 - target))``.

        Parameters
        ----------
        score : float
            The row's conformity score; a non-finite one does not move the scale.

        Returns
        -------
        bool
            Whether it fell outside the region served before the update.
        """
        miss = bool(score > self.threshold())
        if math.isfinite(score):
            self.scale = max(self.scale, float(score))
        self.q += self.lr * self.scale * (float(miss) - (1.0 - self.target))
        return miss


def clip_level(level: float, lo: float, hi: float) -> float:
    """A level clipped to an interval.

    Parameters
    ----------
    level : float
        The level.
    lo : float
        The lowest allowed.
    hi : float
        The highest allowed.

    Returns
    -------
    float
    """
    return float(min(max(level, lo), hi))


def run_stream(rule, scores, served: Callable | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Feed scores to a rule in order.

    Parameters
    ----------
    rule : OnlineRule
        The rule, updated in place.
    scores : array-like of shape (T,)
        The rows' conformity scores, in order.
    served : callable, default=None
        ``served(rule)``: what to record before each update; ``None`` records the threshold.

    Returns
    -------
    misses : ndarray of shape (T,) of bool
        Each row outside the region served to it.
    served : ndarray of shape (T,)
        What was served to each row, taken before its update.
    """
    s = np.asarray(scores, dtype=np.float64).ravel()
    misses = np.empty(s.size, dtype=bool)
    values = np.empty(s.size)
    for t, score in enumerate(s):
        values[t] = rule.threshold() if served is None else served(rule)
        misses[t] = rule.update(score)
    return misses, values


def aci_bound(target: float, gamma: float, steps: int, alpha0: float | None = None) -> float:
    """Gibbs and Candes' bound on the miscoverage's distance from its target (unclipped levels).

    Parameters
    ----------
    target : float
        The coverage tracked.
    gamma : float
        The step size.
    steps : int
        Rows seen.
    alpha0 : float, default=None
        The starting miscoverage; ``None``: ``1 - target``.

    Returns
    -------
    float
        ``(max(a_1, 1 - a_1) + gamma) / (gamma T)`` bounding ``|mean err - (1 - target)|``; ``inf`` before any row.
    """
    a1 = 1.0 - target if alpha0 is None else alpha0
    return math.inf if steps <= 0 else (max(a1, 1.0 - a1) + gamma) / (gamma * steps)
