"""The single centre kinds by name: what ``lmve-train --centre`` offers, and what a stacked centre
(:mod:`models.centres.stack`) blends.

:data:`KINDS` maps a name to a :class:`CentreSpec` (a class and its parameters); :data:`TYPES` maps
the class name a bundle records to the class. :mod:`models.registry` adds the stack to both; the
stack reads them from here, so neither imports the other's importer.
"""

from __future__ import annotations

from dataclasses import dataclass, field

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
    """A centre choice of ``lmve-train --centre``: a centre class and its parameters."""

    name: str
    description: str
    estimator: type
    params: dict = field(default_factory=dict)
    #: reproduces its own training rows (kNN): its in-sample residuals are zero, so shapes must learn
    #: from out-of-fold residuals
    interpolates: bool = False
    #: a lazy learner (kNN): fitting stores the rows, so ``centre="auto"``'s screen fits it on all of them
    #: (on fewer it would be judged as a sparser search, not as itself) at little cost
    lazy: bool = False

    def make(self, **overrides):
        return self.estimator(**{**self.params, **overrides})


KINDS: dict[str, CentreSpec] = {spec.name: spec for spec in (
    CentreSpec("scaled", "RBF SVR per target on standardised targets (epsilon in units of each target's std)",
               SVRCentre, {"scale_targets": True}),
    CentreSpec("paper", "the paper's RBF SVR per target (scikit-learn defaults, epsilon in target units)",
               SVRCentre, {}),
    CentreSpec("knn", "3 nearest training rows, weighted by inverse distance (fingerprint matching)",
               KNNCentre, {"n_neighbors": 3}, interpolates=True, lazy=True),
    CentreSpec("fingerprint", "weighted nearest neighbours on the RSSI readings (not the scaled columns), the "
               "representation, cutoff, k and weights chosen by leaving units out (the textbook 3-NN among them)",
               FingerprintCentre, {}, interpolates=True, lazy=True),
    CentreSpec("hgb", "gradient-boosted trees per target (scikit-learn's HistGradientBoostingRegressor)",
               HGBCentre, {}),
    CentreSpec("mlp", "a ReLU MLP (128, 64) on standardised targets, trained with the batched torch trainer",
               MLPCentre, {}),
    CentreSpec("gp", "a Gaussian process's posterior mean, one length scale per feature fitted by marginal "
               "likelihood (smooth targets, features that carry nothing)", GPCentre, {}),
)}

#: single centre classes by the name a bundle records
TYPES: dict[str, type] = {cls.__name__: cls for cls in (SVRCentre, KNNCentre, FingerprintCentre, HGBCentre, MLPCentre,
                                                        GPCentre, ClientCentre, ConstantCentre)}
