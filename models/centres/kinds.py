"""The single centre kinds by name: what ``lmve-train --centre`` offers, and what a stacked centre
(:mod:`models.centres.stack`) blends.

:data:`KINDS` maps a name to a :class:`CentreSpec`, the one entry of a centre: its class and parameters, the
cost rate ``centre="auto"``'s budget reads, and its place among the default candidates. A spec refuses, when
it is made (at import), a class that is no complete :class:`~models.centres.base.Centre` or a missing cost.
:data:`TYPES` (the class name a bundle records -> the class) is derived from the kinds. :mod:`models.registry`
adds the stack to both; the stack reads them from here, so neither imports the other's importer.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass, field

from models.centres.base import Centre
from models.centres.client import ClientCentre
from models.centres.constant import ConstantCentre
from models.centres.fingerprint import FingerprintCentre
from models.centres.gp import GPCentre
from models.centres.hgb import HGBCentre
from models.centres.knn import KNNCentre
from models.centres.mlp import MLPCentre
from models.centres.svr import SVRCentre


@dataclass(frozen=True)
class CentreSpec:
    """A centre choice of ``lmve-train --centre``: a centre class and its parameters, and what training reads of
    it. Made at import: an incomplete entry fails there, naming what it lacks, not after a whole fit."""

    name: str
    description: str
    estimator: type
    params: dict = field(default_factory=dict)
    #: ``(seconds of a fit on 1,000 rows x 100 features on the reference machine, growth in rows)``: what
    #: training.calibration.centre_cost charges a fit; ``"members"``: its members' fits (the stack). Required.
    cost: tuple[float, float] | str | None = None
    #: its place among ``centre="auto"``'s default candidates (0 first); None: asked for by name only
    candidate: int | None = None
    #: reproduces its own training rows (kNN): its in-sample residuals are zero, so shapes must learn
    #: from out-of-fold residuals
    interpolates: bool = False
    #: a lazy learner (kNN): fitting stores the rows, so ``centre="auto"``'s screen fits it on all of them
    #: (on fewer it would be judged as a sparser search, not as itself) at little cost
    lazy: bool = False

    def __post_init__(self):
        check_entry(self, Centre)
        cost = self.cost
        if cost != "members" and not (isinstance(cost, tuple) and len(cost) == 2
                                      and all(isinstance(c, (int, float)) and math.isfinite(c) and c > 0 for c in cost)):
            raise TypeError(f"centre {self.name!r}: cost must be two positive numbers (seconds of a fit on 1,000 rows "
                            f"x 100 features, growth in rows), or 'members'; got {cost!r}")

    def make(self, **overrides):
        return self.estimator(**{**self.params, **overrides})


def check_entry(spec, base: type) -> None:
    """Refuse a registry entry (:class:`CentreSpec`, :class:`models.registry.MethodSpec`) without a name or words,
    or whose estimator is not a concrete subclass of ``base``: a ``TypeError`` naming what is missing."""
    if not spec.name or not (getattr(spec, "description", None) or getattr(spec, "label", None)):
        raise TypeError(f"registry entry {spec!r} needs a name and words")
    cls = spec.estimator
    if not (inspect.isclass(cls) and issubclass(cls, base)):
        raise TypeError(f"{spec.name!r}: {cls!r} is not a {base.__name__}")
    if inspect.isabstract(cls):
        raise TypeError(f"{spec.name!r}: {cls.__name__} does not implement "
                        f"{', '.join(sorted(cls.__abstractmethods__))} ({base.__name__}'s abstract methods)")


KINDS: dict[str, CentreSpec] = {spec.name: spec for spec in (
    CentreSpec("scaled", "RBF SVR per target on standardised targets (epsilon in units of each target's std)",
               SVRCentre, {"scale_targets": True}, cost=(0.0156, 1.95), candidate=1),
    CentreSpec("paper", "the paper's RBF SVR per target (scikit-learn defaults, epsilon in target units)",
               SVRCentre, {}, cost=(0.0033, 1.76), candidate=0),
    CentreSpec("knn", "3 nearest training rows, weighted by inverse distance (fingerprint matching)",
               KNNCentre, {"n_neighbors": 3}, interpolates=True, lazy=True, cost=(0.005, 0.7), candidate=2),
    CentreSpec("fingerprint", "weighted nearest neighbours on the RSSI readings (not the scaled columns), the "
               "representation, cutoff, k and weights chosen by leaving units out (the textbook 3-NN among them)",
               FingerprintCentre, {}, interpolates=True, lazy=True, cost=(0.01, 1.0), candidate=3),
    CentreSpec("hgb", "gradient-boosted trees per target (scikit-learn's HistGradientBoostingRegressor)",
               HGBCentre, {}, cost=(0.69, 0.55), candidate=4),
    CentreSpec("mlp", "a ReLU MLP (128, 64) on standardised targets, trained with the batched torch trainer",
               MLPCentre, {}, cost=(2.5, 0.1)),
    CentreSpec("gp", "a Gaussian process's posterior mean, one length scale per feature fitted by marginal "
               "likelihood (smooth targets, features that carry nothing)", GPCentre, {}, cost=(0.13, 1.3),
               candidate=5),
)}

#: ``centre="auto"``'s default candidates, in their order
CANDIDATES: tuple[str, ...] = tuple(s.name for s in sorted((s for s in KINDS.values() if s.candidate is not None),
                                                          key=lambda s: s.candidate))
#: single centre classes by the name a bundle records: every kind's, and those no flag chooses (a client's own
#: estimates, a constant)
TYPES: dict[str, type] = {cls.__name__: cls for cls in (*(s.estimator for s in KINDS.values()), ClientCentre,
                                                        ConstantCentre)}
