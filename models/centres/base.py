"""What every centre shares: the interface (:class:`Centre`) and the target standardisation."""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np
from sklearn.base import BaseEstimator

from models._validation import check_Xy


class Centre(BaseEstimator, ABC):
    """A centre ``mu(x)``: hyperparameters in ``__init__``, ``fit(X, Y) -> self`` (input checked once,
    by :meth:`_fit_input`), ``predict(X) -> (N, n)`` (rows checked by the caller), and, to be stored in a
    bundle as plain arrays, ``to_arrays() -> (params, arrays)`` and the classmethod
    ``from_arrays(params, arrays)``. :data:`models.centres.kinds.KINDS` names those a user can choose.

    The centres declare their hyperparameters as fields of ``@dataclass(eq=False, repr=False)``: the
    generated ``__init__`` stores each as given, which is what scikit-learn's ``get_params``, ``clone``
    and ``set_params`` read; ``eq=False`` keeps estimators hashable by identity, ``repr=False``
    scikit-learn's repr.
    """

    @abstractmethod
    def fit(self, X, Y) -> "Centre":
        """Fit the centre on training rows.

        Parameters
        ----------
        X : array-like of shape (m, d)
            Standardised features of the training rows.
        Y : array-like of shape (m, n)
            Their true positions.

        Returns
        -------
        self : Centre

        Raises
        ------
        InputError
            Rows that are not finite or do not match, or a hyperparameter out of its range.
        """

    @abstractmethod
    def predict(self, X) -> np.ndarray:
        """The centres of checked rows.

        Parameters
        ----------
        X : ndarray of shape (N, d)
            Checked standardised features.

        Returns
        -------
        ndarray of shape (N, n)
            ``mu(x)`` for each row.
        """

    def prepare(self) -> None:
        """Build what :meth:`predict` will need (an index, compiled code) now rather than on the first call:
        a server calls it when it loads a bundle. Nothing by default."""

    @abstractmethod
    def to_arrays(self) -> tuple[dict, dict[str, np.ndarray]]:
        """The fitted centre in a bundle's form.

        Returns
        -------
        params : dict
            JSON-able parameters: the hyperparameters and what the arrays need.
        arrays : dict of str -> ndarray
            The fitted arrays.
        """

    @classmethod
    @abstractmethod
    def from_arrays(cls, params: dict, arrays: dict[str, np.ndarray]) -> "Centre":
        """Rebuild a fitted centre from what :meth:`to_arrays` gave.

        Parameters
        ----------
        params : dict
            JSON-able parameters.
        arrays : dict of str -> ndarray
            The fitted arrays.

        Returns
        -------
        Centre
            Fitted.
        """

    def _fit_input(self, X, Y, min_rows: int = 1) -> tuple[np.ndarray, np.ndarray]:
        """``X`` (m, d) and ``Y`` (m, n) as float arrays, checked (:func:`models._validation.check_Xy`,
        errors naming the field), with ``n_features_in_`` and ``n_targets_`` recorded."""
        X, Y = check_Xy(X, Y, y_name="Y", min_rows=min_rows)
        self.n_features_in_, self.n_targets_ = X.shape[1], Y.shape[1]
        return X, Y


def target_scaling(Y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The mean and scale that standardise targets.

    Parameters
    ----------
    Y : ndarray of shape (m, n)
        Targets.

    Returns
    -------
    mean : ndarray of shape (n,)
    scale : ndarray of shape (n,)
        The standard deviation; 1 for a constant target.
    """
    sd = Y.std(axis=0)
    return Y.mean(axis=0), np.where(sd > 0, sd, 1.0)


def capped_rows(n_rows: int, max_rows: int | None, seed: int) -> np.ndarray | None:
    """The rows a fit capped at ``max_rows`` uses.

    Parameters
    ----------
    n_rows : int
        The rows there are.
    max_rows : int or None
        The cap; ``None``: no cap.
    seed : int
        Seeds the subset.

    Returns
    -------
    ndarray of int or None
        A seeded random subset of ``max_rows`` rows, sorted, when there are more; ``None`` (every row)
        otherwise.

    Raises
    ------
    InputError
        ``max_rows`` is neither ``None`` nor an integer of at least 2.
    """
    from models._validation import is_positive_int
    from models.exceptions import InputError

    if max_rows is None:
        return None
    if not (is_positive_int(max_rows) and max_rows >= 2):
        raise InputError(f"max_rows must be None or an integer of at least 2; got {max_rows!r}", field="max_rows",
                         expected="None or an integer >= 2", received=repr(max_rows))
    if n_rows <= max_rows:
        return None
    return np.sort(np.random.default_rng(seed).choice(n_rows, max_rows, replace=False))


def at_most(max_rows: int | None, seed: int, *arrays: np.ndarray) -> tuple[np.ndarray, ...]:
    """Arrays of the same rows as a fit capped at ``max_rows`` sees them.

    Parameters
    ----------
    max_rows : int or None
        The cap.
    seed : int
        Seeds the subset.
    *arrays : ndarray
        Arrays with the same rows.

    Returns
    -------
    tuple of ndarray
        Their :func:`capped_rows`, or themselves whole.
    """
    rows = capped_rows(len(arrays[0]), max_rows, seed)
    return arrays if rows is None else tuple(a[rows] for a in arrays)
