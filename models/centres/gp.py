"""A Gaussian process centre: the posterior mean of a GP with a squared-exponential kernel whose
length scales (one per feature, automatic relevance determination) are fitted by maximum marginal
likelihood: a smooth centre that learns which features carry nothing (how it fares against the other
centres: docs/benchmarks/shape.md). It is stored and evaluated as a kernel sum in numpy, like the SVR.
"""

from __future__ import annotations

import warnings
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
    log marginal likelihoods add). Its hyperparameters ``c``, ``l`` and ``noise`` are fitted by
    scikit-learn's :class:`~sklearn.gaussian_process.GaussianProcessRegressor` (L-BFGS on the log marginal
    likelihood, whose cost grows with the cube of the rows) on at most ``search_rows`` rows; the posterior is
    then conditioned, with those hyperparameters fixed, on at most ``max_rows`` rows (a seeded random subset
    beyond them: one Cholesky factorisation of that many rows, whose matrix takes ``8 max_rows^2`` bytes).
    After fitting it is plain arrays: the conditioning rows divided by ``l``, the weights
    ``c (K + noise I)^-1 y`` scaled back to target units, the target mean.

    Parameters
    ----------
    ard_max_features : int, default=32
        One length scale per feature up to this many features (the marginal likelihood's gradient holds
        one ``rows x rows`` matrix per length scale); one shared length scale above.
    search_rows : int, default=800
        Rows the hyperparameters are fitted on (each step of the fit costs the cube of this).
    max_rows : int, default=4000
        Rows the posterior is conditioned on.
    seed : int, default=0
        Chooses the subsets and the optimiser's restarts.

    Attributes
    ----------
    rows_ : ndarray (s, d)
        The conditioning rows divided by the length scales.
    weights_ : ndarray (s, n)
        Their weights, in target units.
    y_mean_ : ndarray (n,)
    length_scale_ : ndarray (d,)
    amplitude_, noise_ : float
        The fitted kernel's variance and noise variance, in units of the standardised targets.
    """

    ard_max_features: int = 32
    search_rows: int = 800
    max_rows: int = 4000
    seed: int = 0

    def fit(self, X, Y) -> "GPCentre":
        X, Y = self._fit_input(X, Y, min_rows=2)
        for name in ("search_rows", "max_rows"):
            value = getattr(self, name)
            if not (is_positive_int(value) and value >= 2):
                raise InputError(f"{name} must be an integer of at least 2; got {value!r}", field=name,
                                 expected="an integer >= 2", received=repr(value))
        from sklearn.exceptions import ConvergenceWarning
        from sklearn.gaussian_process import GaussianProcessRegressor
        from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel

        mean, scale = target_scaling(Y)
        Z = (Y - mean) / scale
        rng = np.random.default_rng(self.seed)
        order = rng.permutation(X.shape[0])
        d = X.shape[1]
        length = np.ones(d) if d <= self.ard_max_features else 1.0
        kernel = (ConstantKernel(1.0, (1e-3, 1e3)) * RBF(length, (1e-2, 1e5))
                  + WhiteKernel(0.1, (1e-6, 10.0)))
        search = order[:self.search_rows]
        with warnings.catch_warnings():  # a length scale at its upper bound is a feature the GP ignores
            warnings.simplefilter("ignore", ConvergenceWarning)
            tuned = GaussianProcessRegressor(kernel, random_state=self.seed).fit(X[search], Z[search]).kernel_
        amplitude, rbf, white = tuned.k1.k1.constant_value, tuned.k1.k2, tuned.k2
        rows = np.sort(order[:self.max_rows])
        posterior = GaussianProcessRegressor(tuned, optimizer=None).fit(X[rows], Z[rows])
        self.length_scale_ = np.broadcast_to(np.asarray(rbf.length_scale, float), (d,)).copy()
        self.amplitude_, self.noise_ = float(amplitude), float(white.noise_level)
        self.rows_ = X[rows] / self.length_scale_
        alpha = np.asarray(posterior.alpha_, float).reshape(len(rows), -1)
        self.weights_ = amplitude * alpha * scale
        self.y_mean_ = mean
        return self

    def predict(self, X) -> np.ndarray:
        """(N, n) centres: ``sum_i w_i exp(-|x / l - r_i|^2 / 2) + y_mean`` (the posterior mean of
        scikit-learn's ``predict``, to rounding), one matrix product and one ``exp`` per call, through the
        SVR's :func:`~models.centres.svr.rbf_kernel_sum`. What scikit-learn's ``GaussianProcessRegressor.predict``
        cost on 1,620 conditioning rows and six features, on the 2-core dev machine: 79 us for one row against 10 us here,
        1.15 ms for 256 rows against 0.80 ms (its kernel object and input checks per call)."""
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
