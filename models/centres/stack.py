"""Stacked centres: a non-negative blend of several fitted centres (Breiman's stacked regression).

``mu(x) = sum_i w_i * mu_i(x)`` per target, with the weights ``w >= 0`` fitted by non-negative
least squares (``scipy.optimize.nnls``) on the members' out-of-fold predictions, so that a member
is weighted by how well it predicts rows it did not see. :func:`fold_splits` is the one place the
project draws its cross-validation folds (the centre selection, cross-fitting and this blend all
use it, so the out-of-fold predictions of one serve the others).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from models.centres.base import Centre
from models.centres.kinds import KINDS, TYPES
from models.exceptions import InputError

DEFAULT_MEMBERS = ("paper", "scaled", "knn", "hgb")


def fold_splits(m: int, k: int, seed: int, groups=None) -> list[tuple[np.ndarray, np.ndarray]]:
    """``(rest, fold)`` row indices of ``k`` shuffled folds of ``m`` rows (whole groups per fold with
    ``groups``), seeded with ``seed``."""
    from sklearn.model_selection import GroupKFold, KFold

    if groups is None:
        return list(KFold(k, shuffle=True, random_state=seed).split(np.zeros((m, 1))))
    return list(GroupKFold(k, shuffle=True, random_state=seed).split(np.zeros((m, 1)), groups=groups))


def stack_weights(predictions: list[np.ndarray], Y: np.ndarray) -> np.ndarray:
    """``(k, n)`` non-negative weights of ``k`` members' predictions ``(m, n)`` of ``Y`` (m, n), one
    least-squares fit per target; a target whose fit is all zero gives the member of smallest
    squared error weight 1."""
    from scipy.optimize import nnls

    P = np.stack(predictions)  # (k, m, n)
    W = np.zeros((P.shape[0], Y.shape[1]))
    for j in range(Y.shape[1]):
        W[:, j] = nnls(P[:, :, j].T, Y[:, j])[0]
        if not W[:, j].any():
            W[np.argmin(((P[:, :, j] - Y[:, j]) ** 2).sum(axis=1)), j] = 1.0
    return W


def blend(predictions, W: np.ndarray) -> np.ndarray:
    """``sum_i W[i] * predictions[i]``: the stacked prediction (m, n)."""
    return np.einsum("kmn,kn->mn", np.stack(predictions), W)


def stacked_out_of_fold(predictions: list[np.ndarray], Y: np.ndarray, folds) -> np.ndarray:
    """The blend's own out-of-fold prediction: each fold's rows blended with weights fitted on the
    other folds' rows (``predictions`` are the members' out-of-fold predictions on the same folds),
    so its error is an honest estimate of the blend's."""
    out = np.empty_like(Y, dtype=np.float64)
    for rest, fold in folds:
        W = stack_weights([p[rest] for p in predictions], Y[rest])
        out[fold] = blend([p[fold] for p in predictions], W)
    return out


@dataclass(eq=False, repr=False)
class StackCentre(Centre):
    """A non-negative least-squares blend of single centre kinds, per target.

    ``fit`` computes every member's ``cv``-fold out-of-fold predictions (or takes them, as
    ``predictions``, from a caller that already has them on its folds), fits the weights on them,
    and refits the members of positive weight on all rows; ``predict`` blends those members.
    Stored in a bundle as its members' own arrays plus the weights.

    Parameters
    ----------
    members : tuple of str
        Names of single centre kinds (:data:`models.centres.kinds.KINDS`; not ``"stack"``).
    cv : int
        Folds for the out-of-fold predictions.
    random_state : int
        Seeds the folds and members that take a seed.
    """

    members: tuple[str, ...] = DEFAULT_MEMBERS
    cv: int = 5
    random_state: int = 0

    def _make(self, name: str):
        import inspect

        spec = KINDS[name]
        seeded = "seed" in inspect.signature(spec.estimator).parameters
        return spec.make(**({"seed": self.random_state} if seeded else {}))

    def fit(self, X, Y, predictions: dict | None = None) -> "StackCentre":
        """Fit the blend: the members' out-of-fold predictions, the weights on them, the members of positive weight.

        Parameters
        ----------
        X : array-like of shape (m, d)
            Standardised features of the training rows.
        Y : array-like of shape (m, n)
            Their true positions.
        predictions : dict of str -> ndarray of shape (m, n), default=None
            The members' out-of-fold predictions on the caller's folds; ``None``: computed on ``cv`` folds.

        Returns
        -------
        self : StackCentre

        Raises
        ------
        InputError
            Members that are not distinct single kinds, ``cv`` outside [2, m], or rows that do not match.
        """
        X, Y = self._fit_input(X, Y, min_rows=2)
        names = list(self.members)
        if not names or any(n not in KINDS for n in names) or len(set(names)) != len(names):
            raise InputError(f"members must be distinct centre names other than 'stack' ({', '.join(KINDS)}); "
                             f"got {names!r}", field="members", expected=f"distinct names of {', '.join(KINDS)}",
                             received=repr(names))
        if predictions is None:
            if isinstance(self.cv, bool) or not isinstance(self.cv, int) or not 2 <= self.cv <= X.shape[0]:
                raise InputError(f"cv must be a fold count in [2, {X.shape[0]}]; got {self.cv!r}", field="cv",
                                 expected=f"an integer in [2, {X.shape[0]}]", received=repr(self.cv))
            folds = fold_splits(X.shape[0], self.cv, self.random_state)
            predictions = {}
            for name in names:
                predictions[name] = np.empty_like(Y)
                for rest, fold in folds:
                    predictions[name][fold] = self._make(name).fit(X[rest], Y[rest]).predict(X[fold])
        W = stack_weights([predictions[n] for n in names], Y)
        keep = [i for i in range(len(names)) if W[i].any()]
        self.member_names_ = [names[i] for i in keep]
        self.weights_ = W[keep]
        self.members_ = [self._make(names[i]).fit(X, Y) for i in keep]
        self.n_features_in_, self.n_targets_ = X.shape[1], Y.shape[1]
        return self

    def predict(self, X) -> np.ndarray:
        return blend([m.predict(X) for m in self.members_], self.weights_)

    def prepare(self) -> None:
        for member in self.members_:
            member.prepare()

    def to_arrays(self):
        fitted, arrays = [], {"weights": self.weights_}
        for i, m in enumerate(self.members_):
            params, member_arrays = m.to_arrays()
            fitted.append({"name": self.member_names_[i], "type": type(m).__name__, "params": params})
            arrays.update({f"m{i}_{k}": v for k, v in member_arrays.items()})
        params = {**self.get_params(), "members": list(self.members), "fitted": fitted,
                  "n_features": self.n_features_in_, "n_targets": self.n_targets_}
        return params, arrays

    @classmethod
    def from_arrays(cls, params, arrays):
        """Rebuild the fitted blend from what :meth:`to_arrays` gave, its members included.

        Parameters
        ----------
        params : dict
            The hyperparameters, the members' own parameters and the sizes.
        arrays : dict of str -> ndarray
            The members' arrays (prefixed) and the weights.

        Returns
        -------
        StackCentre
            Fitted.

        Raises
        ------
        InputError
            A member of an unknown type.
        """
        params = dict(params)
        fitted = params.pop("fitted")
        n_features, n_targets = int(params.pop("n_features")), int(params.pop("n_targets"))
        est = cls(**{**params, "members": tuple(params["members"])})
        est.members_ = []
        for i, f in enumerate(fitted):
            ctype = TYPES.get(f["type"])
            if ctype is None:
                raise InputError(f"a stacked centre's member has an unknown type {f['type']!r}", field="centre",
                                 expected=", ".join(TYPES),
                                 received=str(f["type"]))
            prefix = f"m{i}_"
            est.members_.append(ctype.from_arrays(f["params"], {k[len(prefix):]: arrays[k] for k in arrays
                                                                  if k.startswith(prefix)}))
        est.member_names_ = [f["name"] for f in fitted]
        est.weights_ = np.asarray(arrays["weights"], dtype=np.float64)
        est.n_features_in_, est.n_targets_ = n_features, n_targets
        return est
