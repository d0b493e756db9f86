"""Calibration: the conformal rules that turn scores into a guaranteed threshold.

:mod:`models.calibration.conformal` holds the finite-sample quantile (written once), the
calibration rules (rows, one score per group) and :class:`SplitConformalCalibrator`;
:mod:`models.calibration.adaptive` the online rules that follow a drifting stream. Recalibrating a
fitted model calls the model, so it lives above it, in :mod:`models.recalibration`.
"""

from models.calibration.conformal import SplitConformalCalibrator, conformal_quantile

__all__ = ["SplitConformalCalibrator", "conformal_quantile"]
