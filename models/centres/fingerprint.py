"""Fingerprint matching on readings: weighted k-nearest neighbours in a representation chosen by held-out units.

:class:`FingerprintCentre` takes the model's standardised features like every centre, but searches the RSSI
readings they came from (:class:`models.centres.representations.ReadingSpace`) in one of
:data:`~models.centres.representations.REPRESENTATIONS`, with a cutoff below which a reading counts as not
heard, ``k`` neighbours and inverse-distance or equal weights. Left at ``"auto"``, each is chosen by
:func:`tune`: every training row's neighbours searched among the rows of *other* units (phones, users, or
positions), every configuration scored on the same search, each unit weighing the same. The textbook
configuration (exponential readings, 3 neighbours, inverse distance) is always among them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from models.centres.base import Centre
from models.centres.errors import criterion as unit_criterion
from models.centres.knn import KNNCentre
from models.centres.representations import ReadingSpace, check_representation, represent
from models.exceptions import InputError

#: what ``"auto"`` chooses among
GRID_REPRESENTATIONS = ("dbm", "exponential", "powed", "relative")
#: cutoffs, dB above the weakest reading of the training rows (0: every reading counts); ``"dbm"`` only
GRID_CUTOFFS_DB = (0.0, 4.0, 9.0)
GRID_K = (1, 3, 5, 7, 9, 11)
GRID_WEIGHTS = ("distance", "uniform")
#: the textbook's configuration, always a candidate
TEXTBOOK = {"representation": "exponential", "cutoff_db": 0.0, "n_neighbors": 3, "weights": "distance"}
#: queries per block of the leave-out search (a block's float32 distances to 20,000 rows: 40 MB)
BLOCK = 512
#: up to this many units :func:`tune` leaves each out alone; beyond (positions of a survey, rows), units go to
#: ``FOLDS`` seeded folds, as the centre's selection cuts them
MAX_UNITS, FOLDS = 20, 5
#: :func:`tune` scores at most this many rows (a seeded random subset beyond), each searched among all the rows
#: of other units: the configurations' errors differ by far more than such a sample's noise
TUNE_ROWS = 4096


@dataclass(eq=False, repr=False)
class FingerprintCentre(Centre):
    """Weighted k-NN on the readings, each hyperparameter fixed or chosen by :func:`tune`.

    Parameters
    ----------
    representation : str, default="auto"
        One of :data:`~models.centres.representations.REPRESENTATIONS`, or ``"auto"``.
    cutoff_db : float or "auto", default="auto"
        Readings less than this many dB above the weakest training reading count as not heard.
    n_neighbors : int or "auto", default="auto"
    weights : {"distance", "uniform", "auto"}, default="auto"
    space : ReadingSpace or None, default=None
        How the standardised features map back to readings; ``None``: the features are searched as they are
        (no RSSI step: ``representation`` must then be ``"dbm"`` or ``"auto"``).
    criterion : {"rmse", "quantile"}, default="rmse"
        What :func:`tune` minimises: each unit's RMSE, or the errors' quantile at ``coverage``, units weighing
        the same.
    coverage : float, default=0.9
    seed : int, default=0
        Draws the rows :func:`tune` scores on a large survey.

    Attributes
    ----------
    chosen_ : dict
        The configuration searched (``representation``, ``cutoff_db``, ``n_neighbors``, ``weights``).
    tuning_ : dict or None
        :func:`tune`'s record when anything was ``"auto"``.
    knn_ : KNNCentre
        The exact search over every training row's representation.
    """

    representation: str = "auto"
    cutoff_db: float | str = "auto"
    n_neighbors: int | str = "auto"
    weights: str = "auto"
    space: ReadingSpace | None = None
    criterion: str = "rmse"
    coverage: float = 0.9
    seed: int = 0

    def fit(self, X, Y, groups=None) -> "FingerprintCentre":
        """Fit on the training rows, choosing what is ``"auto"`` by :func:`tune`.

        Parameters
        ----------
        X : array-like of shape (m, d)
            Standardised features of the training rows.
        Y : array-like of shape (m, n)
            Their true positions.
        groups : array-like of shape (m,), default=None
            Each row's unit (phone, user or position), which :func:`tune` holds out; ``None``: each row alone.

        Returns
        -------
        self : FingerprintCentre

        Raises
        ------
        InputError
            Rows that are not finite or do not match, a hyperparameter out of its range, or fewer than two
            units to choose by.
        """
        X, Y = self._fit_input(X, Y)
        fixed = self._fixed()
        if any(v == "auto" for v in fixed.values()):
            self.tuning_ = tune(self._readings(X), Y, groups, self._floor(), self._weakest(X), self._reference(),
                                fixed, self.criterion, self.coverage, readings=self.space is not None,
                                seed=self.seed)
            self.chosen_ = dict(self.tuning_["chosen"])
        else:
            self.tuning_, self.chosen_ = None, fixed
        return self._index(X, Y)

    def _fixed(self) -> dict:
        """The hyperparameters as given, checked (``"auto"`` left as it is)."""
        if self.representation != "auto":
            check_representation(self.representation)
            if self.space is None and self.representation not in ("dbm", "positive"):
                raise InputError(f"representation {self.representation!r} needs readings; these features have no "
                                 "RSSI step", field="representation", expected="dbm or auto", received=self.representation)
        k = self.n_neighbors
        if k != "auto" and (isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1):
            raise InputError(f"n_neighbors must be a positive integer or 'auto'; got {k!r}", field="n_neighbors",
                             expected="a positive integer or 'auto'", received=repr(k))
        if self.weights not in ("distance", "uniform", "auto"):
            raise InputError(f"weights must be 'distance', 'uniform' or 'auto'; got {self.weights!r}", field="weights",
                             expected="distance | uniform | auto", received=repr(self.weights))
        return {"representation": self.representation, "cutoff_db": self.cutoff_db, "n_neighbors": k,
                "weights": self.weights}

    def _readings(self, X: np.ndarray) -> np.ndarray:
        return X if self.space is None else self.space.readings(X)

    def _floor(self) -> float:
        return 0.0 if self.space is None else self.space.floor

    def _weakest(self, X: np.ndarray) -> float:
        return float(X.min()) if self.space is None else self.space.weakest

    def _reference(self) -> float:
        return 0.0 if self.space is None else self.space.reference

    def _represent(self, X: np.ndarray) -> np.ndarray:
        """What the search sees of standardised rows ``X``."""
        if self.space is None:  # features as they are, about the training rows' minimum
            return X - self.low_
        c = self.chosen_
        cutoff = self.space.floor if not c["cutoff_db"] else self.space.weakest + float(c["cutoff_db"])
        return represent(self.space.readings(X), c["representation"], cutoff, self.space.floor, self.space.reference)

    def _index(self, X: np.ndarray, Y: np.ndarray) -> "FingerprintCentre":
        self.low_ = X.min(axis=0) if self.space is None else None
        c = self.chosen_
        self.knn_ = KNNCentre(n_neighbors=int(c["n_neighbors"]), weights=c["weights"], max_rows=None).fit(
            self._represent(X), Y)
        return self

    def predict(self, X) -> np.ndarray:
        """The weighted mean positions of each row's neighbours among the represented training rows.

        Parameters
        ----------
        X : ndarray of shape (N, d)
            Checked standardised features.

        Returns
        -------
        ndarray of shape (N, n)
            Every row tied at the ``k``-th distance included (:class:`~models.centres.knn.KNNCentre`).
        """
        from models.centres.search import in_parts

        return in_parts(lambda part: self.knn_.predict(self._represent(part)), np.asarray(X, dtype=np.float64))

    def prepare(self) -> None:
        self.knn_.prepare()

    def to_arrays(self):
        knn_params, knn_arrays = self.knn_.to_arrays()
        params = {"chosen": self.chosen_, "criterion": self.criterion, "coverage": self.coverage,
                  "knn": knn_params, "tuning": self.tuning_, "n_features_in": self.n_features_in_}
        arrays = {f"knn_{k}": v for k, v in knn_arrays.items()}
        if self.space is not None:
            space_params, space_arrays = self.space.to_arrays()
            params["space"] = space_params
            arrays.update(space_arrays)
        else:
            arrays["low"] = self.low_
        return params, arrays

    @classmethod
    def from_arrays(cls, params, arrays):
        space = ReadingSpace.from_arrays(params["space"], arrays) if "space" in params else None
        c = params["chosen"]
        out = cls(representation=c["representation"], cutoff_db=c["cutoff_db"], n_neighbors=c["n_neighbors"],
                  weights=c["weights"], space=space, criterion=params["criterion"], coverage=params["coverage"])
        out.chosen_, out.tuning_ = dict(c), params.get("tuning")
        out.low_ = None if space is not None else np.asarray(arrays["low"], float)
        knn = {k[4:]: arrays[k] for k in arrays if k.startswith("knn_")}
        out.knn_ = KNNCentre.from_arrays(params["knn"], knn)
        out.n_features_in_, out.n_targets_ = int(params["n_features_in"]), out.knn_.n_targets_
        return out


def tune(R: np.ndarray, Y: np.ndarray, units, floor: float, weakest: float, reference: float, fixed: dict,
         criterion: str = "rmse", coverage: float = 0.9, readings: bool = True, seed: int = 0) -> dict:
    """The configuration of smallest error when every row's centre comes from the rows of other units.

    Parameters
    ----------
    R : ndarray of shape (m, c)
        Readings (dBm, "not heard" = ``floor``), or plain features with ``readings=False``.
    Y : ndarray of shape (m, n)
        Positions.
    units : array-like of shape (m,) or None
        Each row's unit: its neighbours are searched among the other units' rows (``None``: each row a unit).
        Beyond :data:`MAX_UNITS` units, among the rows of the other :data:`FOLDS` folds of whole units.
    floor, weakest, reference : float
        "Not heard", the weakest reading and the relative representation's anchor (:func:`represent`).
    fixed : dict
        ``representation``, ``cutoff_db``, ``n_neighbors``, ``weights``: a value, or ``"auto"`` to search
        :data:`GRID_REPRESENTATIONS` (with :data:`GRID_CUTOFFS_DB` for ``"dbm"``), :data:`GRID_K`,
        :data:`GRID_WEIGHTS`.
    criterion : {"rmse", "quantile"}
        Each unit's RMSE averaged over the units, or the Euclidean errors' ``coverage`` quantile with every unit
        weighing the same (plain RMSE and quantile over folds).
    coverage : float
    readings : bool
        Whether ``R`` holds readings (``False``: only ``"dbm"``, the features about their minimum).
    seed : int
        Draws the :data:`TUNE_ROWS` rows scored when there are more.

    Returns
    -------
    dict
        ``chosen`` (the configuration), ``error`` (its), ``textbook`` (the textbook configuration's error, when
        searched), ``candidates`` (every configuration with its error, best first), ``units``, ``criterion``,
        ``held_out`` (each unit, or the folds) and ``rule``: with each unit held out alone, the RMSE criterion and
        the representation searched, the one-standard-error rule's record (:func:`_plainest`: ``chosen`` may
        then trail the lowest error by up to a standard error); else ``None``.

    Raises
    ------
    InputError
        Fewer than two units, or ``criterion`` unknown.
    """
    if criterion not in ("rmse", "quantile"):
        raise InputError(f"criterion must be 'rmse' or 'quantile'; got {criterion!r}", field="criterion",
                         expected="rmse | quantile", received=repr(criterion))
    codes = np.arange(len(R)) if units is None else np.unique(np.asarray(units), return_inverse=True)[1].ravel()
    n_units = int(codes.max()) + 1 if len(codes) else 0
    if n_units > MAX_UNITS:  # many units (positions, rows): whole units in folds, each fold left out
        codes = np.random.default_rng(seed).permutation(n_units)[codes] % FOLDS
    sizes = np.bincount(codes)
    if len(sizes) < 2:
        raise InputError("choosing the fingerprint configuration needs rows of at least two units; got one",
                         field="groups", expected="at least 2 units", received="1")
    ks = GRID_K if fixed["n_neighbors"] == "auto" else (int(fixed["n_neighbors"]),)
    K = max(1, min(max(ks), len(R) - int(sizes.max())))  # every row has K rows outside its unit
    weights = GRID_WEIGHTS if fixed["weights"] == "auto" else (fixed["weights"],)
    scored = np.arange(len(R)) if len(R) <= TUNE_ROWS else \
        np.sort(np.random.default_rng(seed).choice(len(R), TUNE_ROWS, replace=False))
    scored_sizes = np.bincount(codes[scored], minlength=len(sizes))
    candidates, per_unit = [], []  # per_unit: each candidate's RMSE at each unit (each unit held out alone)
    alone = units is not None and n_units <= MAX_UNITS
    for rep, cut in _spaces(fixed, readings):
        F = represent(R, rep, floor if not cut else weakest + cut, floor, reference) if readings else R - R.min(axis=0)
        near, dist = leave_out_neighbours(F, codes, K, scored)
        for k in ks:
            for w in weights:
                P = _weighted(near[:, :min(k, K)], dist[:, :min(k, K)], Y, w)
                e = np.linalg.norm(P - Y[scored], axis=1)
                err = _error(e, codes[scored], scored_sizes, criterion, coverage, not alone)
                candidates.append({"representation": rep, "cutoff_db": cut, "n_neighbors": k, "weights": w,
                                   "error": err, "index": len(per_unit)})
                present = scored_sizes > 0
                per_unit.append(np.sqrt(np.bincount(codes[scored], e ** 2, minlength=len(sizes))[present]
                                        / scored_sizes[present]))
    candidates.sort(key=lambda c: c["error"])  # stable: the grid's order among equals
    best, rule = candidates[0], None
    if alone and criterion == "rmse" and fixed["representation"] == "auto" and readings:
        best, rule = _plainest(candidates, per_unit)
    for c in candidates:
        c.pop("index")
    textbook = next((c["error"] for c in candidates if all(c[key] == v for key, v in TEXTBOOK.items())), None)
    held_out = f"{len(sizes)} folds of {'rows' if units is None else 'units'}" if n_units > MAX_UNITS else "each unit"
    return {"chosen": {key: best[key] for key in TEXTBOOK}, "error": best["error"], "textbook": textbook,
            "candidates": candidates, "units": n_units, "criterion": criterion, "held_out": held_out,
            "rule": rule}


def _plainest(candidates: list[dict], per_unit: list[np.ndarray]) -> tuple[dict, dict]:
    """The one-standard-error rule for the readings as they are: the best ``"dbm"`` configuration, unless the
    lowest error of all beats it by more than one standard error of their paired per-unit difference (each
    unit's RMSE, the units held out alone). A re-expression of the readings must beat them by more than the
    units' spread: with a dozen phones, which one wins on average is often a draw of the phones.
    ``candidates`` sorted best first, each with its ``index`` into ``per_unit``. Returns the configuration and
    the rule's record (``lowest``: the best of all; ``difference`` and ``standard_error`` of dbm's against it)."""
    lowest = candidates[0]
    plain = next((c for c in candidates if c["representation"] == "dbm"), lowest)
    d = per_unit[plain["index"]] - per_unit[lowest["index"]]
    se = float(np.std(d, ddof=1) / np.sqrt(len(d))) if len(d) > 1 else 0.0
    record = {"name": "one standard error", "lowest": {key: lowest[key] for key in (*TEXTBOOK, "error")},
              "difference": float(np.mean(d)), "standard_error": se, "units": int(len(d))}
    return (plain if float(np.mean(d)) <= se else lowest), record


def _spaces(fixed: dict, readings: bool) -> list[tuple[str, float]]:
    """The (representation, cutoff) pairs the search covers."""
    reps = ("dbm",) if not readings else GRID_REPRESENTATIONS if fixed["representation"] == "auto" \
        else (fixed["representation"],)
    out = []
    for rep in reps:
        cuts = (GRID_CUTOFFS_DB if rep == "dbm" and readings else (0.0,)) if fixed["cutoff_db"] == "auto" \
            else (float(fixed["cutoff_db"]),)
        out += [(rep, float(c)) for c in cuts]
    return out


def leave_out_neighbours(F: np.ndarray, codes: np.ndarray, K: int,
                         queries: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(q, K) indices and Euclidean distances of each query row's ``K`` nearest rows of another unit
    (``codes``), nearest first; ``queries``: the rows searched for (default every row). float32 distances from
    one matrix product per block of :data:`BLOCK` queries (BLAS: dense rows against every row)."""
    F32 = np.ascontiguousarray(F, dtype=np.float32)
    norms = np.einsum("ij,ij->i", F32, F32)
    m = len(F32)
    queries = np.arange(m) if queries is None else np.asarray(queries)
    near, dist = np.empty((len(queries), K), dtype=np.intp), np.empty((len(queries), K))
    for start in range(0, len(queries), BLOCK):
        rows = slice(start, min(start + BLOCK, len(queries)))
        at = queries[rows]
        D = F32[at] @ F32.T
        D *= -2.0
        D += norms
        D += norms[at, None]
        D[codes[at, None] == codes[None, :]] = np.inf
        part = np.argpartition(D, K - 1, axis=1)[:, :K] if K < m else np.tile(np.arange(m), (D.shape[0], 1))
        d = np.take_along_axis(D, part, axis=1)
        order = np.argsort(d, axis=1, kind="stable")
        near[rows] = np.take_along_axis(part, order, axis=1)
        dist[rows] = np.sqrt(np.maximum(np.take_along_axis(d, order, axis=1), 0.0))
    return near, dist


def _weighted(near: np.ndarray, dist: np.ndarray, Y: np.ndarray, weights: str) -> np.ndarray:
    """(m, n) mean of the neighbours' positions: equal weights, or 1 / distance (exact matches alone)."""
    if weights == "uniform":
        return Y[near].mean(axis=1)
    exact = dist == 0.0
    w = np.where(exact.any(axis=1, keepdims=True), exact.astype(float), 1.0 / np.where(exact, 1.0, dist))
    return np.einsum("mk,mkn->mn", w / w.sum(axis=1, keepdims=True), Y[near])


def _error(e: np.ndarray, codes: np.ndarray, sizes: np.ndarray, criterion: str, coverage: float, rows: bool) -> float:
    """The criterion over Euclidean errors ``e``, each unit weighing the same (:func:`tune`; folds of rows or
    of many units: the plain RMSE)."""
    if criterion == "rmse" and rows:
        return unit_criterion(e, "rmse")
    return unit_criterion(e, criterion, coverage, codes, sizes)
