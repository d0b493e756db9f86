"""Shape methods: GE, the ball, NLE, LMVE (ellipsoids) and the Copula baseline (boxes)."""

from models.shapes.ball import IsotropicBall
from models.shapes.base import EllipsoidShapeEstimator, ShapeEstimator
from models.shapes.copula import EmpiricalCopulaBox
from models.shapes.ge import GaussianEllipsoid
from models.shapes.lmve import LMVEShape
from models.shapes.nle import NearestNeighbourEllipsoid

__all__ = [
    "ShapeEstimator",
    "EllipsoidShapeEstimator",
    "GaussianEllipsoid",
    "IsotropicBall",
    "NearestNeighbourEllipsoid",
    "LMVEShape",
    "EmpiricalCopulaBox",
]
