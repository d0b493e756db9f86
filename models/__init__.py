"""lmve.models: the maths shared by training and service.

Ellipsoid geometry, the four shape methods (GE, NLE, LMVE, Copula), the SVR centre,
split-conformal calibration and the calibrated bundle format.
"""

from models.centre import SVRCentre
from models.conformal import SplitConformalCalibrator, conformal_quantile
from models.exceptions import BundleError, InputError, LMVEError, NotFittedError
from models.predictor import SplitConformalRegressor
from models.regions import BoxRegions, EllipsoidRegions
from models.shapes import (
    EmpiricalCopulaBox,
    GaussianEllipsoid,
    LMVEShape,
    NearestNeighbourEllipsoid,
)

__all__ = [
    "SVRCentre", "SplitConformalCalibrator", "conformal_quantile", "BundleError", "InputError",
    "LMVEError", "NotFittedError", "SplitConformalRegressor", "BoxRegions", "EllipsoidRegions",
    "EmpiricalCopulaBox", "GaussianEllipsoid", "LMVEShape", "NearestNeighbourEllipsoid",
]
