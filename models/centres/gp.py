"""A Gaussian process centre: the posterior mean of a GP with a squared-exponential kernel whose
length scales (one per feature, automatic relevance determination) are fitted by maximum marginal
likelihood: a smooth centre that learns which features carry nothing (how it fares against the other
centres: docs/benchmarks/shape.md). It is stored and evaluated as a kernel sum in numpy, like the SVR.

The marginal likelihood and its gradient are computed here (:func:`log_marginal_likelihood`), with one
``rows x rows`` matrix product per step instead of scikit-learn's ``rows x rows x features`` gradient tensor,
and its L-BFGS search is capped at ``max_iter`` iterations: what a candidate of ``centre="auto"`` costs stays
proportionate to the rows (``docs/benchmarks/design.md`` has the figures).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from models._validation import is_positive_int
from models.centres.base import Centre, target_scaling
from models.centres.svr import rbf_kernel_sum
from models.exceptions import InputError


@dataclass(eq=False, repr=False)
class GPCentre(Centre):
    """The posterior mean of a GP regression of the standardised targets.

    The kernel is ``c * exp(-|(x - x') / l|^2 / 2) + noise``, one kernel for every target (their
    log marginal likelihoods add). Its hyperparameters ``c``, ``l`` and ``noise`` are fitted by L-BFGS on
    the log marginal likelihood (``fit_hyperparameters``; scikit-learn's
    :class:`sklearn.gaussian_process.GaussianProcessRegressor` objective, start and bounds, each step's cost
    the cube of the rows) on at most ``search_rows`` rows; the posterior is then conditioned by scikit-learn,
    with those hyperparameters fixed, on at most ``max_rows`` rows (a seeded random subset beyond them: one
    Cholesky factorisation, whose matrix takes ``8 max_rows^2`` bytes). After fitting it is plain arrays.

    Parameters
    ----------
    max_iter : int, default=50
        L-BFGS iterations of the marginal-likelihood search at most.
    ard_max_features : int, default=32
        One length scale per feature up to this many features; one shared length scale above.
    search_rows : int, default=400
        Rows the hyperparameters are fitted on.
    max_rows : int, default=4000
        Rows the posterior is conditioned on.
    seed : int, default=0
        Chooses the subsets and the optimiser's restarts.

    Attributes
    ----------
    rows_ : ndarray (s, d)
        The conditioning rows divided by the length scales.
    weights_ : ndarray (s, n)
        ``c (K + noise I)^-1 y``, in target units.
    y_mean_ : ndarray (n,)
    length_scale_ : ndarray (d,)
    search_iterations_ : int
        L-BFGS iterations the hyperparameter search ran (at most ``max_iter``).
    amplitude_, noise_ : float
        The fitted kernel's variance and noise variance, in units of the standardised targets."""

    max_iter: int = 50
    ard_max_features: int = 32
    search_rows: int = 400
    max_rows: int = 4000
    seed: int = 0

    def fit(self, X, Y) -> "GPCentre":
        X, Y = self._fit_input(X, Y, min_rows=2)
        for name in ("search_rows", "max_rows"):
            value = getattr(self, name)
            if not (is_positive_int(value) and value >= 2):
                raise InputError(f"{name} must be an integer of at least 2; got {value!r}", field=name,
                                 expected="an integer >= 2", received=repr(value))
        if not is_positive_int(self.max_iter):
            raise InputError(f"max_iter must be a positive integer; got {self.max_iter!r}", field="max_iter",
                             expected="a positive integer", received=repr(self.max_iter))
        from sklearn.gaussian_process import GaussianProcessRegressor
        from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel

        mean, scale = target_scaling(Y)
        Z = (Y - mean) / scale
        rng = np.random.default_rng(self.seed)
        order = rng.permutation(X.shape[0])
        d = X.shape[1]
        search = order[:self.search_rows]
        amplitude, length, noise, self.search_iterations_ = fit_hyperparameters(
            X[search], Z[search], ard=d <= self.ard_max_features, max_iter=self.max_iter)
        tuned = ConstantKernel(amplitude, "fixed") * RBF(length, "fixed") + WhiteKernel(noise, "fixed")
        rows = np.sort(order[:self.max_rows])
        posterior = GaussianProcessRegressor(tuned, optimizer=None).fit(X[rows], Z[rows])
        self.length_scale_ = np.broadcast_to(np.asarray(length, float), (d,)).copy()
        self.amplitude_, self.noise_ = float(amplitude), float(noise)
        self.rows_ = X[rows] / self.length_scale_
        alpha = np.asarray(posterior.alpha_, float).reshape(len(rows), -1)
        self.weights_ = amplitude * alpha * scale
        self.y_mean_ = mean
        return self

    def predict(self, X) -> np.ndarray:
        """(N, n) centres: ``sum_i w_i exp(-|x / l - r_i|^2 / 2) + y_mean`` (the posterior mean of
        scikit-learn's ``predict``, to rounding), one matrix product and one ``exp`` per call, through the
        SVR's :func:`~models.centres.svr.rbf_kernel_sum`, without scikit-learn's per-call kernel object and
        input checks."""
        plan = getattr(self, "_plan", None)
        if plan is None or plan[0] is not self.rows_:
            R = self.rows_
            plan = self._plan = (R, np.ascontiguousarray(R.T), 0.5 * (R**2).sum(1))
        _, A, c = plan
        Xs = np.asarray(X, dtype=np.float64) / self.length_scale_
        x2 = np.einsum("ij,ij->i", Xs, Xs)[:, None]
        return rbf_kernel_sum(Xs, x2, A, c, self.weights_, 0.5) + self.y_mean_

    def to_arrays(self):
        arrays = {"rows": self.rows_, "weights": self.weights_, "y_mean": self.y_mean_,
                  "length_scale": self.length_scale_,
                  "amplitude_noise": np.array([self.amplitude_, self.noise_])}
        return self.get_params(), arrays

    @classmethod
    def from_arrays(cls, params, arrays):
        self = cls(**params)
        self.rows_, self.weights_ = np.asarray(arrays["rows"], float), np.asarray(arrays["weights"], float)
        self.y_mean_, self.length_scale_ = np.asarray(arrays["y_mean"], float), np.asarray(arrays["length_scale"], float)
        self.amplitude_, self.noise_ = (float(v) for v in np.asarray(arrays["amplitude_noise"]).ravel())
        self.n_features_in_, self.n_targets_ = self.rows_.shape[1], self.weights_.shape[1]
        return self


#: the kernel's hyperparameter bounds (scikit-learn's ConstantKernel, RBF and WhiteKernel as GPCentre builds them)
AMPLITUDE_BOUNDS, LENGTH_BOUNDS, NOISE_BOUNDS = (1e-3, 1e3), (1e-2, 1e5), (1e-6, 10.0)
#: the jitter scikit-learn's GaussianProcessRegressor adds to the kernel's diagonal (its ``alpha``)
JITTER = 1e-10


def log_marginal_likelihood(theta: np.ndarray, X: np.ndarray, Z: np.ndarray) -> tuple[float, np.ndarray]:
    """The log marginal likelihood of targets ``Z`` (m, o) at rows ``X`` (m, d) under the kernel
    ``c * exp(-|(x - x') / l|^2 / 2) + noise``, summed over the ``o`` targets, and its gradient in
    ``theta = log [c, l_1 .. l_k, noise]`` (``k = d`` length scales, or one shared): the value and
    gradient of scikit-learn's ``GaussianProcessRegressor.log_marginal_likelihood(theta, eval_gradient=True)``
    for that kernel, to rounding (tests/models/centres/test_gp.py). ``(-inf, 0)`` where the kernel matrix
    is not positive definite.

    With ``alpha = K^-1 Z`` and ``W = alpha alpha^T - o K^-1``, the derivative in ``log l_j`` is
    ``sum_ab W_ab Kf_ab (x_aj - x_bj)^2 / (2 l_j^2)`` (``Kf`` the signal part), which expands into two
    matrix products: ``O(m^2 d)`` a step, where scikit-learn builds the ``m x m x d`` tensor of every
    derivative.
    """
    from scipy.linalg import cho_solve, cholesky, lapack

    theta = np.asarray(theta, dtype=np.float64)
    c, noise, length = np.exp(theta[0]), np.exp(theta[-1]), np.exp(theta[1:-1])
    m, o = Z.shape
    Xl = X / length
    sq = np.einsum("ij,ij->i", Xl, Xl)
    D2 = np.maximum(sq[:, None] + sq[None, :] - 2.0 * (Xl @ Xl.T), 0.0)
    np.fill_diagonal(D2, 0.0)
    Kf = c * np.exp(-0.5 * D2)
    K = Kf.copy()
    K[np.diag_indices(m)] += noise + JITTER
    try:
        L = cholesky(K, lower=True, check_finite=False)
    except np.linalg.LinAlgError:
        return -np.inf, np.zeros_like(theta)
    alpha = cho_solve((L, True), Z, check_finite=False)
    lml = -0.5 * np.sum(Z * alpha) - o * np.log(np.diag(L)).sum() - 0.5 * m * o * np.log(2.0 * np.pi)
    inverse, info = lapack.dpotri(L, lower=1)  # K^-1 from its Cholesky factor: its lower triangle
    if info != 0:
        return -np.inf, np.zeros_like(theta)
    inverse = np.tril(inverse) + np.tril(inverse, -1).T
    W = alpha @ alpha.T - o * inverse
    G = W * Kf
    grad = np.empty_like(theta)
    grad[0] = 0.5 * G.sum()
    grad[-1] = 0.5 * noise * np.trace(W)
    if length.size == X.shape[1] and length.size > 1:  # one scale per feature
        grad[1:-1] = (Xl**2).T @ G.sum(axis=1) - np.einsum("ij,ij->j", G @ Xl, Xl)
    else:
        grad[1] = 0.5 * np.sum(G * D2)
    return float(lml), grad


def fit_hyperparameters(X: np.ndarray, Z: np.ndarray, ard: bool = True,
                        max_iter: int = 50) -> tuple[float, np.ndarray | float, float, int]:
    """``(c, l, noise, iterations)`` maximising :func:`log_marginal_likelihood` on ``X`` (m, d), ``Z`` (m, o):
    L-BFGS-B within the bounds, from ``c = 1``, ``l = 1``, ``noise = 0.1`` (scikit-learn's start, no
    restarts), at most ``max_iter`` iterations. ``l`` is (d,) with ``ard``, else one float."""
    from scipy.optimize import minimize

    k = X.shape[1] if ard else 1
    theta0 = np.log(np.r_[1.0, np.ones(k), 0.1])
    bounds = np.log([AMPLITUDE_BOUNDS, *[LENGTH_BOUNDS] * k, NOISE_BOUNDS])

    def objective(theta):
        lml, grad = log_marginal_likelihood(theta, X, Z)
        return -lml, -grad

    found = minimize(objective, theta0, jac=True, method="L-BFGS-B", bounds=bounds, options={"maxiter": max_iter})
    theta = found.x if np.isfinite(found.fun) else theta0
    length = np.exp(theta[1:-1])
    return float(np.exp(theta[0])), (length if ard else float(length[0])), float(np.exp(theta[-1])), int(found.nit)
