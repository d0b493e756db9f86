"""Floors beside the ellipse: a calibrated set of (building, floor) candidates with one joint guarantee.

A floor bundle answers each query with an ellipse in the survey's plane *and* a set ``F(x)`` of
floor labels (a floor, or a (building, floor) pair), such that for a new row

    P[ true floor in F(x)  and  true position in the ellipse ] >= eta

with the finite-sample split-conformal guarantee, calibrated once (SPEC section 9, "one scalar,
nested regions"). Construction, per ellipsoid method:

* the floor score ``a(x, f) = 1 - p(f | x)``, ``p`` a classifier's probability (the score of
  least ambiguous set-valued classifiers: Sadinle, Lei & Wasserman, JASA 2019), except that the most
  probable floor scores 0 (it is always in the set, and the calibration knows it), and the position
  score ``M(x, y)``, the method's conformity score (the Mahalanobis distance of the residual);
* each score through a fixed increasing map fitted on *training* rows only (:class:`RankMap`: the
  piecewise-linear interpolation of its training scores' empirical distribution function), so both
  parts live on one scale: ``u = G_a(a)``, ``v = G_M(M)``. The floor part's training scores are
  out-of-fold (a classifier is sure of its own training rows);
* the joint score ``s(x, f, y) = max(G_a(a(x, f)), G_M(M(x, y)))`` of every calibration row, and
  ``t_q``, its conformal quantile (``ceil((m + 1) eta)``-th smallest; one score per group under a
  group rule, as for the ellipse alone);
* the region ``R(x) = {(f, y) : G_a(a(x, f)) <= t_q and G_M(M(x, y)) <= t_q}``: the floor set
  ``{f : G_a(1 - p(f | x)) <= t_q}`` times the ellipse ``{y : M(x, y) <= G_M^{-1}(t_q)}``.

Proof of the guarantee: ``(f*, y*)`` lies in ``R(x)`` exactly when ``s(x, f*, y*) <= t_q``. The map
``s`` was fixed before the calibration rows were read (classifier, shapes and both maps are fitted
on training rows), so the joint scores of the calibration rows and of a new row are exchangeable,
and the conformal quantile's usual argument (:mod:`models.calibration.conformal`) gives
``P >= eta``, and ``P <= eta + 1/(m + 1)`` without ties. No union bound is spent: Bonferroni would
calibrate each part at ``1 - (1 - eta) / 2`` and pay for both. The most probable floor scoring 0, no
floor set is empty (an empty set would make the region empty).

The maps fix how the two parts share the miss rate ``1 - eta`` (each at about the same training
rank), never whether the guarantee holds. A bundle without floors has no :class:`FloorModel` and
answers exactly as before.

Classifiers (:data:`CLASSIFIERS`): ``"knn"``, scikit-learn's ``KNeighborsClassifier(weights="distance")``
rule computed as a :class:`~models.centres.knn.KNNCentre` on one-hot labels (the same search, and in one
request the same distances, as a kNN centre on the same rows); ``"logistic"``, scikit-learn's
``LogisticRegression`` (multinomial), stored as its coefficients and evaluated in numpy.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from models.calibration.conformal import SplitConformalCalibrator
from models.centres.knn import KNNCentre
from models.exceptions import InputError


# ----------------------------------------------------------------------------- the common scale
class RankMap:
    """``G``: a score's training distribution as a fixed, continuous, increasing map.

    Knots at the distinct finite training scores ``x_1 < ... < x_k``, each at the share of training
    scores strictly below it (``G(x_1) = 0``), then ``(x_k + w, 1)`` with ``w = x_k - x_1`` (1 when
    zero); linear between knots, constant 0 below ``x_1``, and beyond the last knot ``1 + (s - x_k - w) / w``.
    Strictly increasing from ``x_1`` on, so that :meth:`inverse` is exact on that range.
    """

    def __init__(self, x: np.ndarray, u: np.ndarray):
        self.x = np.asarray(x, dtype=np.float64)
        self.u = np.asarray(u, dtype=np.float64)
        self.width = float(self.x[-1] - self.x[-2])  # w: the last segment

    @classmethod
    def fit(cls, scores) -> "RankMap":
        s = np.asarray(scores, dtype=np.float64).ravel()
        s = s[np.isfinite(s)]
        if s.size == 0:
            raise InputError("a rank map needs at least one finite training score", field="scores",
                             expected="finite scores", received="none")
        values, counts = np.unique(s, return_counts=True)
        below = (np.cumsum(counts) - counts) / s.size
        width = float(values[-1] - values[0]) or 1.0
        return cls(np.append(values, values[-1] + width), np.append(below, 1.0))

    def __call__(self, scores) -> np.ndarray:
        s = np.asarray(scores, dtype=np.float64)
        out = np.interp(s, self.x, self.u)
        beyond = s > self.x[-1]
        if beyond.any():
            out = np.where(beyond, 1.0 + (s - self.x[-1]) / self.width, out)
        return out

    def inverse(self, t: float) -> float:
        """The largest score ``s`` with ``G(s) <= t`` (``t >= 0``)."""
        if t > 1.0:
            return float(self.x[-1] + (t - 1.0) * self.width)
        return float(np.interp(t, self.u, self.x))

    def to_arrays(self) -> dict:
        return {"x": self.x, "u": self.u}


# ----------------------------------------------------------------------------- classifiers
class KNNFloors:
    """Distance-weighted k-nearest-neighbour floor probabilities (scikit-learn's ``KNeighborsClassifier``
    rule, every row tied at the k-th distance included), as a :class:`KNNCentre` fitted on one-hot labels."""

    name = "knn"

    def __init__(self, n_neighbors: int = 5):
        self.n_neighbors = n_neighbors

    def get_params(self) -> dict:
        return {"n_neighbors": self.n_neighbors}

    def fit(self, X: np.ndarray, codes: np.ndarray, n_classes: int) -> "KNNFloors":
        self.n_classes_ = int(n_classes)
        self.knn_ = KNNCentre(n_neighbors=self.n_neighbors, weights="distance").fit(X, np.eye(n_classes)[codes])
        return self

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        return self.knn_.predict(X)

    def to_arrays(self) -> tuple[dict, dict]:
        params, arrays = self.knn_.to_arrays()
        return {**self.get_params(), "n_classes": self.n_classes_}, arrays

    @classmethod
    def from_arrays(cls, params: dict, arrays: dict) -> "KNNFloors":
        clf = cls(n_neighbors=int(params["n_neighbors"]))
        clf.n_classes_ = int(params["n_classes"])
        clf.knn_ = KNNCentre.from_arrays({"n_neighbors": clf.n_neighbors, "weights": "distance"}, arrays)
        return clf


class LogisticFloors:
    """Multinomial logistic regression (scikit-learn's ``LogisticRegression``), stored as its coefficients
    and evaluated as a softmax in numpy; a class absent from the training rows gets probability 0."""

    name = "logistic"

    def __init__(self, C: float = 1.0, max_iter: int = 300):
        self.C, self.max_iter = C, max_iter

    def get_params(self) -> dict:
        return {"C": self.C, "max_iter": self.max_iter}

    def fit(self, X: np.ndarray, codes: np.ndarray, n_classes: int) -> "LogisticFloors":
        import warnings

        from sklearn.exceptions import ConvergenceWarning
        from sklearn.linear_model import LogisticRegression

        self.n_classes_ = int(n_classes)
        present = np.unique(codes)
        if present.size == 1:
            self.present_, self.coef_, self.intercept_ = present, np.zeros((1, X.shape[1])), np.zeros(1)
            return self
        with warnings.catch_warnings():  # the fit stops at max_iter: probabilities as good as its figures say
            warnings.simplefilter("ignore", ConvergenceWarning)
            model = LogisticRegression(C=self.C, max_iter=self.max_iter).fit(X, codes)
        coef, intercept = model.coef_, model.intercept_
        if present.size == 2:  # scikit-learn's binary form: p(second) = sigmoid(w x + b) = softmax([0, w x + b])
            coef, intercept = np.vstack([np.zeros_like(coef), coef]), np.array([0.0, intercept[0]])
        self.present_, self.coef_, self.intercept_ = model.classes_.astype(np.intp), coef, intercept
        return self

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        z = X @ self.coef_.T + self.intercept_
        z -= z.max(axis=1, keepdims=True)
        np.exp(z, out=z)
        z /= z.sum(axis=1, keepdims=True)
        out = np.zeros((X.shape[0], self.n_classes_))
        out[:, self.present_] = z
        return out

    def to_arrays(self) -> tuple[dict, dict]:
        return ({**self.get_params(), "n_classes": self.n_classes_},
                {"present": self.present_, "coef": self.coef_, "intercept": self.intercept_})

    @classmethod
    def from_arrays(cls, params: dict, arrays: dict) -> "LogisticFloors":
        clf = cls(C=float(params["C"]), max_iter=int(params["max_iter"]))
        clf.n_classes_ = int(params["n_classes"])
        clf.present_ = np.asarray(arrays["present"], dtype=np.intp)
        clf.coef_ = np.asarray(arrays["coef"], dtype=np.float64)
        clf.intercept_ = np.asarray(arrays["intercept"], dtype=np.float64)
        return clf


#: the floor classifiers by name (``lmve-train --floor-classifier``)
CLASSIFIERS = {"knn": KNNFloors, "logistic": LogisticFloors}


def make_classifier(name: str, **params):
    if name not in CLASSIFIERS:
        raise InputError(f"floor classifier must be one of {', '.join(CLASSIFIERS)}; got {name!r}",
                         field="floor_classifier", expected=" | ".join(CLASSIFIERS), received=repr(name))
    return CLASSIFIERS[name](**params)


# ----------------------------------------------------------------------------- labels
def label_key(value) -> str:
    """The canonical text of one label value: integers (and integral floats) as ``"2"``, text as given."""
    if isinstance(value, (bool, np.bool_)):
        raise TypeError("a boolean is not a floor label")
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        if not np.isfinite(value):
            raise TypeError("a floor label must be finite")
        return str(int(value)) if float(value).is_integer() else repr(float(value))
    if isinstance(value, str):
        return value.strip()
    raise TypeError(f"a floor label is a number or text, not {type(value).__name__}")


@dataclass
class FloorLabels:
    """The classes: one row of label texts per class, one column per label column (``columns``: the
    building column first when there is one, then the floor column); ``numeric`` says which columns'
    labels are integers (answered as JSON numbers)."""

    columns: tuple[str, ...]
    values: np.ndarray  # (K, c) str
    numeric: tuple[bool, ...]

    @classmethod
    def of(cls, columns, *label_columns) -> tuple["FloorLabels", np.ndarray]:
        """The classes of per-row labels (one array per column) and each row's class code."""
        keys = np.column_stack([[label_key(v) for v in np.asarray(col).ravel()] for col in label_columns])
        values, codes = np.unique(keys, axis=0, return_inverse=True)
        numeric = tuple(bool(all(_integral(v) for v in values[:, j])) for j in range(values.shape[1]))
        if any(numeric):  # numeric columns in numeric order
            order = sorted(range(len(values)), key=lambda i: tuple(
                (int(v),) if num else (0, v) for v, num in zip(values[i], numeric)))
            rank = np.empty(len(values), dtype=np.intp)
            rank[order] = np.arange(len(values))
            values, codes = values[order], rank[codes.ravel()]
        return cls(tuple(columns), values, numeric), np.asarray(codes, dtype=np.intp).ravel()

    def __len__(self) -> int:
        return len(self.values)

    def label(self, k: int) -> dict:
        """Class ``k`` as ``{"building": .., "floor": ..}``-style JSON: one key per column's role."""
        return {role: (int(v) if num else str(v))
                for role, v, num in zip(self.roles, self.values[k], self.numeric)}

    @property
    def roles(self) -> tuple[str, ...]:
        return ("building", "floor") if len(self.columns) == 2 else ("floor",)

    def encode(self, floors, buildings=None) -> np.ndarray:
        """Each row's class code from its ``floors`` (and ``buildings`` when the classes have a building),
        or an :class:`InputError` naming the field, the row and the known values."""
        lookup = {tuple(row): k for k, row in enumerate(self.values)}
        need_building = len(self.columns) == 2
        if need_building and buildings is None:
            raise InputError(f"buildings: this bundle's floors are ({self.columns[0]}, {self.columns[1]}) pairs; give "
                             "a building with each floor", field="buildings",
                             expected=f"one {self.columns[0]} per row", received="none")
        if not need_building and buildings is not None:
            raise InputError("buildings: this bundle's floors have no building column; leave `buildings` out",
                             field="buildings", expected="no buildings", received=f"{len(buildings)} values")
        if buildings is not None and len(buildings) != len(floors):
            raise InputError(f"buildings has {len(buildings)} values for {len(floors)} floors", field="buildings",
                             expected=f"{len(floors)} values", received=f"{len(buildings)}")
        codes = np.empty(len(floors), dtype=np.intp)
        for i, f in enumerate(floors):
            parts = (buildings[i], f) if need_building else (f,)
            try:
                key = tuple(label_key(v) for v in parts)
            except TypeError as exc:
                where = "buildings" if need_building and not _is_label(parts[0]) else "floors"
                raise InputError(f"{where}[{i}]: {exc}", field=f"{where}[{i}]", expected="a number or text",
                                 received=repr(parts[0] if where == "buildings" else f)[:40]) from None
            code = lookup.get(key)
            if code is None:
                known = ", ".join("/".join(row) for row in self.values[:12]) + (" ..." if len(self.values) > 12 else "")
                what = "/".join(self.columns)
                raise InputError(f"floors[{i}]: {what} {'/'.join(key)} is not one this bundle knows; it knows {known}",
                                 field=f"floors[{i}]", expected=f"one of {known}", received="/".join(key))
            codes[i] = code
        return codes

    def to_arrays(self) -> tuple[dict, dict]:
        return {"columns": list(self.columns), "numeric": list(self.numeric)}, {"labels": self.values.astype(str)}

    @classmethod
    def from_arrays(cls, params: dict, arrays: dict) -> "FloorLabels":
        return cls(tuple(params["columns"]), np.asarray(arrays["labels"]).astype(str),
                   tuple(bool(v) for v in params["numeric"]))


def _integral(text: str) -> bool:
    try:
        int(text)
        return True
    except ValueError:
        return False


def _is_label(value) -> bool:
    try:
        label_key(value)
        return True
    except TypeError:
        return False


# ----------------------------------------------------------------------------- the floor score
def all_floor_scores(P: np.ndarray) -> np.ndarray:
    """(N, K) floor scores ``a(x, f)`` of every class: ``1 - p(f | x)``, 0 for the most probable one."""
    A = np.maximum(1.0 - P, 0.0)
    A[np.arange(len(P)), P.argmax(axis=1)] = 0.0
    return A


def floor_scores(P: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """(N,) floor scores ``a(x, f)`` of each row's class ``codes`` (:func:`all_floor_scores`)."""
    rows = np.arange(len(codes))
    a = np.maximum(1.0 - P[rows, codes], 0.0)
    a[P.argmax(axis=1) == codes] = 0.0
    return a


# ----------------------------------------------------------------------------- the joint calibration
@dataclass
class JointCalibration:
    """One ellipsoid method's part of the joint calibration: its position score's :class:`RankMap` and the
    calibrator of the joint scores."""

    position_map: RankMap
    calibrator: SplitConformalCalibrator

    def threshold(self, level: float) -> float:
        """``t_q`` at a checked ``level``."""
        return self.calibrator.quantile(level)


@dataclass(frozen=True)
class FloorAnswer:
    """The floor sets of a batch: ``member`` (N, K) bool, ``proba`` (N, K), ``threshold`` ``t_q`` and the level."""

    labels: FloorLabels
    member: np.ndarray
    proba: np.ndarray
    threshold: float
    level: float

    def rows(self) -> list[list[dict]]:
        """Per row, its set, most probable first: ``[{"building": .., "floor": .., "probability": ..}]``."""
        out = []
        for member, p in zip(self.member, self.proba):
            ks = np.flatnonzero(member)
            ks = ks[np.argsort(-p[ks], kind="stable")]
            out.append([{**self.labels.label(k), "probability": float(p[k])} for k in ks])
        return out

    @property
    def sizes(self) -> np.ndarray:
        return self.member.sum(axis=1)


@dataclass
class FloorModel:
    """A fitted floor classifier, its floor score's training :class:`RankMap`, and one
    :class:`JointCalibration` per ellipsoid method (see the module docstring).

    Attributes
    ----------
    classifier : KNNFloors or LogisticFloors
        Fitted on the standardised training rows.
    labels : FloorLabels
    floor_map : RankMap
        Of the out-of-fold floor scores ``1 - p(true floor | x)`` of the training rows.
    joint : dict of str -> JointCalibration
    selection : dict
        How the classifier was chosen (the candidates' cross-validated figures).
    metrics : dict
        Held-out figures per method, as training measured them.
    """

    classifier: object
    labels: FloorLabels
    floor_map: RankMap
    joint: dict = field(default_factory=dict)
    selection: dict = field(default_factory=dict)
    #: held-out figures per method (joint coverage, floor hit rate, set size, area), as training measured them
    metrics: dict = field(default_factory=dict)

    def proba(self, X: np.ndarray) -> np.ndarray:
        """(N, K) class probabilities of standardised rows ``X``."""
        return self.classifier.predict_proba(X)

    def floor_scores(self, P: np.ndarray, codes: np.ndarray) -> np.ndarray:
        """(N,) ``G_a(a(x, code))`` of each row's class ``codes`` (:func:`floor_scores`)."""
        return self.floor_map(floor_scores(P, codes))

    def joint_scores(self, method: str, P: np.ndarray, codes: np.ndarray, position_scores: np.ndarray) -> np.ndarray:
        """(N,) ``max(G_a(a), G_M(M))`` of rows with class probabilities ``P``, true classes ``codes`` and the
        method's position scores ``M``."""
        return np.maximum(self.floor_scores(P, codes), self.joint[method].position_map(position_scores))

    def conformalize(self, method: str, training_scores, P, codes, position_scores, rule: str = "rows",
                     groups=None, random_state: int = 0) -> "FloorModel":
        """Calibrate ``method``'s joint scores: ``training_scores`` (the method's position scores on training
        rows) fix its map; ``P`` (k, K), ``codes`` (k,) and ``position_scores`` (k,) are the calibration rows'."""
        position_map = RankMap.fit(training_scores)
        self.joint[method] = JointCalibration(position_map, SplitConformalCalibrator(rule, random_state))
        self.joint[method].calibrator.fit(self.joint_scores(method, P, codes, position_scores), groups)
        return self

    def recalibrated(self, P: np.ndarray, codes: np.ndarray, position_scores: dict, rule: str = "rows",
                     groups=None, random_state: int = 0) -> "FloorModel":
        """A copy whose joint calibrations hold the scores of fresh rows (class probabilities ``P`` (k, K), true
        classes ``codes`` (k,), and per method its position scores (k,)); the classifier, the floor map and
        each method's position map stay those of training, as a recalibrated ellipse keeps its shapes."""
        joint = {name: JointCalibration(old.position_map, SplitConformalCalibrator(rule, random_state).fit(
                     self.joint_scores(name, P, codes, position_scores[name]), groups))
                 for name, old in self.joint.items()}
        return FloorModel(self.classifier, self.labels, self.floor_map, joint, dict(self.selection), {})

    def check_level(self, method: str, level: float) -> float:
        return self.joint[method].calibrator.check_level(level)

    def threshold(self, method: str, level: float) -> tuple[float, float]:
        """``(t_q, alpha)``: the joint threshold at ``level`` and the ellipse's threshold ``G_M^{-1}(t_q)``."""
        joint = self.joint[method]
        t = joint.threshold(level)
        return t, (joint.position_map.inverse(t) if np.isfinite(t) else np.inf)

    def sets(self, P: np.ndarray, t: float) -> np.ndarray:
        """(N, K) membership of the floor sets at joint threshold ``t``: ``G_a(a(x, f)) <= t`` (the most
        probable class always in: it scores 0)."""
        return self.floor_map(all_floor_scores(P)) <= t

    def answer(self, P: np.ndarray, method: str, level: float) -> tuple[FloorAnswer, float]:
        """The floor sets of rows of class probabilities ``P`` (:meth:`proba`) at ``level``, and the ellipse
        threshold that goes with them."""
        t, alpha = self.threshold(method, level)
        return FloorAnswer(self.labels, self.sets(P, t), P, t, level), alpha

    def to_arrays(self) -> tuple[dict, dict]:
        clf_params, clf_arrays = self.classifier.to_arrays()
        label_params, label_arrays = self.labels.to_arrays()
        arrays = {**{f"classifier__{k}": v for k, v in clf_arrays.items()}, **label_arrays,
                  **{f"floor_map__{k}": v for k, v in self.floor_map.to_arrays().items()}}
        methods = {}
        for name, joint in self.joint.items():
            cal = joint.calibrator
            arrays.update({f"{name}__map__{k}": v for k, v in joint.position_map.to_arrays().items()})
            arrays[f"{name}__scores"] = cal.scores_
            if cal.weights_ is not None:
                arrays[f"{name}__weights"] = cal.weights_
            methods[name] = {"rule": cal.rule, "n_calibration": cal.n_calibration_, "n_rows": cal.n_rows_}
        params = {"classifier": {"type": self.classifier.name, "params": clf_params}, **label_params,
                  "methods": methods, "selection": self.selection, "metrics": self.metrics}
        return params, arrays

    @classmethod
    def from_arrays(cls, params: dict, arrays: dict) -> "FloorModel":
        def sub(prefix):
            return {k[len(prefix):]: v for k, v in arrays.items() if k.startswith(prefix)}

        kind = params["classifier"]["type"]
        if kind not in CLASSIFIERS:
            raise KeyError(f"floor classifier type {kind!r}")
        classifier = CLASSIFIERS[kind].from_arrays(params["classifier"]["params"], sub("classifier__"))
        labels = FloorLabels.from_arrays(params, arrays)
        floor_map = RankMap(**sub("floor_map__"))
        joint = {}
        for name, info in params["methods"].items():
            cal = SplitConformalCalibrator.from_arrays(info["rule"], arrays[f"{name}__scores"],
                                                       arrays.get(f"{name}__weights"), info["n_calibration"],
                                                       info["n_rows"])
            joint[name] = JointCalibration(RankMap(**sub(f"{name}__map__")), cal)
        return cls(classifier, labels, floor_map, joint, dict(params.get("selection") or {}),
                   dict(params.get("metrics") or {}))
