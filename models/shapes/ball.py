"""Ball: the identity shape, whose calibrated region is a ball (a disc in the plane) around the centre."""

from __future__ import annotations

import numpy as np

from models.shapes.ge import GaussianEllipsoid


class IsotropicBall(GaussianEllipsoid):
    """A constant ball: ``C = I``, so a row's score is its squared Euclidean residual and the region
    calibrated at ``alpha_q`` the ball of radius ``sqrt(alpha_q)`` around the centre (at ``eta``, the
    conformal quantile of the calibration rows' distances).

    Why a ball beside GE: when a few residuals are very large (a reading put in the wrong building) they set
    GE's second moment, stretching it along the line they fall on; the calibrated ellipse must then reach the
    typical errors across its short axis, and its area grows with the aspect ratio. The ball has no axis to
    stretch (``tests/models/shapes/test_ball.py`` builds that case), and the served-method choice
    (:mod:`training.pipeline.served_volume`) serves it where its expected calibrated volume is the smallest, as any
    ellipsoid method.

    Why the identity and not a fitted scale (``tr S / n``, which calibrated gives the same region): a shape
    that does not depend on the data scores every fold of a cross-fit on one scale. Across units
    (``--calibrate-across``) each unit fold refits the shapes; fitted scales differ by fold (a fold holding a
    phone the others locate badly has the larger), and the folds' scores, each divided by its fold's scale,
    mix scales, and the calibrated region grows.

    Attributes
    ----------
    covariance_ : ndarray (n, n), the identity
    """

    def fit(self, X, R) -> "IsotropicBall":
        super().fit(X, R)  # the input checks and the fitted sizes
        self.covariance_ = np.eye(self.covariance_.shape[0])
        return self
