"""Gradient-boosted trees (scikit-learn's ``HistGradientBoostingRegressor``, one per target), stored
as their trees' node arrays and evaluated in numpy, all trees at once."""

from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np

from models.centres.base import Centre
from models.exceptions import InputError


#: the fewest input cells (rows x columns) whose targets are fitted side by side: below, a booster's
#: Python loop between its compiled calls holds the GIL most of the time, and side by side is slower
SIDE_BY_SIDE_CELLS = 1_000_000


@dataclass(eq=False, repr=False)
class HGBCentre(Centre):
    """Gradient-boosted regression trees, one ``HistGradientBoostingRegressor`` per target.

    After fitting, every tree of every target is flattened into node arrays (split feature,
    threshold, children, leaf flag, value) with global indices, which a bundle stores. Prediction is
    numpy (``x[feature] <= threshold`` goes left, scikit-learn's rule for numerical features), so
    serving needs no fitted scikit-learn object: when every tree has at most 8 splits (the default's
    6), through a plan built at fit and load time (:meth:`_table_plan`: every tree's leaf value per
    pattern of its split outcomes, the splits as ranks among each feature's thresholds); deeper trees
    walked level by level.

    Parameters
    ----------
    max_iter, learning_rate, max_leaf_nodes, min_samples_leaf, early_stopping : as in scikit-learn;
        the defaults (1000 trees of at most 7 leaves of at least 3 rows, learning rate 0.1, early
        stopping on a 10 % validation slice only above 10,000 rows, scikit-learn's ``"auto"``) suit
        the small tabular sets of the paper, where scikit-learn's own defaults (100 trees of 31
        leaves of at least 20 rows, stopped early) underfit.
    random_state : int, default=0
    """

    max_iter: int = 1000
    learning_rate: float = 0.1
    max_leaf_nodes: int = 7
    min_samples_leaf: int = 3
    early_stopping: str | bool = "auto"
    random_state: int = 0

    def fit(self, X, Y) -> "HGBCentre":
        """Fit one booster per target.

        Two targets or more of at least ``SIDE_BY_SIDE_CELLS`` input cells are fitted side by side on the idle
        cores (:func:`models.parallel.side_by_side`, one OpenMP thread each), else one after the other.

        Parameters
        ----------
        X : array-like of shape (m, d)
            Standardised features of the training rows.
        Y : array-like of shape (m, n)
            Their true positions.

        Returns
        -------
        self : HGBCentre

        Raises
        ------
        InputError
            Fewer than two rows, or rows that are not finite or do not match.
        """
        X, Y = self._fit_input(X, Y, min_rows=2)
        columns = self._varying(X)
        if columns.size < X.shape[1]:
            X = np.ascontiguousarray(X[:, columns])
        targets = range(Y.shape[1])
        if len(targets) > 1 and X.size >= SIDE_BY_SIDE_CELLS:
            from models.parallel import side_by_side

            self.trees_ = side_by_side(lambda j: self._fit_target(X, Y[:, j], 1, columns), targets)
        else:
            threads = self._threads()
            self.trees_ = [self._fit_target(X, Y[:, j], threads, columns) for j in targets]
        return self._prepare()

    @staticmethod
    def _varying(X: np.ndarray) -> np.ndarray:
        """The columns of ``X`` that take more than one value (at least the first column).

        A booster never splits on a constant column (it has one bin), but builds its histogram at
        every node, so the fit leaves them out and maps the trees' features back (:meth:`_flatten`):
        the same trees, split for split (fingerprints hold many transmitters never heard)."""
        varying = np.flatnonzero(X.max(axis=0) > X.min(axis=0))
        return varying if varying.size else np.zeros(1, dtype=np.int64)

    def _fit_target(self, X, y, threads: int, columns: np.ndarray) -> dict:
        """The flattened trees of one target's booster, fitted on ``threads`` OpenMP threads on the input
        columns ``columns`` (``X`` holds those columns only)."""
        from sklearn.ensemble import HistGradientBoostingRegressor
        from threadpoolctl import threadpool_limits

        with threadpool_limits(threads, user_api="openmp"):
            model = HistGradientBoostingRegressor(max_iter=self.max_iter, learning_rate=self.learning_rate,
                                                  max_leaf_nodes=self.max_leaf_nodes,
                                                  min_samples_leaf=self.min_samples_leaf,
                                                  early_stopping=self.early_stopping,
                                                  random_state=self.random_state).fit(X, y)
        return self._flatten(model, columns)

    @staticmethod
    def _threads() -> int:
        """scikit-learn's OpenMP threads for a fit: one in a process that has loaded torch (where OpenMP's
        threads and torch's contend), else the idle cores (:func:`models.nn.threads.idle_cores`)."""
        from models.nn.threads import idle_cores

        return 1 if "torch" in sys.modules else idle_cores()

    def _prepare(self) -> "HGBCentre":
        """The leaf tables and the prediction plan of the fitted trees."""
        self.tables_ = [self._leaf_table(t) for t in self.trees_]
        self.plan_ = (self._table_plan(self.tables_, self.trees_, self.n_features_in_)
                      if all(t is not None for t in self.tables_) else None)
        return self

    @staticmethod
    def _flatten(model, columns: np.ndarray) -> dict[str, np.ndarray]:
        """One target's trees as node arrays with global child indices, plus each tree's root; the
        booster's feature ``k`` is the input column ``columns[k]``."""
        nodes = [iteration[0].nodes for iteration in model._predictors]
        roots = np.cumsum([0] + [len(n) for n in nodes[:-1]]).astype(np.int64)
        cat = np.concatenate(nodes) if nodes else np.zeros(0, dtype=[("is_categorical", "u1")])
        if nodes and cat["is_categorical"].any():  # pragma: no cover - features are numerical here
            raise InputError("HGBCentre stores numerical splits only")
        offset = np.repeat(roots, [len(n) for n in nodes])
        return {"feature": np.asarray(columns, dtype=np.int64)[cat["feature_idx"]], "threshold": cat["num_threshold"].astype(np.float64),
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
        """The trees' sum per target.

        Through the plan: each row's features as bins among their thresholds, every split's outcome a
        comparison of small integers, the bits of each tree's pattern or-ed together, one lookup per tree; or
        by walking deeper trees level by level.

        Parameters
        ----------
        X : ndarray of shape (N, d)
            Checked standardised features.

        Returns
        -------
        ndarray of shape (N, n)
        """
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
