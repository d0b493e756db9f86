"""The joint calibration of floor sets and ellipses (:mod:`models.floors`): both scores on one scale
(:class:`RankMap`), the floor score, each method's :class:`JointCalibration`, the fitted :class:`FloorModel`
and its answer (:class:`FloorAnswer`)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from models.calibration.conformal import SplitConformalCalibrator
from models.exceptions import InputError
from models.floors.classifiers import CLASSIFIERS
from models.floors.labels import FloorLabels


# ----------------------------------------------------------------------------- the common scale
class RankMap:
    """``G``: a score's training distribution as a fixed, continuous, increasing map.

    Knots at the distinct finite training scores ``x_1 < ... < x_k``, each at the share of training
    scores strictly below it (``G(x_1) = 0``), then ``(x_k + w, 1)`` with ``w = x_k - x_1`` (1 when
    zero); linear between knots, constant 0 below ``x_1``, and beyond the last knot ``1 + (s - x_k - w) / w``.
    Strictly increasing from ``x_1`` on, so that :meth:`inverse` is exact on that range.

    Parameters
    ----------
    x : ndarray of shape (k + 1,)
        The knots' scores, increasing.
    u : ndarray of shape (k + 1,)
        Their values, from 0 to 1.
    """

    def __init__(self, x: np.ndarray, u: np.ndarray):
        self.x = np.asarray(x, dtype=np.float64)
        self.u = np.asarray(u, dtype=np.float64)
        self.width = float(self.x[-1] - self.x[-2])  # w: the last segment

    @classmethod
    def fit(cls, scores) -> "RankMap":
        """The map of training scores.

        Parameters
        ----------
        scores : array-like
            Training scores; non-finite ones are left out.

        Returns
        -------
        RankMap

        Raises
        ------
        InputError
            No finite score.
        """
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
        """The largest score whose map is at most ``t``.

        Parameters
        ----------
        t : float
            A value of the map, at least 0.

        Returns
        -------
        float
            ``max {s : G(s) <= t}``.
        """
        if t > 1.0:
            return float(self.x[-1] + (t - 1.0) * self.width)
        return float(np.interp(t, self.u, self.x))

    def to_arrays(self) -> dict:
        """The map in a bundle's form.

        Returns
        -------
        dict of str -> ndarray
            ``x`` and ``u``, what ``RankMap(**arrays)`` takes.
        """
        return {"x": self.x, "u": self.u}



def all_floor_scores(P: np.ndarray) -> np.ndarray:
    """Every class's floor score.

    Parameters
    ----------
    P : ndarray of shape (N, K)
        Class probabilities.

    Returns
    -------
    ndarray of shape (N, K)
        ``a(x, f) = 1 - p(f | x)``, 0 for the most probable class.
    """
    A = np.maximum(1.0 - P, 0.0)
    A[np.arange(len(P)), P.argmax(axis=1)] = 0.0
    return A


def floor_scores(P: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """The floor score of each row's class (:func:`all_floor_scores`).

    Parameters
    ----------
    P : ndarray of shape (N, K)
        Class probabilities.
    codes : ndarray of shape (N,)
        Each row's class.

    Returns
    -------
    ndarray of shape (N,)
    """
    rows = np.arange(len(codes))
    a = np.maximum(1.0 - P[rows, codes], 0.0)
    a[P.argmax(axis=1) == codes] = 0.0
    return a


# ----------------------------------------------------------------------------- the joint calibration
@dataclass
class JointCalibration:
    """One ellipsoid method's part of the joint calibration.

    Parameters
    ----------
    position_map : RankMap
        Its position scores' map, from the training rows.
    calibrator : SplitConformalCalibrator
        The calibrator of the joint scores.
    """

    position_map: RankMap
    calibrator: SplitConformalCalibrator

    def threshold(self, level: float) -> float:
        """The joint threshold at a checked level.

        Parameters
        ----------
        level : float
            The level.

        Returns
        -------
        float
            ``t_q``.
        """
        return self.calibrator.quantile(level)


@dataclass(frozen=True)
class FloorAnswer:
    """The floor sets of a batch.

    Parameters
    ----------
    labels : FloorLabels
        The classes.
    member : ndarray of shape (N, K) of bool
        Each row's set.
    proba : ndarray of shape (N, K)
        Class probabilities.
    threshold : float
        The joint threshold ``t_q``.
    level : float
        The level.
    """

    labels: FloorLabels
    member: np.ndarray
    proba: np.ndarray
    threshold: float
    level: float

    def rows(self) -> list[list[dict]]:
        """Each row's set, most probable first.

        Returns
        -------
        list of list of dict
            ``[{"building": .., "floor": .., "probability": ..}]`` per row.
        """
        out = []
        for member, p in zip(self.member, self.proba):
            ks = np.flatnonzero(member)
            ks = ks[np.argsort(-p[ks], kind="stable")]
            out.append([{**self.labels.label(k), "probability": float(p[k])} for k in ks])
        return out

    @property
    def sizes(self) -> np.ndarray:
        """Each row's set size."""
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
        """Class probabilities of standardised rows.

        Parameters
        ----------
        X : ndarray of shape (N, d)
            Standardised features.

        Returns
        -------
        ndarray of shape (N, K)
        """
        return self.classifier.predict_proba(X)

    def floor_scores(self, P: np.ndarray, codes: np.ndarray) -> np.ndarray:
        """Mapped floor scores of each row's class.

        Parameters
        ----------
        P : ndarray of shape (N, K)
            Class probabilities.
        codes : ndarray of shape (N,)
            Each row's class.

        Returns
        -------
        ndarray of shape (N,)
            ``G_a(a(x, code))``.
        """
        return self.floor_map(floor_scores(P, codes))

    def joint_scores(self, method: str, P: np.ndarray, codes: np.ndarray, position_scores: np.ndarray) -> np.ndarray:
        """Joint scores: the larger of the mapped floor and position scores.

        Parameters
        ----------
        method : str
            The ellipsoid method.
        P : ndarray of shape (N, K)
            Class probabilities.
        codes : ndarray of shape (N,)
            True classes.
        position_scores : ndarray of shape (N,)
            The method's position scores ``M``.

        Returns
        -------
        ndarray of shape (N,)
            ``max(G_a(a), G_M(M))``.
        """
        return np.maximum(self.floor_scores(P, codes), self.joint[method].position_map(position_scores))

    def conformalize(self, method: str, training_scores, P, codes, position_scores, rule: str = "rows",
                     groups=None, random_state: int = 0) -> "FloorModel":
        """Calibrate a method's joint scores.

        Parameters
        ----------
        method : str
            The ellipsoid method.
        training_scores : array-like
            The method's position scores on training rows: they fix its map.
        P : ndarray of shape (k, K)
            The calibration rows' class probabilities.
        codes : ndarray of shape (k,)
            Their true classes.
        position_scores : ndarray of shape (k,)
            Their position scores.
        rule : str, default="rows"
            The calibration rule.
        groups : array-like of shape (k,), default=None
            Their groups, under a group rule.
        random_state : int, default=0
            Seeds the group-subsample draw.

        Returns
        -------
        self : FloorModel
        """
        position_map = RankMap.fit(training_scores)
        self.joint[method] = JointCalibration(position_map, SplitConformalCalibrator(rule, random_state))
        self.joint[method].calibrator.fit(self.joint_scores(method, P, codes, position_scores), groups)
        return self

    def recalibrated(self, P: np.ndarray, codes: np.ndarray, position_scores: dict, rule: str = "rows",
                     groups=None, random_state: int = 0) -> "FloorModel":
        """A copy whose joint calibrations hold the scores of fresh rows.

        The classifier, the floor map and each method's position map stay those of training, as a
        recalibrated ellipse keeps its shapes.

        Parameters
        ----------
        P : ndarray of shape (k, K)
            The fresh rows' class probabilities.
        codes : ndarray of shape (k,)
            Their true classes.
        position_scores : dict of str -> ndarray of shape (k,)
            Each method's position scores.
        rule : str, default="rows"
            The calibration rule.
        groups : array-like of shape (k,), default=None
            Their groups, under a group rule.
        random_state : int, default=0
            Seeds the group-subsample draw.

        Returns
        -------
        FloorModel
        """
        joint = {name: JointCalibration(old.position_map, SplitConformalCalibrator(rule, random_state).fit(
                     self.joint_scores(name, P, codes, position_scores[name]), groups))
                 for name, old in self.joint.items()}
        return FloorModel(self.classifier, self.labels, self.floor_map, joint, dict(self.selection), {})

    def check_level(self, method: str, level: float) -> float:
        """A level, checked against a method's joint calibration.

        Parameters
        ----------
        method : str
            The ellipsoid method.
        level : float
            The level asked for.

        Returns
        -------
        float

        Raises
        ------
        UnattainableCoverageError
            Above what the joint calibration attains.
        """
        return self.joint[method].calibrator.check_level(level)

    def threshold(self, method: str, level: float) -> tuple[float, float]:
        """The joint threshold at a level and the ellipse's threshold that goes with it.

        Parameters
        ----------
        method : str
            The ellipsoid method.
        level : float
            A checked level.

        Returns
        -------
        t_q : float
            The joint threshold.
        alpha : float
            ``G_M^{-1}(t_q)``, the ellipse's (``inf`` when ``t_q`` is).
        """
        joint = self.joint[method]
        t = joint.threshold(level)
        return t, (joint.position_map.inverse(t) if np.isfinite(t) else np.inf)

    def sets(self, P: np.ndarray, t: float) -> np.ndarray:
        """Membership of the floor sets at a joint threshold.

        Parameters
        ----------
        P : ndarray of shape (N, K)
            Class probabilities.
        t : float
            The joint threshold.

        Returns
        -------
        ndarray of shape (N, K) of bool
            ``G_a(a(x, f)) <= t``; the most probable class is always in (it scores 0).
        """
        return self.floor_map(all_floor_scores(P)) <= t

    def answer(self, P: np.ndarray, method: str, level: float) -> tuple[FloorAnswer, float]:
        """The floor sets of rows at a level, and the ellipse threshold that goes with them.

        Parameters
        ----------
        P : ndarray of shape (N, K)
            Class probabilities (:meth:`proba`).
        method : str
            The ellipsoid method.
        level : float
            A checked level.

        Returns
        -------
        answer : FloorAnswer
        alpha : float
            The ellipse's threshold.
        """
        t, alpha = self.threshold(method, level)
        return FloorAnswer(self.labels, self.sets(P, t), P, t, level), alpha

    def to_arrays(self) -> tuple[dict, dict]:
        """The fitted model in a bundle's form.

        Returns
        -------
        params : dict
            The classifier's type and parameters, the labels' columns, each method's calibration counts, the
            selection and the metrics.
        arrays : dict of str -> ndarray
            The classifier's, the labels', the maps' and the calibration scores, by prefixed name.
        """
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
        """Rebuild the fitted model from what :meth:`to_arrays` gave.

        Parameters
        ----------
        params : dict
            As :meth:`to_arrays` gives them.
        arrays : dict of str -> ndarray
            As :meth:`to_arrays` gives them.

        Returns
        -------
        FloorModel

        Raises
        ------
        KeyError
            An unknown classifier type (the bundle's loader reports it as inconsistent).
        """
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
