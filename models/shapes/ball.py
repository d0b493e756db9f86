"""Ball: one isotropic shape, the mean squared residual per target dimension."""

from __future__ import annotations

import numpy as np

from models.shapes.ge import GaussianEllipsoid


class IsotropicBall(GaussianEllipsoid):
    """A constant ball: ``C = (tr S / n) I`` with ``S = (1/m) sum_i r_i r_i^T`` the residuals' second moment
    about the centre (GE's), so its score is the squared Euclidean distance over ``tr S / n`` and its
    calibrated region the disc (ball) of radius ``sqrt(alpha_q tr S / n)`` around the centre.

    Calibrated, any positive multiple of the identity serves the same region; ``tr S / n`` only makes the
    score comparable to GE's. Why a ball beside GE: when a few residuals are very large (a reading put in the
    wrong building) they set GE's second moment, stretching it along the line they fall on; the calibrated
    ellipse must then reach the typical errors across its short axis, and its area grows with the aspect
    ratio. The ball has no axis to stretch (``tests/models/shapes/test_ball.py`` builds that case), and the
    served-method choice (:mod:`training.primary`) serves it where its expected calibrated volume is the
    smallest, as any ellipsoid method.

    Attributes
    ----------
    covariance_ : ndarray (n, n), a multiple of the identity
    """

    def fit(self, X, R) -> "IsotropicBall":
        super().fit(X, R)
        n = self.covariance_.shape[0]
        self.covariance_ = np.trace(self.covariance_) / n * np.eye(n)
        return self
