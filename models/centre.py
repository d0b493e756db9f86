"""Centre models ``mu(x)``: the paper's multi-output RBF SVR, behind a small interface.

A centre has ``fit(X, Y) -> self`` (checked input), ``predict(X) -> (N, n)`` (rows checked by the
caller) and, to be stored in a bundle, ``to_arrays() -> (params, arrays)`` and
``from_arrays(params, arrays)``; :mod:`models.registry` lists the centres. :class:`SVRCentre` is the
paper's (one ``sklearn.svm.SVR()`` per target, scikit-learn defaults); after fitting it predicts
in numpy from the support vectors, dual coefficients and intercepts, the arrays a bundle stores.
:class:`KNNCentre` is weighted k-nearest-neighbour fingerprinting (scikit-learn's
``KNeighborsRegressor``), stored as its reference rows. :class:`HGBCentre` is gradient-boosted
trees (scikit-learn's ``HistGradientBoostingRegressor``, one per target), stored as its trees'
node arrays and evaluated in numpy, all trees at once. :class:`models.stacking.StackCentre` blends
several of them. :class:`MLPCentre` is a small ReLU network
trained with the project's batched torch trainer (a grid in lockstep, the best on held-out rows)
and stored and evaluated as plain weight arrays: serving never imports torch.
"""

from __future__ import annotations

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.svm import SVR

from models import neighbours
from models._validation import check_Xy
from models.exceptions import InputError


def target_scaling(Y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(mean, scale)`` (n,) that standardise targets ``Y`` (m, n): ``(Y - mean) / scale``; a
    constant target keeps scale 1."""
    sd = Y.std(axis=0)
    return Y.mean(axis=0), np.where(sd > 0, sd, 1.0)


def _kernel_sum(X, x2, A, c, coef, gamma) -> np.ndarray:
    """``exp(-gamma |x - sv|^2) @ coef`` (N, t) from a kernel plan's arrays (see ``SVRCentre._kernel_plan``)."""
    D = X @ A
    D -= c
    D -= gamma * x2
    np.minimum(D, 0.0, out=D)
    np.exp(D, out=D)
    return D @ coef


class SVRCentre(BaseEstimator):
    """One RBF SVR per target.

    Parameters
    ----------
    C, epsilon, gamma : SVR hyperparameters (scikit-learn defaults: 1.0, 0.1, "scale").
    scale_targets : bool, default=False
        Fit each SVR on the standardised target (so ``epsilon`` is in units of the target's std)
        and map back. ``False`` is the paper's protocol (epsilon in raw target units).

    Attributes
    ----------
    support_vectors_ : list of ndarray (s_j, d)
    dual_coef_ : list of ndarray (s_j,)
    intercept_ : ndarray (n,)
    gamma_ : ndarray (n,)
    y_mean_, y_scale_ : ndarray (n,)
    """

    def __init__(self, C: float = 1.0, epsilon: float = 0.1, gamma="scale", scale_targets: bool = False):
        self.C = C
        self.epsilon = epsilon
        self.gamma = gamma
        self.scale_targets = scale_targets

    def fit(self, X, Y) -> "SVRCentre":
        X, Y = check_Xy(X, Y, y_name="Y", min_rows=2)
        self.n_features_in_, self.n_targets_ = X.shape[1], Y.shape[1]
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
        """(N, n) centres of checked rows ``X``: ``(sum_i a_i exp(-gamma |x - sv_i|^2) + b) * y_scale + y_mean`` per target.

        Squared distances come from one matrix product (``|x|^2 + |sv|^2 - 2 x sv^T``, BLAS), with
        ``gamma``, the target scale and the intercept folded into precomputed arrays: a handful of
        vector operations per call, which is what a single-row request pays.
        """
        groups, offset = self._kernel_plan()
        x2 = np.einsum("ij,ij->i", X, X)[:, None]
        if len(groups) == 1:  # one kernel for all targets (gamma="scale")
            out = _kernel_sum(X, x2, *groups[0][:4])
        else:
            out = np.empty((X.shape[0], self.n_targets_))
            for A, c, coef, gamma, targets in groups:
                out[:, targets] = _kernel_sum(X, x2, A, c, coef, gamma)
        out += offset
        return out

    def to_arrays(self) -> tuple[dict, dict[str, np.ndarray]]:
        """``(params, arrays)`` for a bundle: the hyperparameters and the fitted SVR arrays."""
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


class KNNCentre(BaseEstimator):
    """Weighted k-nearest-neighbour regression (fingerprint matching): the mean position of the
    ``n_neighbors`` closest training rows, weighted by inverse distance (``weights="distance"``).

    It answers as ``sklearn.neighbors.KNeighborsRegressor`` does; a bundle stores its reference rows
    (``X_fit_``, ``Y_fit_``) and loading rebuilds the index. Rows are searched by a
    :class:`models.neighbours.ExactIndex` (sparse fingerprints as sparse vectors from search version 2,
    dense rows from version 3; ``sparse_offset_`` and ``sparse_search_``, stored), whose neighbours are
    averaged by scikit-learn's rule (:func:`models.neighbours.distance_weighted_mean`), every row tied
    at the ``n_neighbors``-th distance included (scikit-learn would pick among them by row order).
    """

    def __init__(self, n_neighbors: int = 3, weights: str = "distance"):
        self.n_neighbors = n_neighbors
        self.weights = weights

    def fit(self, X, Y) -> "KNNCentre":
        X, Y = check_Xy(X, Y, y_name="Y", min_rows=1)
        if isinstance(self.n_neighbors, bool) or not isinstance(self.n_neighbors, int) or self.n_neighbors < 1:
            raise InputError(f"n_neighbors must be a positive integer; got {self.n_neighbors!r}", field="n_neighbors",
                             expected="a positive integer", received=repr(self.n_neighbors))
        if self.weights not in ("distance", "uniform"):
            raise InputError(f"weights must be 'distance' or 'uniform'; got {self.weights!r}", field="weights",
                             expected="'distance' or 'uniform'", received=repr(self.weights))
        from models.neighbours import sparse_offset

        return self._index(X, Y, sparse_offset(X))

    def _index(self, X: np.ndarray, Y: np.ndarray, offset: np.ndarray | None,
               version: int | None = None) -> "KNNCentre":
        from sklearn.neighbors import KNeighborsRegressor

        from models.neighbours import SEARCH_VERSION, ExactIndex, algorithm, numpy_search, search_input

        version = SEARCH_VERSION if version is None else version
        self.X_fit_, self.Y_fit_, self.sparse_offset_, self.sparse_search_ = X, Y, offset, version
        self.n_features_in_, self.n_targets_ = X.shape[1], Y.shape[1]
        k = min(self.n_neighbors, X.shape[0])
        if numpy_search(offset, version):
            self.model_ = ExactIndex.of(X, offset, version)
        else:
            self.model_ = KNeighborsRegressor(n_neighbors=k, weights=self.weights,
                                              algorithm=algorithm(offset)).fit(search_input(X, offset), Y)
        return self

    def predict(self, X) -> np.ndarray:
        """(N, n) weighted mean positions of each row's neighbours (every row tied at the k-th distance
        included): numpy on the index prepared at fit or load time. Bundles from before the numpy search
        (no ``dense_search`` / ``sparse_search`` of at least 3 / 2) keep scikit-learn's
        ``KNeighborsRegressor.predict``, as calibrated (about 150 us per call whatever the batch)."""
        if isinstance(self.model_, neighbours.ExactIndex):
            near = self.model_.neighbourhoods(X, self.n_neighbors)
            return neighbours.distance_weighted_mean(X, self.X_fit_, self.Y_fit_, near, self.weights)
        P = self.model_.predict(neighbours.search_input(X, self.sparse_offset_))
        return np.asarray(P, dtype=np.float64).reshape(len(X), self.n_targets_)

    def to_arrays(self):
        from models.neighbours import offset_arrays

        return self.get_params(), {"X": self.X_fit_, "Y": self.Y_fit_,
                                   **offset_arrays(self.sparse_offset_, self.sparse_search_)}

    @classmethod
    def from_arrays(cls, params, arrays):
        from models.neighbours import stored_offset, stored_version

        return cls(**params)._index(np.asarray(arrays["X"], float), np.asarray(arrays["Y"], float),
                                    stored_offset(arrays), stored_version(arrays))


class HGBCentre(BaseEstimator):
    """Gradient-boosted regression trees, one ``HistGradientBoostingRegressor`` per target.

    After fitting, every tree of every target is flattened into node arrays (split feature,
    threshold, children, leaf flag, value) with global indices, which a bundle stores. Prediction is
    numpy (``x[feature] <= threshold`` goes left, scikit-learn's rule for numerical features), so
    serving needs no fitted scikit-learn object: when every tree has at most 8 splits (the default's
    6), through a plan built at fit and load time (:meth:`_table_plan`: every tree's leaf value per
    pattern of its split outcomes, the splits as ranks among each feature's thresholds); deeper trees
    walked level by level. scikit-learn's own ``predict`` costs about 100 us a call on one row and
    its thread pool; the plan about 28 us on one row, 8 ms on 1,024 rows (1,000 trees per target; the
    trees' previous float comparisons through ``np.packbits``: 53 us and 59 ms).

    Parameters
    ----------
    max_iter, learning_rate, max_leaf_nodes, min_samples_leaf, early_stopping : as in scikit-learn;
        the defaults (1000 trees of at most 7 leaves of at least 3 rows, learning rate 0.1, early
        stopping on a 10 % validation slice only above 10,000 rows, scikit-learn's ``"auto"``) suit
        the small tabular sets of the paper, where scikit-learn's own defaults (100 trees of 31
        leaves of at least 20 rows, stopped early) underfit.
    random_state : int, default=0
    """

    def __init__(self, max_iter: int = 1000, learning_rate: float = 0.1, max_leaf_nodes: int = 7,
                 min_samples_leaf: int = 3, early_stopping: str | bool = "auto", random_state: int = 0):
        self.max_iter = max_iter
        self.learning_rate = learning_rate
        self.max_leaf_nodes = max_leaf_nodes
        self.min_samples_leaf = min_samples_leaf
        self.early_stopping = early_stopping
        self.random_state = random_state

    def fit(self, X, Y) -> "HGBCentre":
        from sklearn.ensemble import HistGradientBoostingRegressor
        from threadpoolctl import threadpool_limits

        X, Y = check_Xy(X, Y, y_name="Y", min_rows=2)
        self.n_features_in_, self.n_targets_ = X.shape[1], Y.shape[1]
        self.trees_ = []
        # one OpenMP thread: in a process where torch has run (LMVE, the MLP centre) a thread per core
        # made these fits about 20x slower on 2 cores (tests/models/test_bundle.py: 630 s against 44 s)
        with threadpool_limits(1, user_api="openmp"):
            for j in range(Y.shape[1]):
                model = HistGradientBoostingRegressor(max_iter=self.max_iter, learning_rate=self.learning_rate,
                                                      max_leaf_nodes=self.max_leaf_nodes,
                                                      min_samples_leaf=self.min_samples_leaf,
                                                      early_stopping=self.early_stopping,
                                                      random_state=self.random_state).fit(X, Y[:, j])
                self.trees_.append(self._flatten(model))
        return self._prepare()

    def _prepare(self) -> "HGBCentre":
        """The leaf tables and the prediction plan of the fitted trees."""
        self.tables_ = [self._leaf_table(t) for t in self.trees_]
        self.plan_ = (self._table_plan(self.tables_, self.trees_, self.n_features_in_)
                      if all(t is not None for t in self.tables_) else None)
        return self

    @staticmethod
    def _flatten(model) -> dict[str, np.ndarray]:
        """One target's trees as node arrays with global child indices, plus each tree's root."""
        nodes = [iteration[0].nodes for iteration in model._predictors]
        roots = np.cumsum([0] + [len(n) for n in nodes[:-1]]).astype(np.int64)
        cat = np.concatenate(nodes) if nodes else np.zeros(0, dtype=[("is_categorical", "u1")])
        if nodes and cat["is_categorical"].any():  # pragma: no cover - features are numerical here
            raise InputError("HGBCentre stores numerical splits only")
        offset = np.repeat(roots, [len(n) for n in nodes])
        return {"feature": cat["feature_idx"].astype(np.int64), "threshold": cat["num_threshold"].astype(np.float64),
                "left": cat["left"].astype(np.int64) + offset, "right": cat["right"].astype(np.int64) + offset,
                "leaf": cat["is_leaf"].astype(bool), "value": cat["value"].astype(np.float64), "roots": roots,
                "baseline": np.asarray(model._baseline_prediction, dtype=np.float64).reshape(1)}

    #: trees of at most this many split nodes are evaluated through a table of their leaves
    TABLE_BITS = 8

    @classmethod
    def _leaf_table(cls, t: dict) -> dict | None:
        """Trees of at most :attr:`TABLE_BITS` split nodes as a lookup: each tree's split nodes
        (feature, threshold; padded with a never-read split), and its leaf value for every pattern
        of their outcomes (bit ``b`` set: split ``b`` goes left). ``None`` for larger trees."""
        n_nodes, roots = len(t["leaf"]), t["roots"]
        tree_of = np.repeat(np.arange(len(roots)), np.diff(np.append(roots, n_nodes)))
        inner = np.flatnonzero(~t["leaf"])
        counts = np.bincount(tree_of[inner], minlength=len(roots))
        bits = int(counts.max()) if inner.size else 0
        if bits > cls.TABLE_BITS:
            return None
        bits = max(bits, 1)
        first = np.concatenate([[0], np.cumsum(counts)[:-1]])
        slot = np.zeros(n_nodes, dtype=np.int64)  # a split node's bit within its tree
        slot[inner] = np.arange(inner.size) - first[tree_of[inner]]
        feature = np.zeros((len(roots), bits), dtype=np.int64)
        threshold = np.full((len(roots), bits), np.inf)
        feature[tree_of[inner], slot[inner]] = t["feature"][inner]
        threshold[tree_of[inner], slot[inner]] = t["threshold"][inner]
        codes = np.arange(2**bits)[None, :]
        node = np.broadcast_to(roots[:, None], (len(roots), 2**bits)).copy()
        for _ in range(bits):  # a path has at most `bits` splits
            left = (codes >> slot[node]) & 1
            node = np.where(t["leaf"][node], node, np.where(left == 1, t["left"][node], t["right"][node]))
        return {"feature": feature.ravel(), "threshold": threshold.ravel(), "bits": bits,
                "value": t["value"][node]}

    @staticmethod
    def _table_plan(tables: list[dict], trees: list[dict], n_features: int) -> dict:
        """Every target's trees in one set of arrays, for :meth:`predict`.

        Each tree is padded to ``bits`` splits (a padded split never decides: threshold +inf, its table
        repeated) and each target to the same number of trees (padding trees are worth 0). A split
        ``x[f] <= t`` becomes ``bin(x[f]) <= rank(t)``, ``bin`` and ``rank`` counting the thresholds of
        ``f`` below the value (the same outcome for every ``x``), so the features gathered per split are
        small integers, not floats. Splits are stored bit-major, ``(bits, targets x trees)``."""
        n, bits = len(tables), max(t["bits"] for t in tables)
        n_trees = max(len(t["roots"]) for t in trees)
        feature = np.zeros((n, n_trees, bits), dtype=np.int64)
        threshold = np.full((n, n_trees, bits), np.inf)
        value = np.zeros((n, n_trees, 2**bits))
        for j, t in enumerate(tables):
            m, b = len(trees[j]["roots"]), t["bits"]
            feature[j, :m, :b] = t["feature"].reshape(m, b)
            threshold[j, :m, :b] = t["threshold"].reshape(m, b)
            value[j, :m] = np.tile(t["value"], (1, 2 ** (bits - b)))  # code & (2^b - 1) picks the leaf
        feature = feature.transpose(2, 0, 1).reshape(bits, -1)
        threshold = threshold.transpose(2, 0, 1).reshape(bits, -1)
        cuts = [np.unique(threshold[(feature == f) & np.isfinite(threshold)]) for f in range(n_features)]
        width = max([1] + [len(c) for c in cuts])
        dtype = np.uint8 if width < 255 else np.uint16
        rank = np.empty(feature.shape, dtype=dtype)
        padded = np.full((n_features, width), np.inf)
        for f, c in enumerate(cuts):
            on = feature == f
            rank[on] = np.searchsorted(c, threshold[on], side="left")
            padded[f, :len(c)] = c
        return {"bits": bits, "n_trees": n_trees, "feature": feature.ravel(), "rank": rank.ravel(),
                "cuts": cuts, "padded_cuts": padded, "dtype": dtype, "value": value.ravel(),
                "offset": np.arange(n * n_trees, dtype=np.intp) << bits,
                "baseline": np.array([t["baseline"][0] for t in trees])}

    #: rows per block of :meth:`predict` (its gathered bins take rows x bits x trees bytes: 1.5 MB for 2 x 1,000
    #: trees of 6 splits; 1,024 rows in one block took twice as long as in blocks of 128)
    BLOCK_ROWS = 128

    def predict(self, X) -> np.ndarray:
        """The trees' sum per target. Through the plan (:meth:`_table_plan`): each row's features as bins
        among their thresholds, every split's outcome a comparison of small integers, the bits of each
        tree's pattern or-ed together, one lookup per tree; or by walking deeper trees level by level."""
        plan = self.plan_
        if plan is None:
            return np.column_stack([self.trees_[j]["value"][self._walk(self.trees_[j], X)].sum(axis=1)
                                    + self.trees_[j]["baseline"][0] for j in range(self.n_targets_)])
        out = np.empty((X.shape[0], self.n_targets_))
        for s in range(0, X.shape[0], self.BLOCK_ROWS):
            out[s:s + self.BLOCK_ROWS] = self._predict_block(X[s:s + self.BLOCK_ROWS], plan)
        return out

    def _predict_block(self, X: np.ndarray, plan: dict) -> np.ndarray:
        cuts = plan["padded_cuts"]
        if X.shape[0] * cuts.size <= 65536:  # bins by one broadcast comparison
            binned = (cuts < X[:, :, None]).sum(axis=2, dtype=plan["dtype"])
        else:  # by one binary search per feature
            binned = np.empty(X.shape, dtype=plan["dtype"])
            for f, c in enumerate(plan["cuts"]):
                binned[:, f] = np.searchsorted(c, X[:, f], side="left")
        bits = plan["bits"]  # below, rows along the last axis: each split gathers one contiguous row of bins
        left = np.ascontiguousarray(binned.T)[plan["feature"]] <= plan["rank"][:, None]
        left = left.view(np.uint8).reshape(bits, -1, X.shape[0])
        code = left[0].copy()  # at most 8 bits: a byte per tree and row
        for b in range(1, bits):
            code |= left[b] << b
        code = code.astype(np.intp)
        code += plan["offset"][:, None]
        leaves = plan["value"].take(code).reshape(self.n_targets_, plan["n_trees"], X.shape[0])
        return leaves.sum(axis=1).T + plan["baseline"]

    @staticmethod
    def _walk(t: dict, X: np.ndarray) -> np.ndarray:
        """(N, trees) leaf of every row in every tree, level by level (``x[feature] <= threshold`` goes
        left, scikit-learn's rule for numerical features)."""
        rows = np.arange(X.shape[0])[:, None]
        node = np.broadcast_to(t["roots"], (X.shape[0], len(t["roots"]))).copy()  # (N, trees)
        while True:
            inner = ~t["leaf"][node]
            if not inner.any():
                return node
            go_left = X[rows, t["feature"][node]] <= t["threshold"][node]
            node = np.where(inner, np.where(go_left, t["left"][node], t["right"][node]), node)

    def to_arrays(self):
        arrays = {f"{k}_{j}": v for j, t in enumerate(self.trees_) for k, v in t.items()}
        return {**self.get_params(), "n_features": self.n_features_in_, "n_targets": self.n_targets_}, arrays

    @classmethod
    def from_arrays(cls, params, arrays):
        params = dict(params)
        n_features, n_targets = int(params.pop("n_features")), int(params.pop("n_targets"))
        est = cls(**params)
        keys = ("feature", "threshold", "left", "right", "leaf", "value", "roots", "baseline")
        est.trees_ = [{k: np.asarray(arrays[f"{k}_{j}"]) for k in keys} for j in range(n_targets)]
        est.n_features_in_, est.n_targets_ = n_features, n_targets
        return est._prepare()


class MLPCentre(BaseEstimator):
    """A ReLU MLP regressing the standardised targets, trained with :mod:`models._lockstep`.

    The grid ``learning_rates x dropouts`` trains in lockstep (one batched network) with Adam on
    the mean squared error, each configuration early-stopped on a held-out ``held_out`` share of
    the training rows (best weights kept); the configuration of smallest held-out error is the
    centre. After fitting it is plain arrays (``coefs_``, ``intercepts_``, the target mean and
    scale) evaluated in numpy by :func:`models._mlp.mlp_forward`. Fitting needs torch (the
    training install); predicting does not.

    Parameters
    ----------
    hidden : tuple of int
        Hidden widths.
    learning_rates, dropouts : tuple of float
        The grid (every pair trains).
    max_steps, eval_every, patience, batch_size : int
        The schedule (mini-batches of ``batch_size`` rows; full batch when the data is smaller).
    held_out : float
        Share of the training rows held out for early stopping and the choice of configuration.
    seed : int
    device : str
        ``"auto"`` (CUDA when present), ``"cpu"`` or ``"cuda[:i]"``.
    """

    def __init__(self, hidden: tuple[int, ...] = (128, 64), learning_rates: tuple[float, ...] = (1e-3, 3e-3),
                 dropouts: tuple[float, ...] = (0.0, 0.1), max_steps: int = 5000, eval_every: int = 50,
                 patience: int = 10, batch_size: int = 256, held_out: float = 0.1, seed: int = 0,
                 device: str = "auto"):
        self.hidden = hidden
        self.learning_rates = learning_rates
        self.dropouts = dropouts
        self.max_steps = max_steps
        self.eval_every = eval_every
        self.patience = patience
        self.batch_size = batch_size
        self.held_out = held_out
        self.seed = seed
        self.device = device

    def fit(self, X, Y) -> "MLPCentre":
        X, Y = check_Xy(X, Y, y_name="Y", min_rows=10)
        if not 0.0 < self.held_out < 0.5:
            raise InputError(f"held_out must lie in (0, 0.5); got {self.held_out!r}", field="held_out",
                             expected="a share in (0, 0.5)", received=repr(self.held_out))
        import torch

        from models._lockstep import BatchedMLP, Schedule, resolve_device, run_phase

        dev = resolve_device(self.device)
        self.y_mean_, self.y_scale_ = target_scaling(Y)
        Z = (Y - self.y_mean_) / self.y_scale_
        rng = np.random.default_rng(self.seed)
        perm = rng.permutation(X.shape[0])
        n_held = max(1, int(round(self.held_out * X.shape[0])))
        held, fit = perm[:n_held], perm[n_held:]
        grid = [(lr, p) for lr in self.learning_rates for p in self.dropouts]
        gen = torch.Generator().manual_seed(self.seed)
        net = BatchedMLP([X.shape[1], *self.hidden, Y.shape[1]], [p for _, p in grid], gen).to(dev)

        def t(a):
            return torch.as_tensor(a, dtype=torch.float32, device=dev)

        def mse(out, y):
            return ((out - y) ** 2).mean(dim=(1, 2))

        schedule = Schedule(max_steps=self.max_steps, eval_every=self.eval_every, patience=self.patience,
                            batch_size=self.batch_size)
        dropout_gen = torch.Generator(device=dev).manual_seed(self.seed + 1)
        run_phase(net, [lr for lr, _ in grid], mse, (t(X[fit]), t(Z[fit])), (t(X[held]), t(Z[held])), schedule,
                  torch.Generator(device=dev).manual_seed(self.seed + 2), dropout_gen, desc="mlp centre")
        net.eval()
        with torch.no_grad():
            errors = mse(net(t(X[held])), t(Z[held])).cpu().numpy()
        self.config_index_ = int(np.argmin(errors))
        self.held_out_mse_ = float(errors[self.config_index_])
        layers = net.numpy_layers(self.config_index_)
        self.coefs_, self.intercepts_ = [W for W, _ in layers], [b for _, b in layers]
        self.n_features_in_, self.n_targets_ = X.shape[1], Y.shape[1]
        return self

    def predict(self, X) -> np.ndarray:
        from models._mlp import mlp_forward

        return mlp_forward(np.asarray(X, dtype=np.float64), self.coefs_, self.intercepts_) * self.y_scale_ + self.y_mean_

    def to_arrays(self):
        arrays = {"y_mean": self.y_mean_, "y_scale": self.y_scale_}
        for i, (W, b) in enumerate(zip(self.coefs_, self.intercepts_)):
            arrays[f"W{i}"], arrays[f"b{i}"] = W, b
        params = {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.get_params().items()}
        return params, arrays

    @classmethod
    def from_arrays(cls, params, arrays):
        params = {k: (tuple(v) if isinstance(v, list) else v) for k, v in params.items()}
        self = cls(**params)
        n_layers = sum(1 for k in arrays if str(k).startswith("W"))
        self.coefs_ = [np.asarray(arrays[f"W{i}"], float) for i in range(n_layers)]
        self.intercepts_ = [np.asarray(arrays[f"b{i}"], float) for i in range(n_layers)]
        self.y_mean_, self.y_scale_ = np.asarray(arrays["y_mean"], float), np.asarray(arrays["y_scale"], float)
        self.n_features_in_, self.n_targets_ = self.coefs_[0].shape[0], self.coefs_[-1].shape[1]
        return self


class ClientCentre(BaseEstimator):
    """The client's own estimate as the centre: no model. A bundle with this centre learned its
    shapes and calibration on the residuals of the client's estimates, so every request brings
    them (``centers``, (N, n) in target units); :meth:`predict` refuses to guess."""

    def fit(self, X, Y) -> "ClientCentre":
        X, Y = check_Xy(X, Y, y_name="Y")
        self.n_features_in_, self.n_targets_ = X.shape[1], Y.shape[1]
        return self

    def predict(self, X) -> np.ndarray:
        raise InputError("this bundle's centre is the client's own estimate: send `centers`, one estimate per row "
                         f"({self.n_targets_} values each, in target units)", field="centers",
                         expected=f"(N, {self.n_targets_}) estimates", received="none")

    def to_arrays(self):
        return {"n_features": self.n_features_in_, "n_targets": self.n_targets_}, {}

    @classmethod
    def from_arrays(cls, params, arrays):
        est = cls()
        est.n_features_in_, est.n_targets_ = int(params["n_features"]), int(params["n_targets"])
        return est


class ConstantCentre(BaseEstimator):
    """``mu(x) = mean of the training targets``: a reference centre (no features used)."""

    def fit(self, X, Y) -> "ConstantCentre":
        X, Y = check_Xy(X, Y, y_name="Y")
        return self.set_fitted(Y.mean(axis=0), X.shape[1])

    def predict(self, X) -> np.ndarray:
        return np.broadcast_to(self.mean_, (np.shape(X)[0], self.n_targets_)).copy()

    def to_arrays(self):
        return {"n_features": self.n_features_in_}, {"mean": self.mean_}

    @classmethod
    def from_arrays(cls, params, arrays):
        return cls().set_fitted(arrays["mean"], int(params["n_features"]))

    def set_fitted(self, mean, n_features: int) -> "ConstantCentre":
        self.mean_ = np.asarray(mean, float)
        self.n_features_in_, self.n_targets_ = n_features, self.mean_.shape[0]
        return self
