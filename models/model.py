"""A calibrated region model: raw features in, calibrated regions out.

It holds what a bundle holds (scaler, shared centre, one calibrated regressor per method)
and is what the service serves. Features arrive raw; the stored scaler standardises them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from models._validation import check_coverage, check_matrix
from models.exceptions import InputError
from models.predictor import SplitConformalRegressor

#: the order in which methods are preferred when the primary one is missing
FALLBACK_ORDER = ("lmve", "nle", "ge")


@dataclass
class RegionModel:
    """Scaler + centre + calibrated methods.

    Attributes
    ----------
    feature_names, target_names : list of str
    scaler_mean, scaler_scale : ndarray (d,)
        ``x_std = (x_raw - mean) / scale`` (``scale = 1`` for constant training columns).
    methods : dict of str -> SplitConformalRegressor
        Calibrated regressors sharing one prefit centre.
    coverage : float
        The default level ``eta``.
    manifest : dict
        Metadata (written to / read from ``manifest.json`` by :mod:`models.bundle`).
    """

    feature_names: list[str]
    target_names: list[str]
    scaler_mean: np.ndarray
    scaler_scale: np.ndarray
    methods: dict[str, SplitConformalRegressor]
    coverage: float
    manifest: dict = field(default_factory=dict)

    @property
    def n_features(self) -> int:
        return len(self.feature_names)

    @property
    def n_targets(self) -> int:
        return len(self.target_names)

    @property
    def primary_method(self) -> str:
        """The best available ellipsoid method: LMVE, else NLE, else GE."""
        for name in FALLBACK_ORDER:
            if name in self.methods:
                return name
        raise InputError(f"the model has no ellipsoid method; it has {sorted(self.methods)}")

    @property
    def centre(self):
        return next(iter(self.methods.values())).centre_

    def resolve_method(self, method: str | None) -> str:
        if method is None:
            return self.primary_method
        if method not in self.methods:
            raise InputError(f"method must be one of {sorted(self.methods)}; got {method!r}")
        return method

    def standardise(self, X_raw, name: str = "features") -> np.ndarray:
        """Check raw features (N, d) and apply the training scaler."""
        X = check_matrix(X_raw, name, n_columns=self.n_features, owner="the bundle")
        return (X - self.scaler_mean) / self.scaler_scale

    def predict_region(self, X_raw, method: str | None = None, coverage: float | None = None):
        """Calibrated regions of ``method`` (default: primary) for raw features (N, d)."""
        X = self.standardise(X_raw)
        eta = None if coverage is None else check_coverage(coverage)
        reg = self.methods[self.resolve_method(method)]
        return reg.predict_region(X, coverage=eta)

    def predict_center(self, X_raw) -> np.ndarray:
        return self.centre.predict(self.standardise(X_raw))

    def p_value(self, X_raw, points, method: str | None = None) -> np.ndarray:
        """(N,) conformal p-values of ``points`` given raw features (see :meth:`assess`)."""
        return self.assess(X_raw, points, method)[2]

    def threshold(self, method: str | None = None, coverage: float | None = None) -> float:
        """``alpha_q`` of ``method`` at ``coverage`` (default: the bundle's level)."""
        reg = self.methods[self.resolve_method(method)]
        return reg.alpha_q_ if coverage is None else reg.calibrator_.quantile(check_coverage(coverage))

    def assess(self, X_raw, points, method: str | None = None, coverage: float | None = None):
        """Score candidate points once: ``(inside, distance, p_value)``, each (N,).

        ``distance = score / alpha_q`` (``<= 1`` inside the calibrated region, 0 for an unbounded one)
        and ``p_value`` from the same score, so the two always agree.
        """
        X = self.standardise(X_raw)
        P = check_matrix(points, "points", n_columns=self.n_targets, owner="the bundle")
        if P.shape[0] != X.shape[0]:
            raise InputError(f"points has {P.shape[0]} rows but features has {X.shape[0]}; they must match")
        name = self.resolve_method(method)
        reg = self.methods[name]
        scores = reg.conformity_scores(X, P)
        alpha = self.threshold(name, coverage)
        distance = scores / alpha if np.isfinite(alpha) else np.zeros_like(scores)
        return distance <= 1.0, distance, reg.calibrator_.p_value(scores)
