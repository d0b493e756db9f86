"""Centre models ``mu(x)``, one module per kind, behind one interface (:mod:`models.centres.base`).

:class:`SVRCentre` is the paper's (one RBF SVR per target); :class:`KNNCentre` weighted
k-nearest-neighbour fingerprinting, its search in :mod:`models.centres.search`; :class:`FingerprintCentre` the
same on the RSSI readings, in a representation chosen by leaving units out; :class:`HGBCentre`
gradient-boosted trees evaluated in numpy; :class:`MLPCentre` a small ReLU network trained with the
batched torch trainer (:mod:`models.nn.lockstep`) and served as plain arrays; :class:`GPCentre` a Gaussian
process's posterior mean with a length scale per feature; :class:`StackCentre`
a non-negative least-squares blend of the others; :class:`ClientCentre` the client's own estimate and
:class:`ConstantCentre` the training mean, for reference. A new kind is a module here plus one line in
:data:`models.centres.kinds.KINDS`.
"""

from models.centres.client import ClientCentre
from models.centres.constant import ConstantCentre
from models.centres.fingerprint import FingerprintCentre
from models.centres.gp import GPCentre
from models.centres.hgb import HGBCentre
from models.centres.knn import KNNCentre
from models.centres.mlp import MLPCentre
from models.centres.stack import StackCentre
from models.centres.svr import SVRCentre

__all__ = ["ClientCentre", "ConstantCentre", "FingerprintCentre", "GPCentre", "HGBCentre", "KNNCentre", "MLPCentre", "StackCentre", "SVRCentre"]
