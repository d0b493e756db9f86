"""The paper's centre: one RBF SVR per target (``sklearn.svm.SVR()``, scikit-learn defaults).

After fitting it predicts in numpy from the support vectors, dual coefficients and intercepts, the
arrays a bundle stores.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from sklearn.svm import SVR

from models.centres.base import Centre, at_most, target_scaling


#: the most cells (rows x support vectors) of one kernel matrix :meth:`SVRCentre.predict` builds
KERNEL_CELLS = 1 << 22
#: ... in blocks of at least this many rows (BLAS's products of such blocks equal the whole product's rows)
MIN_BLOCK_ROWS = 256


def rbf_kernel_sum(X, x2, A, c, coef, gamma) -> np.ndarray:
    """``exp(-gamma |x - sv|^2) @ coef`` (N, t) from a kernel plan's arrays (see ``SVRCentre._kernel_plan``),
    the kernel matrix built for at most :data:`KERNEL_CELLS` cells at a time (blocks of rows)."""
    step = max(MIN_BLOCK_ROWS, KERNEL_CELLS // max(A.shape[1], 1))
    if len(X) > step:
        return np.concatenate([rbf_kernel_sum(X[i:i + step], x2[i:i + step], A, c, coef, gamma)
                               for i in range(0, len(X), step)])
    D = X @ A
    D -= c
    D -= gamma * x2
    np.minimum(D, 0.0, out=D)
    np.exp(D, out=D)
    return D @ coef


@dataclass(eq=False, repr=False)
class SVRCentre(Centre):
    """One RBF SVR per target.

    Parameters
    ----------
    C : float, default=1.0
        The SVR's regularisation (scikit-learn's default).
    epsilon : float, default=0.1
        The width of the SVR's insensitive tube, in target units (standardised with ``scale_targets``).
    gamma : {"scale", "auto"} or float, default="scale"
        The RBF kernel's width (scikit-learn's default).
    scale_targets : bool, default=False
        Fit each SVR on the standardised target (so ``epsilon`` is in units of the target's std)
        and map back. ``False`` is the paper's protocol (epsilon in raw target units).
    max_rows : int or None, default=16384
        Fit on at most this many rows (a seeded random subset beyond them): libsvm's cost grows about as
        the square of the rows, so a larger survey costs a bounded fit and a prediction linear in its rows.
        ``None``: every row.
    seed : int, default=0
        Chooses the subset.

    Attributes
    ----------
    support_vectors_ : list of ndarray (s_j, d)
    dual_coef_ : list of ndarray (s_j,)
    intercept_ : ndarray (n,)
    gamma_ : ndarray (n,)
    y_mean_, y_scale_ : ndarray (n,)
    """

    C: float = 1.0
    epsilon: float = 0.1
    gamma: str | float = "scale"
    scale_targets: bool = False
    max_rows: int | None = 16384
    seed: int = 0

    def fit(self, X, Y) -> "SVRCentre":
        X, Y = self._fit_input(X, Y, min_rows=2)
        X, Y = at_most(self.max_rows, self.seed, X, Y)
        if self.scale_targets:
            self.y_mean_, self.y_scale_ = target_scaling(Y)
        else:
            self.y_mean_, self.y_scale_ = np.zeros(Y.shape[1]), np.ones(Y.shape[1])
        Z = (Y - self.y_mean_) / self.y_scale_
        self.support_vectors_, self.dual_coef_, icpt, gam = [], [], [], []
        for j in range(Z.shape[1]):
            svr = SVR(kernel="rbf", C=self.C, epsilon=self.epsilon, gamma=self.gamma).fit(X, Z[:, j])
            self.support_vectors_.append(np.asarray(svr.support_vectors_, dtype=np.float64))
            self.dual_coef_.append(np.asarray(svr.dual_coef_, dtype=np.float64).ravel())
            icpt.append(float(svr.intercept_[0]))
            gam.append(float(svr._gamma))
        self.intercept_, self.gamma_ = np.array(icpt), np.array(gam)
        return self

    def _kernel_plan(self):
        """Precomputed arrays for prediction, built once: a list of
        ``(A, c, coef, gamma, targets)`` with ``A = 2 gamma SV^T`` (d, S), ``c = gamma |sv|^2`` (S,)
        and ``coef`` (S, t) already multiplied by the target scale, so that a group's kernel is
        ``exp(min(x A - c - gamma |x|^2, 0))`` (``-gamma |x - sv|^2``, clamped at 0 against rounding).

        When every target's SVR has the same ``gamma`` (always with ``gamma="scale"``: it depends
        on X only), the targets' support vectors are merged into one set with a coefficient
        matrix ``(S, n)``: one kernel evaluation and one ``exp`` serve all targets.
        """
        plan = getattr(self, "_plan", None)
        if plan is not None and plan[0] is self.support_vectors_:
            return plan[1], plan[2]
        if np.allclose(self.gamma_, self.gamma_[0]):
            SV, inverse = np.unique(np.concatenate(self.support_vectors_), axis=0, return_inverse=True)
            coef = np.zeros((SV.shape[0], self.n_targets_))
            start = 0
            for j, sv in enumerate(self.support_vectors_):
                np.add.at(coef[:, j], inverse.ravel()[start:start + len(sv)], self.dual_coef_[j])
                start += len(sv)
            raw = [(SV, coef, float(self.gamma_[0]), list(range(self.n_targets_)))]
        else:
            raw = [(sv, c[:, None], float(g), [j])
                   for j, (sv, c, g) in enumerate(zip(self.support_vectors_, self.dual_coef_, self.gamma_))]
        groups = [(np.ascontiguousarray(2.0 * g * SV.T), g * (SV**2).sum(1), coef * self.y_scale_[targets], g, targets)
                  for SV, coef, g, targets in raw]
        offset = self.intercept_ * self.y_scale_ + self.y_mean_
        self._plan = (self.support_vectors_, groups, offset)
        return groups, offset

    def predict(self, X) -> np.ndarray:
        """The centres of checked rows.

        Squared distances come from one matrix product (``|x|^2 + |sv|^2 - 2 x sv^T``, BLAS), with ``gamma``,
        the target scale and the intercept folded into arrays computed once: a handful of vector operations
        per call, which is what a single-row request pays.

        Parameters
        ----------
        X : ndarray of shape (N, d)
            Checked standardised features.

        Returns
        -------
        ndarray of shape (N, n)
            ``(sum_i a_i exp(-gamma |x - sv_i|^2) + b) * y_scale + y_mean`` per target.
        """
        groups, offset = self._kernel_plan()
        x2 = np.einsum("ij,ij->i", X, X)[:, None]
        if len(groups) == 1:  # one kernel for all targets (gamma="scale")
            out = rbf_kernel_sum(X, x2, *groups[0][:4])
        else:
            out = np.empty((X.shape[0], self.n_targets_))
            for A, c, coef, gamma, targets in groups:
                out[:, targets] = rbf_kernel_sum(X, x2, A, c, coef, gamma)
        out += offset
        return out

    def to_arrays(self) -> tuple[dict, dict[str, np.ndarray]]:
        arrays = {"intercept": self.intercept_, "gamma": self.gamma_, "y_mean": self.y_mean_, "y_scale": self.y_scale_}
        for j in range(self.n_targets_):
            arrays[f"sv_{j}"] = self.support_vectors_[j]
            arrays[f"coef_{j}"] = self.dual_coef_[j]
        return self.get_params(), arrays

    @classmethod
    def from_arrays(cls, params: dict, arrays) -> "SVRCentre":
        est = cls(**params)
        n = len(arrays["intercept"])
        est.support_vectors_ = [np.asarray(arrays[f"sv_{j}"], float) for j in range(n)]
        est.dual_coef_ = [np.asarray(arrays[f"coef_{j}"], float) for j in range(n)]
        est.intercept_ = np.asarray(arrays["intercept"], float)
        est.gamma_ = np.asarray(arrays["gamma"], float)
        est.y_mean_, est.y_scale_ = np.asarray(arrays["y_mean"], float), np.asarray(arrays["y_scale"], float)
        est.n_features_in_, est.n_targets_ = est.support_vectors_[0].shape[1], n
        return est
