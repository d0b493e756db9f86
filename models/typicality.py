"""Feature typicality: how unlike the survey's a query's features are, as a conformal p-value.

The guarantee assumes a query is exchangeable with the calibration rows. Its features carry evidence
against that without any label: a later day, a new phone or a moved access point moves the readings
away from the survey's. :class:`Typicality` scores a row by the mean Euclidean distance from its
features to their ``k`` nearest *reference* rows (a sample of the train part), in the served
standardised feature space projected on its leading principal axes, and ranks a query's score among
the calibration rows' own (their conformal p-value). Under exchangeability the p-value is uniform;
small ones say "unlike anything calibrated".

A calibration row must be scored as a query of the guarantee would be: the reference never holds
its position (a grouped split keeps calibration positions out of training) nor, across units, its
unit (``calibrate(groups=...)`` leaves out the reference rows of the row's own unit, as a new phone
has none in the survey).

Per batch: the projection, one float32 ``(N, c) x (c, r)`` product and ``k`` passes of ``argmin`` over
its ``(N, r)`` rows (``c = n_components``, ``r = max_reference``); a request of a few rows, one compiled
call. A row's score does not depend on the batch it comes in, to float32's precision. scikit-learn's ``PCA`` fits the axes (training only)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from models.exceptions import InputError

#: the shift test's bins: quantiles of the train rows' scores (255 edges)
BINS = 256
#: rows scored at a time
CHUNK = 2048
#: up to this many rows are scored by the compiled loop (:mod:`models._typicality`), more by a BLAS product
SMALL_ROWS = 4


def conformal_p_values(calibration: np.ndarray, scores: np.ndarray, u: np.ndarray | None = None) -> np.ndarray:
    """Conformal p-values of scores among sorted calibration scores (larger scores: less typical).

    Parameters
    ----------
    calibration : ndarray of shape (n,)
        The calibration rows' scores, sorted.
    scores : ndarray of shape (N,)
        The scores to rank.
    u : ndarray of shape (N,), default=None
        Uniform draws on [0, 1]: the smoothed p-value, exactly uniform under exchangeability. ``None``: the
        conservative one (``u = 1``).

    Returns
    -------
    ndarray of shape (N,)
        ``(#{c > s} + u (#{c = s} + 1)) / (n + 1)``.
    """
    n = len(calibration)
    left = np.searchsorted(calibration, scores, side="left")
    if u is None:  # #{c > s} + #{c = s} + 1 = n - left + 1: one search
        return (n - left + 1) / (n + 1)
    right = np.searchsorted(calibration, scores, side="right")
    return (n - right + u * (right - left + 1)) / (n + 1)


def _k_smallest(D: np.ndarray, k: int) -> np.ndarray:
    """(c, k) the ``k`` smallest entries of each row of ``D`` (c, r), ascending; ``D`` is overwritten. Up to
    :data:`models.centres.search.ARGMIN_KTH`, ``k`` passes of ``argmin`` (faster than a partition for small ``k``), beyond (or for fewer than 16 rows) a partition and a sort of
its ``k``."""
    from models.centres.search import ARGMIN_KTH

    if k >= D.shape[1]:
        return np.sort(D, axis=1)
    if k > ARGMIN_KTH or D.shape[0] < 16:  # a few rows: each pass's fixed cost outweighs the partition's
        return np.sort(np.partition(D, k - 1, axis=1)[:, :k], axis=1)
    rows = np.arange(D.shape[0])
    out = np.empty((D.shape[0], k), dtype=D.dtype)
    for j in range(k):
        a = D.argmin(axis=1)
        out[:, j] = D[rows, a]
        D[rows, a] = np.inf
    return out


@dataclass(eq=False)
class Typicality:
    """A row's mean distance to its ``k`` nearest reference rows, ranked among the calibration rows'.

    Parameters
    ----------
    k : int, default=5
        Nearest reference rows averaged.
    n_components : int, default=16
        Principal axes of the train part's standardised features kept (at most the features).
    max_reference : int, default=2048
        Train rows kept as the reference (a seeded sample; all when fewer).
    seed : int, default=0
        Seeds the sample and the axes.

    Attributes
    ----------
    mean_ : ndarray of shape (d,)
        The projection's centre: rows are projected as ``(x - mean_) @ components_``.
    components_ : ndarray of shape (d, c)
        The principal axes.
    reference_ : ndarray of shape (r, c), float32
        The projected reference rows.
    reference_groups_ : ndarray of shape (r,)
        Their units (-1 without groups).
    edges_ : ndarray of shape (b,)
        Bin edges for the shift test (:class:`models.calibration.martingale.ShiftTest`): quantiles of the train
        rows' own scores, never a calibration row's or a query's, so the test stays exact.
    calibration_ : ndarray of shape (n,)
        The calibration rows' scores, sorted (after :meth:`calibrate`).
    """

    k: int = 5
    n_components: int = 16
    max_reference: int = 2048
    seed: int = 0
    mean_: np.ndarray = field(default=None, repr=False)
    components_: np.ndarray = field(default=None, repr=False)
    reference_: np.ndarray = field(default=None, repr=False)
    reference_groups_: np.ndarray = field(default=None, repr=False)
    edges_: np.ndarray = field(default=None, repr=False)
    calibration_: np.ndarray = field(default=None, repr=False)

    def _check_params(self, rows: int) -> None:
        for name, value, least in (("k", self.k, 1), ("n_components", self.n_components, 1),
                                   ("max_reference", self.max_reference, 2)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < least:
                raise InputError(f"typicality {name} must be an integer >= {least}; got {value!r}", field=name,
                                 expected=f"an integer >= {least}", received=repr(value))
        if rows <= self.k:
            raise InputError(f"typicality needs more than k = {self.k} reference rows; the train part has {rows}",
                             field="k", expected=f"more than {self.k} train rows", received=str(rows))

    def fit(self, X: np.ndarray, groups=None) -> "Typicality":
        """Fit the projection and the reference on the train part.

        Parameters
        ----------
        X : ndarray of shape (m, d)
            The train part's standardised features.
        groups : array-like of shape (m,), default=None
            Each row's unit, when the calibration leaves units out.

        Returns
        -------
        self : Typicality

        Raises
        ------
        InputError
            A hyperparameter that is not an integer of its least value, or no more train rows than ``k``.
        """
        from sklearn.decomposition import PCA

        X = np.asarray(X, dtype=np.float64)
        self._check_params(len(X))
        rng = np.random.default_rng(self.seed)
        keep = np.sort(rng.choice(len(X), self.max_reference, replace=False)) if len(X) > self.max_reference \
            else np.arange(len(X))
        c = int(min(self.n_components, X.shape[1], len(X) - 1))
        pca = PCA(n_components=c, random_state=self.seed).fit(X[rng.choice(len(X), min(len(X), 10_000),
                                                                             replace=False)])
        self.mean_, self.components_ = pca.mean_.copy(), pca.components_.T.copy()
        self.reference_ = self.project(X[keep]).astype(np.float32)
        self.reference_groups_ = np.full(len(keep), -1, dtype=np.int64) if groups is None \
            else np.asarray(groups, dtype=np.int64)[keep]
        self._prepare()
        self.edges_ = self._edges(X, keep, groups, rng)
        return self

    def _edges(self, X: np.ndarray, keep: np.ndarray, groups, rng) -> np.ndarray:
        """:data:`BINS` quantiles of train rows' scores: rows outside the reference (up to 10,000), else
        each reference row against the others (its own unit left out with ``groups``, as calibrated)."""
        rest = np.setdiff1d(np.arange(len(X)), keep)
        g = None if groups is None else np.asarray(groups, dtype=np.int64)
        if len(rest) >= 100:
            rows = np.sort(rng.choice(rest, min(len(rest), 10_000), replace=False))
            s = self.scores(X[rows], None if g is None else g[rows])
        else:  # every train row is a reference row: leave each one out of its own reference
            s = self.scores(X[keep], None if g is None else g[keep], leave_out=np.arange(len(keep)))
        s = s[np.isfinite(s)]
        if not len(s):
            return np.zeros(1)
        return np.unique(np.quantile(s, np.linspace(0.0, 1.0, BINS + 1)[1:-1]))

    def _prepare(self) -> None:
        """The float32 products the scores use: ``-2 R^T`` and the reference rows' squared norms."""
        R = np.asarray(self.reference_, dtype=np.float32)
        self._minus_2rt = np.ascontiguousarray(-2.0 * R.T)
        self._ref_sq = np.einsum("ij,ij->i", R, R, dtype=np.float32)

    def prepare(self) -> None:
        """Load (or compile) the loop that scores a request's few rows, so that the first request does not
        pay for it."""
        self.scores(self.mean_[None, :])

    def project(self, X: np.ndarray) -> np.ndarray:
        """Rows in the principal axes.

        Parameters
        ----------
        X : array-like of shape (N, d)
            Standardised features.

        Returns
        -------
        ndarray of shape (N, c)
            ``(x - mean_) @ components_``.
        """
        return (np.asarray(X, dtype=np.float64) - self.mean_) @ self.components_

    def scores(self, X: np.ndarray, groups=None, leave_out: np.ndarray | None = None) -> np.ndarray:
        """Each row's mean distance to its ``k`` nearest reference rows.

        Rows go :data:`CHUNK` at a time (a chunk's distance matrix is at most 32 MiB with 2,048 reference rows).

        Parameters
        ----------
        X : array-like of shape (N, d)
            Standardised features.
        groups : array-like of shape (N,), default=None
            Each row's unit: the reference rows of its own unit are left out.
        leave_out : ndarray of shape (N,), default=None
            Row ``i`` leaves reference row ``leave_out[i]`` out (itself, when it is one).

        Returns
        -------
        ndarray of shape (N,)
            ``inf`` for a row left with fewer than ``k`` reference rows.
        """
        k = min(self.k, len(self.reference_))
        if groups is None and leave_out is None and len(X) <= SMALL_ROWS:  # a request's few rows: one call
            from models._typicality import mean_nearest

            return mean_nearest(np.ascontiguousarray(X, dtype=np.float64), self.mean_, self.components_,
                                self._minus_2rt, k)
        Z = self.project(X)
        z_sq = np.einsum("ij,ij->i", Z, Z)
        Z = Z.astype(np.float32)
        if groups is None and leave_out is None and len(Z) <= CHUNK:  # a request: one chunk, nothing left out
            return self._chunk(Z, z_sq, k)
        g = None if groups is None else np.asarray(groups, dtype=np.int64)
        out = np.empty(len(Z))
        for start in range(0, len(Z), CHUNK):
            part = slice(start, start + CHUNK)
            D = Z[part] @ self._minus_2rt  # |z - r|^2 - |z|^2: the row's own |z|^2 is added after the partition
            D += self._ref_sq
            if g is not None:
                D[g[part][:, None] == self.reference_groups_[None, :]] = np.inf
            if leave_out is not None:
                D[np.arange(len(D)), leave_out[part]] = np.inf
            out[part] = self._finish(D, z_sq[part], k)
        return out

    def _chunk(self, Z: np.ndarray, z_sq: np.ndarray, k: int) -> np.ndarray:
        """The scores of float32 projected rows ``Z`` with squared norms ``z_sq`` (float64)."""
        D = Z @ self._minus_2rt  # |z - r|^2 - |z|^2: the row's own |z|^2 is added after the selection
        D += self._ref_sq
        return self._finish(D, z_sq, k)

    @staticmethod
    def _finish(D: np.ndarray, z_sq: np.ndarray, k: int) -> np.ndarray:
        """Each row's mean distance to its ``k`` nearest, from ``D`` (``|z - r|^2 - |z|^2``, overwritten):
        the mean written as the sum over ``k`` (``ndarray.mean``'s arithmetic, without its fixed cost)."""
        near = _k_smallest(D, k)
        return np.sqrt(np.maximum(near + z_sq[:, None], 0.0)).sum(axis=1) / k

    def assess(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The scores of rows and their conservative p-values: what a region answer reports as ``typicality``.

        Parameters
        ----------
        X : array-like of shape (N, d)
            Standardised features.

        Returns
        -------
        scores : ndarray of shape (N,)
            What a shift test ranks.
        p_values : ndarray of shape (N,)
            :func:`conformal_p_values` among the calibration scores, with ``u = 1``.
        """
        from models.centres.search import in_parts

        s = in_parts(self.scores, np.asarray(X, dtype=np.float64))  # each row's score is its own
        return s, conformal_p_values(self.calibration_, s)

    def calibrate(self, X: np.ndarray, groups=None) -> "Typicality":
        """Score the calibration rows and keep their scores, sorted.

        Parameters
        ----------
        X : array-like of shape (n, d)
            The calibration rows' standardised features.
        groups : array-like of shape (n,), default=None
            Each row's unit: left out of its own reference.

        Returns
        -------
        self : Typicality

        Raises
        ------
        InputError
            A calibration row has fewer than ``k`` reference rows outside its own unit.
        """
        s = self.scores(X, groups)
        if not np.isfinite(s).all():
            raise InputError("a calibration row has fewer than k reference rows outside its own unit",
                             field="groups", expected=f"at least k = {self.k} reference rows of other units",
                             received="fewer")
        self.calibration_ = np.sort(s)
        return self

    def recalibrated(self, X: np.ndarray) -> "Typicality":
        """A copy calibrated on fresh rows; the reference and the bins stay, so a new shift test ranks queries
        against the rows the new calibration trusts.

        Parameters
        ----------
        X : array-like of shape (n, d)
            The fresh rows' standardised features.

        Returns
        -------
        Typicality
        """
        import copy

        out = copy.copy(self)
        return out.calibrate(X)

    def p_values(self, X: np.ndarray, u: np.ndarray | None = None) -> np.ndarray:
        """Conformal p-values of rows among the calibration scores.

        Parameters
        ----------
        X : array-like of shape (N, d)
            Standardised features.
        u : ndarray of shape (N,), default=None
            Uniform draws for the smoothed p-value; ``None``: the conservative one.

        Returns
        -------
        ndarray of shape (N,)
        """
        return conformal_p_values(self.calibration_, self.scores(X), u)

    def shift_test(self, delta: float = 0.01, seed: int = 0, tolerance: float | None = None):
        """A new shift test of queries against this calibration.

        Parameters
        ----------
        delta : float, default=0.01
            The test's false-alarm probability over a whole stream.
        seed : int, default=0
            Seeds the smoothed p-values.
        tolerance : float, default=None
            The shift the test tolerates; ``None``: :data:`models.calibration.martingale.TOLERANCE`.

        Returns
        -------
        ShiftTest
        """
        from models.calibration.martingale import TOLERANCE, ShiftTest

        return ShiftTest(self.calibration_, self.edges_, delta=delta, seed=seed,
                         tolerance=TOLERANCE if tolerance is None else tolerance)

    # ------------------------------------------------------------------ bundle
    def to_arrays(self) -> tuple[dict, dict[str, np.ndarray]]:
        """The fitted step in a bundle's form.

        Returns
        -------
        params : dict
            The hyperparameters.
        arrays : dict of str -> ndarray
            The projection, the reference, the bins and the calibration scores.
        """
        return ({"k": int(self.k), "n_components": int(self.n_components), "max_reference": int(self.max_reference),
                 "seed": int(self.seed)},
                {"mean": self.mean_, "components": self.components_, "reference": self.reference_,
                 "reference_groups": self.reference_groups_, "edges": self.edges_, "calibration": self.calibration_})

    @classmethod
    def from_arrays(cls, params: dict, arrays) -> "Typicality":
        """Rebuild the fitted step from what :meth:`to_arrays` gave.

        Parameters
        ----------
        params : dict
            The hyperparameters.
        arrays : dict of str -> ndarray
            The fitted arrays.

        Returns
        -------
        Typicality
        """
        out = cls(**{k: int(params[k]) for k in ("k", "n_components", "max_reference", "seed")})
        out.mean_ = np.asarray(arrays["mean"], dtype=np.float64)
        out.components_ = np.asarray(arrays["components"], dtype=np.float64)
        out.reference_ = np.asarray(arrays["reference"], dtype=np.float32)
        out.reference_groups_ = np.asarray(arrays["reference_groups"], dtype=np.int64)
        out.edges_ = np.asarray(arrays["edges"], dtype=np.float64)
        out.calibration_ = np.asarray(arrays["calibration"], dtype=np.float64)
        out._prepare()
        return out
