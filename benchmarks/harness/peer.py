"""The peer in the benchmark: MAPIE 1.6's multivariate standardised-residual score (``mapie-mvsr``).

MAPIE's ``MultivariateResidualNormalisedScore`` (``mapie.experimental``; Braun et al. 2025) trains its
own network (a ResNet MLP with a full-Cholesky covariance head, Gaussian NLL, AdamW) that learns the
mean ``mu(x)`` and the covariance ``Sigma(x)`` of the targets; its conformity score is
``|| Sigma(x)^{-1/2} (y - mu(x)) ||``. MAPIE returns scores, not regions, so :class:`MapieMVSR` reads the
region off them: the split-conformal threshold ``q`` of the calibration scores (the same
:func:`~models.calibration.conformal.conformal_quantile` as ours) gives the ellipsoid
``{y : (y - mu)^T Sigma^{-1} (y - mu) <= q^2}``, i.e. shape ``q^2 Sigma`` around ``mu``.

As in the issue's measurement, the network learns standardised targets (the train part's mean and
std); regions are mapped back to target units. MAPIE is the optional ``bench`` extra
(``pip install -e ".[bench]"``); it is imported in :meth:`MapieMVSR.fit` only.
"""

from __future__ import annotations

import numpy as np

from models import geometry
from models._validation import check_coverage, check_Xy
from models.centres.base import target_scaling
from models.calibration.conformal import conformal_quantile
from models.exceptions import LMVEError
from models.regions import EllipsoidRegions

#: the method's name in the benchmark (``--methods``)
PEER = "mapie-mvsr"


def _import_score():
    try:
        from mapie.experimental import MultivariateResidualNormalisedScore
    except ImportError as exc:  # pragma: no cover - the bench extra is installed by scripts/setup.sh
        raise LMVEError(f"the peer method {PEER} needs MAPIE 1.6 (mapie.experimental): pip install -e '.[bench]' "
                        f"({exc})") from None
    return MultivariateResidualNormalisedScore


class MapieMVSR:
    """``fit`` -> ``conformalize`` -> ``predict_region`` around MAPIE's multivariate standardised residuals.

    Parameters
    ----------
    coverage : float
    seed : int
        Seeds torch (the network's initialisation and batches) for this fit.
    num_epochs, batch_size, lr : MAPIE's ``Trainer.fit`` settings (its defaults: 300, 32, 1e-3).
    """

    def __init__(self, coverage: float = 0.9, seed: int = 0, num_epochs: int = 300, batch_size: int = 32,
                 lr: float = 1e-3):
        self.coverage = coverage
        self.seed = seed
        self.num_epochs = num_epochs
        self.batch_size = batch_size
        self.lr = lr

    def fit(self, X, Y) -> "MapieMVSR":
        import torch

        X, Y = check_Xy(X, Y, y_name="Y", min_rows=10)
        score_cls = _import_score()
        self.y_mean_, self.y_scale_ = target_scaling(Y)
        torch.manual_seed(self.seed)
        self.score_ = score_cls(random_state=self.seed).fit(
            X.astype(np.float32), ((Y - self.y_mean_) / self.y_scale_).astype(np.float32),
            num_epochs=self.num_epochs, batch_size=self.batch_size, lr=self.lr)
        return self

    def _distribution(self, X):
        """``(mu, Sigma)`` in target units: (N, n), (N, n, n)."""
        mu, Sigma = self.score_.covariance_estimator_.get_distribution(np.asarray(X, dtype=np.float32))
        D = self.y_scale_
        return (np.asarray(mu, np.float64) * D + self.y_mean_,
                np.asarray(Sigma, np.float64) * D[:, None] * D[None, :])

    def conformalize(self, X, Y) -> "MapieMVSR":
        """MAPIE's scores of the calibration rows and their split-conformal threshold ``q``."""
        X, Y = check_Xy(X, Y, y_name="Y", min_rows=1)
        Z = ((Y - self.y_mean_) / self.y_scale_).astype(np.float32)
        self.scores_ = np.asarray(self.score_.get_signed_conformity_scores(Z, X=X.astype(np.float32)), np.float64)
        self.q_ = conformal_quantile(self.scores_, check_coverage(self.coverage))
        return self

    def predict_region(self, X) -> EllipsoidRegions:
        mu, Sigma = self._distribution(X)
        return EllipsoidRegions(centers=mu, shapes=geometry.scale(Sigma, self.q_**2), coverage=float(self.coverage),
                                alpha_q=float(self.q_**2))


def evaluate_peer(Xs: np.ndarray, Y: np.ndarray, split, coverage: float, seed: int, num_epochs: int = 300) -> dict:
    """Fit the peer on ``split.train``, calibrate on ``split.calibration`` and measure on ``split.test``
    (features ``Xs`` already preprocessed and standardised as our methods see them): the metrics
    :func:`training.pipeline.evaluate` gives our methods, and the fit seconds."""
    import time

    from training.pipeline import region_metrics

    t0 = time.perf_counter()
    peer = MapieMVSR(coverage=coverage, seed=seed, num_epochs=num_epochs).fit(Xs[split.train], Y[split.train])
    peer.conformalize(Xs[split.calibration], Y[split.calibration])
    seconds = time.perf_counter() - t0
    return {**region_metrics(peer.predict_region(Xs[split.test]), Y[split.test]), "fit_seconds": seconds}
