"""lmve.models: the maths shared by training and service.

Ellipsoid geometry, the four shape methods (GE, NLE, LMVE, Copula), the centres, the
registry that lists them, split-conformal calibration, the region model (the checked boundary)
and the calibrated bundle format. Nothing here imports torch at import time: LMVE's training
imports it inside ``LMVEShape.fit``.
"""

from models.centres import KNNCentre, SVRCentre
from models.calibration import SplitConformalCalibrator, conformal_quantile
from models.exceptions import BundleError, InputError, LMVEError, NotFittedError
from models.model import RegionModel
from models.predictor import SplitConformalRegressor
from models.regions import BoxRegions, EllipsoidRegions
from models.shapes import (
    EmpiricalCopulaBox,
    GaussianEllipsoid,
    IsotropicBall,
    LMVEShape,
    NearestNeighbourEllipsoid,
)

__all__ = [
    "RegionModel", "SVRCentre", "KNNCentre", "SplitConformalCalibrator", "conformal_quantile", "BundleError", "InputError",
    "LMVEError", "NotFittedError", "SplitConformalRegressor", "BoxRegions", "EllipsoidRegions",
    "EmpiricalCopulaBox", "GaussianEllipsoid", "IsotropicBall", "LMVEShape", "NearestNeighbourEllipsoid",
]
