"""A calibrated region model: raw features in, calibrated regions out. The checked boundary of ``models/``.

:class:`RegionModel` holds what a bundle holds (preprocessing, scaler, shared centre, one
calibrated regressor per method) and is what the service serves. Each public method checks its input once (rows,
points, coverage, method; errors are :class:`~models.exceptions.InputError` naming the field,
what was expected and what came), then calls unchecked internals. It also owns the fallback rule:
when the asked-for (or primary) method's shapes are not finite for a batch, the next method in
:attr:`RegionModel.serving_order` answers, for regions and containment alike. That order is the
bundle's ``selection`` (``lmve-train --primary``: ranked by volume on held-out rows, see
:mod:`training.pipeline.served_volume`), or :func:`models.registry.fallback_order` for a bundle without one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from models import registry
from models._validation import all_finite, check_matrix, check_same_rows
from models.centres import ClientCentre
from models.exceptions import InputError, UnknownMethodError
from models.centres.search import in_parts, shared_distances
from models.floors import FloorAnswer, FloorModel
from models.geo import TargetCRS
from models.predictor import SplitConformalRegressor
from models.preprocessing import RSSIFloor
from models.radio import RadioBaseline, RadioView
from models.radio_map import RadioMap
from models.readings import ReadingRanges
from models.survey import Survey
from models.typicality import Typicality


@dataclass(frozen=True)
class Answer:
    """Which method answered, and why it is not the one asked for (``None``: it is); with the bundle's
    typicality step (:mod:`models.typicality`), how typical each row's features are."""

    method: str
    fallback_reason: str | None
    typicality: np.ndarray | None = field(default=None, kw_only=True)
    """(N,) each row's conservative conformal p-value of typicality (small: unlike the calibration rows); ``None``
    for a bundle without the step or when not asked for."""
    typicality_scores: np.ndarray | None = field(default=None, kw_only=True)
    """(N,) the rows' typicality scores, what a shift test ranks (:mod:`models.calibration.martingale`)."""
    warnings: tuple[str, ...] = field(default=(), kw_only=True)
    """What the answer's rows were read as, in words: a null taken as "not heard", a reading the survey never saw
    (:mod:`models.readings`); empty when the rows were as expected."""
    readings: np.ndarray | None = field(default=None, kw_only=True, repr=False, compare=False)
    """(N, d) the rows as read (checked, a missing reading resolved to its not-heard code), before the live
    radio's view: what the service's radio watch counts, so that it converts no row twice; ``None`` for a
    bundle without the readings step."""

    @property
    def fallback(self) -> bool:
        """Whether a method other than the one asked for answered."""
        return self.fallback_reason is not None


@dataclass(frozen=True)
class RegionAnswer(Answer):
    regions: object  # EllipsoidRegions or BoxRegions
    floors: FloorAnswer | None = None
    """A floor bundle's floor sets (the ellipse then has the joint threshold); None without floors."""


@dataclass(frozen=True)
class Assessment(Answer):
    inside: np.ndarray    # (N,) bool
    distance: np.ndarray  # (N,) score / alpha_q: <= 1 inside (0 for an unbounded region)
    p_value: np.ndarray   # (N,) conformal p-values of the points (joint ones when floors were given)
    floor_inside: np.ndarray | None = None
    """(N,) bool, when floors were given: each row's floor in its floor set (``inside`` needs both)."""


@dataclass
class RegionModel:
    """Scaler + centre + calibrated methods.

    Attributes
    ----------
    feature_names, target_names : list of str
    scaler_mean, scaler_scale : ndarray (d,)
        ``x_std = (x_raw - mean) / scale`` (``scale = 1`` for constant training columns).
    methods : dict of str -> SplitConformalRegressor
        Calibrated regressors sharing one prefit centre, keyed by registry name.
    coverage : float
        The default level ``eta``.
    manifest : dict
        Metadata (written to / read from ``manifest.json`` by :mod:`models.bundle`).
    preprocess : RSSIFloor or None
        Applied to the raw features before the scaler (fingerprint "not detected" codes).
    selection : dict
        How the served method was chosen (``order``: the ellipsoid methods the plain routes serve, best
        first, then the fallbacks). Empty: the registry's order, LMVE then NLE then GE.
    floors : FloorModel or None
        A floor bundle's classifier and joint calibration (:mod:`models.floors`): its ellipsoid regions come
        with floor sets, and region and floor set together hold the truth with the level's probability.
        ``None``: regions in the plane alone, as calibrated per method.
    crs : TargetCRS or None
        The targets' coordinate reference system (:mod:`models.geo`): map clients get WGS84 polygons and
        ground metres. ``None``: plane coordinates only.
    survey : Survey or None
        Where the survey's rows were and a few held-out rows (:mod:`models.survey`), for the viewer.
    typicality : Typicality or None
        How unlike the calibration rows a query's features are (:mod:`models.typicality`): its conformal
        p-value and the shift test's scores. ``None`` in bundles trained before it.
    readings : ReadingRanges or None
        What the survey saw of each feature (:mod:`models.readings`): a missing RSSI reading is "not heard".
        ``None`` in bundles trained before it: missing values are refused.
    radio_map : RadioMap or None
        The survey's rows as read (:mod:`models.radio_map`), for :meth:`adapted` and :meth:`updated`.
    view : RadioView or None
        The live radio the rows are read under (:meth:`adapted`); ``None``: the survey's.
    """

    feature_names: list[str]
    target_names: list[str]
    scaler_mean: np.ndarray
    scaler_scale: np.ndarray
    methods: dict[str, SplitConformalRegressor]
    coverage: float
    manifest: dict = field(default_factory=dict)
    preprocess: RSSIFloor | None = None
    selection: dict = field(default_factory=dict)
    floors: FloorModel | None = None
    crs: TargetCRS | None = None
    survey: Survey | None = None
    typicality: Typicality | None = None
    readings: ReadingRanges | None = None
    radio_map: RadioMap | None = None
    view: RadioView | None = None

    @property
    def n_features(self) -> int:
        """``d``: the raw features a row has."""
        return len(self.feature_names)

    @property
    def n_targets(self) -> int:
        """``n``: the coordinates of a position."""
        return len(self.target_names)

    @property
    def serving_order(self) -> tuple[str, ...]:
        """The ellipsoid methods this model has, in the order they serve (the primary, then its fallbacks):
        the selection's order, then any other in the registry's order."""
        ranked = [m for m in self._preferred() if m in self.methods]
        return tuple(ranked + [m for m in registry.fallback_order() if m in self.methods and m not in ranked])

    def _preferred(self) -> tuple[str, ...]:
        """The ellipsoid methods in the order the bundle prefers them, present or not."""
        order = tuple(m for m in self.selection.get("order", ()) if m in registry.METHODS
                      and registry.METHODS[m].kind == "ellipsoid")
        return order or registry.fallback_order()

    @property
    def primary_method(self) -> str:
        """The first of :attr:`serving_order` (the selection's choice; without one LMVE, else NLE, else GE)."""
        served = self.serving_order
        if not served:
            raise InputError(f"the model has no ellipsoid method; it has {sorted(self.methods)}")
        return served[0]

    @property
    def centre(self):
        """The fitted centre every method shares."""
        return next(iter(self.methods.values())).centre_

    @property
    def requires_centers(self) -> bool:
        """Whether every request brings its own centres (a bundle trained on the client's estimates)."""
        return isinstance(self.centre, ClientCentre)

    def max_coverage(self, method: str | None = None) -> float:
        """The highest level a method attains with a bounded region.

        Parameters
        ----------
        method : str, default=None
            A registry name; ``None`` is the primary method.

        Returns
        -------
        float
            ``m / (m + 1)`` for its ``m`` calibration rows or groups.

        Raises
        ------
        UnknownMethodError
            ``method`` is not in the bundle.
        """
        return self.methods[self._candidates(method, None)[0][0]].calibrator_.max_coverage

    def prepare(self) -> None:
        """Build what answering uses beyond the bundle's arrays (the centre's search index, the compiled
        loops), so that the first request does not pay for it."""
        self.centre.prepare()
        for method in self.methods.values():
            method.shape_.prepare()
        if self.typicality is not None:
            self.typicality.prepare()
        if self.readings is not None:
            self.readings.prepare()
        self.radio_baseline  # built once, before the first query is counted

    # ------------------------------------------------------------------ checks (once per call)
    def _features(self, features, strict: bool = False, warnings: list | None = None,
                  device: str | None = None) -> np.ndarray:
        """:meth:`_raw` rows read under the live radio (:attr:`view`, ``device``'s offset), preprocessed and on
        the training scale."""
        return self._read(self._raw(features, strict, warnings), device)

    def _read(self, X: np.ndarray, device: str | None = None) -> np.ndarray:
        """:meth:`_raw`'s rows ``X`` under the live radio (a copy where it changes them), preprocessed and on
        the training scale."""
        if self.view is not None and not self.view.empty:
            X = self.view.apply(X.copy(), self.radio_baseline, device)
        return in_parts(self._scaled, X)

    def _raw(self, features, strict: bool = False, warnings: list | None = None) -> np.ndarray:
        """Checked raw ``features``, missing readings resolved (:mod:`models.readings`; what it says is appended
        to ``warnings``); never the caller's array changed."""
        X = check_matrix(features, "features", n_columns=self.n_features, owner="the bundle",
                         describe=lambda: "one per feature: " + ", ".join(self.feature_names[:4])
                         + (", ..." if self.n_features > 4 else ""), missing=self.readings is not None)
        if self.readings is not None:
            if X is features:  # never change the caller's array
                X = X.copy()
            X, said = self.readings.check(X, self.feature_names, strict)
            if warnings is not None:
                warnings.extend(said)
        return X

    @property
    def radio_baseline(self) -> RadioBaseline | None:
        """What the survey heard of each transmitter (:class:`models.radio.RadioBaseline`), from the radio map;
        ``None`` without one. Built once per map (:meth:`models.radio_map.RadioMap.baseline`)."""
        if self.radio_map is None or self.readings is None:
            return None
        return self.radio_map.baseline(self.readings.rssi_, self.readings.unheard_)

    def adapted(self, view: RadioView, methods: dict | None = None) -> "RegionModel":
        """This model under the live radio ``view``; this one is left untouched.

        Gone transmitters that carried enough of the survey's readings (:meth:`models.radio_map.RadioMap.refits`):
        the centre searches the radio map's reference rows with them "not heard" on both sides, and every
        method's calibration is re-scored on the map's calibration rows under the live set
        (:meth:`models.radio_map.RadioMap.adapt`). New transmitters and offsets: the rows are read under the view
        (:attr:`view`); nothing is refitted. An empty view gives the model as trained.

        Parameters
        ----------
        view : RadioView
        methods : dict, default=None
            The re-scored methods under ``view``, built elsewhere (another process) by this call on the same
            bundle, used where :meth:`refits`; ``None``: built here.

        Returns
        -------
        RegionModel
            Sharing this one's parts, with :attr:`view` set (and its centre and calibrations when transmitters
            are gone).

        Raises
        ------
        InputError
            A view of transmitters gone for a bundle without a radio map, or one naming features it lacks.
        """
        import copy

        refits = self.refits(view)
        out = copy.copy(self)
        out.view = None if view.empty else view
        if refits:
            out.methods = methods if methods is not None else self.radio_map.adapt(self, view, self.radio_baseline)[1]
        return out

    def refits(self, view: RadioView) -> bool:
        """Whether :meth:`adapted` re-fits the centre and re-scores the calibration under ``view`` (gone
        transmitters that carried enough of the survey's readings, :meth:`models.radio_map.RadioMap.refits`);
        a check of ``view`` alone, nothing built.

        Parameters
        ----------
        view : RadioView

        Returns
        -------
        bool

        Raises
        ------
        InputError
            As :meth:`adapted`: transmitters gone for a bundle without a radio map, or features it lacks.
        """
        bad = [j for j in (*view.gone, *view.new) if not 0 <= j < self.n_features]
        if bad:
            raise InputError(f"the radio view names feature {bad[0]}; the model has {self.n_features}",
                             field="radio", expected=f"features 0..{self.n_features - 1}", received=str(bad[0]))
        if not view.gone:
            return False
        if self.radio_baseline is None:
            raise InputError("this bundle keeps no radio map (trained before it, or without RSSI readings): "
                             "transmitters gone from the traffic cannot leave its centre; retrain with lmve-train",
                             field="radio", expected="a bundle with radio.npz", received="none")
        return self.radio_map.refits(view, self.radio_baseline)

    def updated(self, features, points, units=None) -> tuple["RegionModel", np.ndarray]:
        """This model with a re-survey's labelled rows learned: added to the radio map as reference and
        calibration rows, the centre a k-NN search of the map (the bundle's own fingerprint or k-NN
        configuration, else the textbook one), every method re-scored on the map's calibration rows, each
        centred on the other units' rows (:meth:`models.radio_map.RadioMap.adapt`). The shapes are kept.
        This one is left untouched.

        Parameters
        ----------
        features : array-like of shape (k, d)
            Raw features of the new rows (``NaN``: not heard).
        points : array-like of shape (k, n)
            Their true positions.
        units : array-like of shape (k,), default=None
            Each row's unit (a position, a walk); ``None``: each row its own.

        Returns
        -------
        (RegionModel, ndarray of shape (k, n))
            The new model, and each new row's centre from the other units' rows (its honest error).

        Raises
        ------
        InputError
            A bundle without a radio map, or rows that do not fit it.
        """
        import copy

        if self.radio_map is None or self.readings is None:
            raise InputError("this bundle keeps no radio map (trained before it, or without RSSI readings): it "
                             "cannot learn new rows; retrain with lmve-train on the survey and the re-survey",
                             field="bundle", expected="a bundle with radio.npz", received="none")
        X = self._raw(features)
        Y = self._points(points, X)
        if units is not None and len(units) != len(X):
            raise InputError(f"units has {len(units)} entries for {len(X)} rows", field="units",
                             expected=f"{len(X)} entries", received=str(len(units)))
        out = copy.copy(self)
        out.view, out.readings = None, self.readings.extended(X)
        out.radio_map = self.radio_map.extended(X, Y, units)
        _, out.methods, held_out = out.radio_map.adapt(out, RadioView(), out.radio_baseline)
        return out, held_out[-len(X):]

    def _scaled(self, X: np.ndarray) -> np.ndarray:
        """Checked rows preprocessed and on the training scale (row by row)."""
        if self.preprocess is not None:
            Y = self.preprocess.transform(X)
            if Y is not X:  # the step's own copy: scaled in place
                Y -= self.scaler_mean
                Y /= self.scaler_scale
                return Y
        return (X - self.scaler_mean) / self.scaler_scale

    def _points(self, points, X: np.ndarray) -> np.ndarray:
        P = check_matrix(points, "points", n_columns=self.n_targets, owner="the bundle",
                         describe=lambda: "one per target: " + ", ".join(self.target_names))
        check_same_rows(X, P, "features", "points")
        return P

    def _centers(self, centers, X: np.ndarray) -> np.ndarray:
        """The centres of the rows: the client's ``centers`` for a client-centre bundle (required),
        the bundle's own centre otherwise (``centers`` refused)."""
        if not self.requires_centers:
            if centers is not None:
                raise InputError(f"centers: this bundle has its own centre ({type(self.centre).__name__}); its shapes "
                                 "and calibration were learned for that centre's errors, so regions around another "
                                 "estimate would not carry the guarantee. Leave `centers` out", field="centers",
                                 expected="no centers", received=f"{len(centers)} rows")
            return self.centre.predict(X)
        if centers is None:
            return self.centre.predict(X)  # raises: the client's estimates are required
        C = check_matrix(centers, "centers", n_columns=self.n_targets, owner="the bundle",
                         describe=lambda: "your estimate of " + ", ".join(self.target_names))
        check_same_rows(X, C, "features", "centers")
        return C

    def _candidates(self, method: str | None, kind: str | None) -> list[tuple[str, str | None]]:
        """``(name, fallback_reason)`` to try in order: the asked-for (or primary) method, then the
        ellipsoid methods ranked after it."""
        served = self.serving_order
        if method is None:
            if not served:
                raise InputError(f"the model has no ellipsoid method; it has {sorted(self.methods)}")
            first = self._preferred()[0]
            reason = None if served[0] == first else f"the bundle has no {registry.METHODS[first].label} method"
            order = [(served[0], reason)]
        else:
            allowed = served if kind == "ellipsoid" else tuple(self.methods)
            if method not in allowed:
                raise UnknownMethodError(f"method {method!r} is not served; available: {', '.join(allowed)}",
                                         field="method", expected=" | ".join(allowed), received=str(method))
            order = [(method, None)]
        name = order[0][0]
        if name in served:
            order += [(later, None) for later in served[served.index(name) + 1:]]
        return order

    def _threshold(self, name: str, coverage: float | None, thresholds: dict | None) -> tuple[float, float]:
        """``(alpha_q, level)`` of method ``name``: an online rule's from ``thresholds`` when it names the
        method, else the calibrated threshold at ``coverage`` (``None``: the bundle's level)."""
        if thresholds is not None and name in thresholds:
            return thresholds[name]
        reg = self.methods[name]
        return reg.threshold(coverage), reg.coverage if coverage is None else coverage

    def _level(self, name: str, coverage) -> float | None:
        return None if coverage is None else self.methods[name].calibrator_.check_level(coverage)

    # ------------------------------------------------------------------ the fallback rule
    def _first_finite(self, candidates, X):
        """``(name, reason, parts)`` of the first candidate whose shapes (and centre corrections) are
        finite on ``X``; ``parts`` is ``{"parts": predict_parts(X)}`` for the method's prediction
        calls, empty for a box method, which has no fallback."""
        reason = candidates[0][1]
        for i, (name, _) in enumerate(candidates):
            shape = self.methods[name].shape_
            if registry.METHODS[name].kind != "ellipsoid":
                return name, reason, {}
            C, delta = shape.predict_parts(X)
            if (all_finite(C) and (delta is None or all_finite(delta))) or i == len(candidates) - 1:
                return name, reason, {"parts": (C, delta)}
            reason = f"{registry.METHODS[name].label} produced non-finite shapes for this batch"
        raise AssertionError("unreachable: the candidate list is never empty")  # pragma: no cover

    # ------------------------------------------------------------------ public, checked
    def predict_region(self, features, method: str | None = None, coverage: float | None = None, *,
                       kind: str | None = None, centers=None, thresholds: dict | None = None,
                       typicality: bool = True, strict: bool = False, device: str | None = None) -> RegionAnswer:
        """Calibrated regions for raw features, from one method, falling back as the module says.

        Parameters
        ----------
        features : array-like of shape (N, d)
            Raw features. A missing reading (``None``/NaN) of an RSSI feature is "not heard"; a reading the
            survey never saw is named in the answer's ``warnings`` (:mod:`models.readings`).
        method : str, default=None
            A registry name; ``None`` is the primary method.
        coverage : float in (0, 1), default=None
            The level; ``None`` is the bundle's.
        kind : {"ellipsoid"}, default=None
            ``"ellipsoid"`` accepts ellipsoid methods only (the ellipse API).
        centers : array-like of shape (N, n), default=None
            The client's estimates: required by a client-centre bundle, refused by the others.
        thresholds : dict of str -> (float, float), default=None
            ``method -> (alpha_q, level)``: overrides the calibrated threshold of the methods it names (an
            online rule's, :mod:`models.calibration.adaptive`); ``level`` is the coverage the regions report.
        typicality : bool, default=True
            Also give the rows' typicality p-values and scores (a bundle with the step).
        strict : bool, default=False
            Refuse a reading the survey never saw instead of warning.
        device : str, default=None
            The device that read the rows: its offset under :attr:`view` (``None``: the traffic's).

        Returns
        -------
        RegionAnswer
            The method that answered, why it is not the one asked for, the regions (with floor sets for a floor
            bundle), typicality and warnings.

        Raises
        ------
        InputError
            Features of the wrong width or not numbers, ``centers`` where they are refused or missing where
            required, or an unknown method (:class:`~models.exceptions.UnknownMethodError`).
        UnattainableCoverageError
            ``coverage`` above what the calibration attains.
        """
        candidates = self._candidates(method, kind)
        coverage = self._level(candidates[0][0], coverage)
        said: list[str] = []
        raw = self._raw(features, strict, said)
        X = self._read(raw, device)
        with shared_distances():  # a kNN centre and kNN floors on the same rows search once
            mu = self._centers(centers, X)
            name, reason, parts = self._first_finite(candidates, X)
            proba = None if self.floors is None else self.floors.proba(X)
        alpha, level = self._threshold(name, coverage, thresholds)
        floors = None
        if proba is not None and name in self.floors.joint:
            floors, alpha = self.floors.answer(proba, name, self._joint_level(name, level))
        regions = self.methods[name].shape_.region(X, mu, alpha, level, **parts)
        return RegionAnswer(method=name, fallback_reason=reason, regions=regions, floors=floors,
                            warnings=tuple(said), readings=self._readings(raw), **self._typicality(X, typicality))

    def _readings(self, raw: np.ndarray) -> np.ndarray | None:
        """An answer's :attr:`Answer.readings`: ``raw`` where the bundle reads RSSI (never the caller's array:
        :meth:`_raw` copies it then)."""
        return raw if self.readings is not None else None

    def _typicality(self, X: np.ndarray, wanted: bool) -> dict:
        """An answer's ``typicality`` and ``typicality_scores`` for the standardised rows ``X`` (none without
        the step or when not ``wanted``)."""
        if not wanted or self.typicality is None:
            return {}
        scores, p = self.typicality.assess(X)
        return {"typicality": p, "typicality_scores": scores}

    def _joint_level(self, name: str, level: float) -> float:
        """The level of the joint calibration: ``level``, at most what the joint calibration attains (an
        online rule's level can move above it)."""
        return min(level, self.floors.joint[name].calibrator.max_coverage)

    def assess(self, features, points, method: str | None = None, coverage: float | None = None, *,
               kind: str | None = None, centers=None, thresholds: dict | None = None, floors=None,
               buildings=None, typicality: bool = True, strict: bool = False,
               device: str | None = None) -> Assessment:
        """Score candidate points once, with the method :meth:`predict_region` would use.

        A floor bundle's region is the ellipse of the joint threshold. With ``floors`` each row's floor is
        scored too: ``inside`` when the floor is in the row's floor set and the point in the ellipse, and
        ``p_value`` the joint one. Without ``floors``, the point alone against that ellipse.

        Parameters
        ----------
        features : array-like of shape (N, d)
            Raw features, read as :meth:`predict_region` reads them.
        points : array-like of shape (N, n)
            The candidate positions.
        method : str, default=None
            As :meth:`predict_region`.
        coverage : float in (0, 1), default=None
            As :meth:`predict_region`.
        kind : {"ellipsoid"}, default=None
            As :meth:`predict_region`.
        centers : array-like of shape (N, n), default=None
            As :meth:`predict_region`.
        thresholds : dict of str -> (float, float), default=None
            As :meth:`predict_region`.
        floors : array-like of shape (N,), default=None
            Each row's floor (floor bundles only).
        buildings : array-like of shape (N,), default=None
            Each row's building, when the bundle's floors are (building, floor) pairs.
        typicality : bool, default=True
            As :meth:`predict_region`.
        strict : bool, default=False
            As :meth:`predict_region`.
        device : str, default=None
            As :meth:`predict_region`.

        Returns
        -------
        Assessment
            ``inside`` (N,) bool; ``distance`` (N,), ``score / alpha_q``, at most 1 inside; ``p_value`` (N,);
            ``floor_inside`` (N,) when floors were given.

        Raises
        ------
        InputError
            As :meth:`predict_region`; also points of the wrong width, or floors the bundle does not know, of the
            wrong count, or sent to a bundle without floors.
        UnattainableCoverageError
            ``coverage`` above what the calibration attains.
        """
        candidates = self._candidates(method, kind)
        coverage = self._level(candidates[0][0], coverage)
        said: list[str] = []
        raw = self._raw(features, strict, said)
        X = self._read(raw, device)
        P = self._points(points, X)
        codes = self._floor_codes(floors, buildings, X)
        with shared_distances():
            mu = self._centers(centers, X)
            name, reason, parts = self._first_finite(candidates, X)
            proba = None if self.floors is None else self.floors.proba(X)
        reg = self.methods[name]
        scores = reg.shape_.conformity_scores(X, P - mu, **parts)
        alpha, level = self._threshold(name, coverage, thresholds)
        joint = proba is not None and name in self.floors.joint
        if joint:
            t, alpha = self.floors.threshold(name, self._joint_level(name, level))
        distance = scores / alpha if np.isfinite(alpha) else np.zeros_like(scores)
        typ = {**self._typicality(X, typicality), "warnings": tuple(said), "readings": self._readings(raw)}
        if codes is None or not joint:
            return Assessment(method=name, fallback_reason=reason, inside=distance <= 1.0, distance=distance,
                              p_value=reg.calibrator_.p_value(scores), **typ)
        floor_inside = self.floors.sets(proba, t)[np.arange(len(codes)), codes]
        p_value = self.floors.joint[name].calibrator.p_value(self.floors.joint_scores(name, proba, codes, scores))
        return Assessment(method=name, fallback_reason=reason, inside=floor_inside & (distance <= 1.0),
                          distance=distance, p_value=p_value, floor_inside=floor_inside, **typ)

    def _floor_codes(self, floors, buildings, X: np.ndarray) -> np.ndarray | None:
        """The class codes of a request's ``floors`` (and ``buildings``), checked: one per row, known labels."""
        if floors is None:
            if buildings is not None:
                raise InputError("buildings: given without floors; send a floor with each building",
                                 field="floors", expected=f"{X.shape[0]} floors", received="none")
            return None
        if self.floors is None:
            raise InputError("floors: this bundle was trained without floors (lmve-train --floor-column); leave "
                             "`floors` out", field="floors", expected="no floors", received=f"{len(floors)} values")
        if len(floors) != X.shape[0]:
            raise InputError(f"floors has {len(floors)} values for {X.shape[0]} rows of features; send one floor "
                             "per row", field="floors", expected=f"{X.shape[0]} values", received=f"{len(floors)}")
        return self.floors.labels.encode(floors, buildings)

    def score_points(self, features, points, centers=None) -> dict[str, np.ndarray]:
        """Every method's conformity scores of labelled points; feedback on served regions.

        No fallback: each method scores with its own shapes, and a row whose shape is not finite scores
        ``+inf`` (outside).

        Parameters
        ----------
        features : array-like of shape (N, d)
            Raw features.
        points : array-like of shape (N, n)
            The true positions.
        centers : array-like of shape (N, n), default=None
            The client's estimates (client-centre bundles only).

        Returns
        -------
        dict of str -> ndarray of shape (N,)
            Scores by method name.

        Raises
        ------
        InputError
            Features, points or centres of the wrong shape, or centres where they are refused.
        """
        X = self._features(features)
        P = self._points(points, X)
        out = {}
        with shared_distances():
            residuals = P - self._centers(centers, X)
            for name, reg in self.methods.items():
                s = np.asarray(reg.shape_.conformity_scores(X, residuals), dtype=np.float64)
                out[name] = np.where(np.isfinite(s), s, np.inf)
        return out

    def recalibrated(self, features, points, groups=None, centers=None, rule: str | None = None,
                     random_state: int = 0, floors=None, buildings=None) -> "RegionModel":
        """A new model calibrated on fresh labelled rows; this one is left untouched.

        The new model keeps this one's preprocessing, scaler, centre and shapes. A floor bundle's joint
        calibrations are recalibrated with the same rule, groups and seed
        (:meth:`models.floors.FloorModel.recalibrated`).

        Parameters
        ----------
        features : array-like of shape (k, d)
            Raw features of the fresh rows.
        points : array-like of shape (k, n)
            Their true positions.
        groups : array-like of shape (k,), default=None
            Their groups: calibrates over whole groups.
        centers : array-like of shape (k, n), default=None
            The client's estimates (client-centre bundles only).
        rule : str, default=None
            A calibration rule; ``None`` is ``"rows"`` without groups and ``"group-subsample"`` with them.
        random_state : int, default=0
            Seed of the group-subsample draw.
        floors : array-like of shape (k,), default=None
            The rows' true floors; required by a floor bundle.
        buildings : array-like of shape (k,), default=None
            The rows' buildings, when floors are (building, floor) pairs.

        Returns
        -------
        RegionModel
            With an empty manifest, for :func:`models.bundle.save_recalibrated` to fill.

        Raises
        ------
        InputError
            Rows of the wrong shape, an unknown rule, groups not one per row, a floor bundle without
            ``floors``, or too few fresh rows or groups for the bundle's level (the message names the highest
            attainable level and how many are needed).
        """
        import copy

        from models.calibration.conformal import check_rule, group_codes, max_coverage

        X = self._features(features)
        P = self._points(points, X)
        if self.floors is not None and floors is None:
            columns = ", ".join(self.floors.labels.columns)
            raise InputError(f"floors: this bundle calibrates floors and positions jointly; recalibrating it needs each "
                             f"fresh row's true floor ({columns})", field="floors", expected=f"the column(s) {columns}",
                             received="none")
        codes = self._floor_codes(floors, buildings, X)
        mu = self._centers(centers, X)
        rule = check_rule(rule or ("rows" if groups is None else "group-subsample"))
        if groups is not None:
            groups = np.asarray(groups)
            if groups.shape[0] != X.shape[0]:
                raise InputError(f"groups has {groups.shape[0]} labels for {X.shape[0]} rows", field="groups",
                                 expected=f"{X.shape[0]} labels", received=f"{groups.shape[0]}")
        units = X.shape[0] if groups is None or rule == "rows" else int(group_codes(groups, len(groups)).max()) + 1
        if self.coverage > max_coverage(units):
            what = "rows" if groups is None or rule == "rows" else "groups"
            raise InputError(f"{units} fresh {what} attain coverage at most {max_coverage(units):.4g}, below the "
                             f"bundle's {self.coverage}; send at least {int(np.ceil(self.coverage / (1 - self.coverage) - 1e-9))}",
                             field="groups" if what == "groups" else "features", expected=f"more {what}",
                             received=str(units))
        methods = {}
        for name, reg in self.methods.items():
            new = SplitConformalRegressor(copy.deepcopy(reg.shape_), centre=reg.centre_, coverage=self.coverage,
                                          prefit_centre=True, calibration=rule, random_state=random_state)
            new.centre_, new.shape_ = reg.centre_, new.shape
            methods[name] = new.conformalize(X, P, centers=mu, groups=groups if rule != "rows" else None)
        floor_model = None
        if self.floors is not None:
            scores = {name: methods[name].shape_.conformity_scores(X, P - mu) for name in self.floors.joint}
            floor_model = self.floors.recalibrated(self.floors.proba(X), codes, scores, rule,
                                                   groups if rule != "rows" else None, random_state)
        return RegionModel(feature_names=list(self.feature_names), target_names=list(self.target_names),
                           scaler_mean=self.scaler_mean, scaler_scale=self.scaler_scale, methods=methods,
                           coverage=self.coverage, manifest={}, preprocess=self.preprocess,
                           selection=dict(self.selection), floors=floor_model, crs=self.crs, survey=self.survey,
                           typicality=None if self.typicality is None else self.typicality.recalibrated(X),
                           readings=self.readings, radio_map=self.radio_map)

    def predict_center(self, features, centers=None) -> np.ndarray:
        """The centres of raw features.

        Parameters
        ----------
        features : array-like of shape (N, d)
            Raw features.
        centers : array-like of shape (N, n), default=None
            The client's estimates (client-centre bundles only).

        Returns
        -------
        ndarray of shape (N, n)
            The bundle's centre's predictions, or the checked ``centers`` of a client-centre bundle.

        Raises
        ------
        InputError
            Features or centres of the wrong shape, or centres where they are refused.
        """
        X = self._features(features)
        return self._centers(centers, X)

    def typicality_scores(self, features) -> np.ndarray | None:
        """The typicality scores of raw features (:mod:`models.typicality`).

        Parameters
        ----------
        features : array-like of shape (N, d)
            Raw features.

        Returns
        -------
        ndarray of shape (N,) or None
            Larger is less like the survey; ``None`` for a bundle without the step.
        """
        if self.typicality is None:
            return None
        return self.typicality.scores(self._features(features))

    def standardise(self, features) -> np.ndarray:
        """Raw features checked, preprocessed and on the training scale.

        Parameters
        ----------
        features : array-like of shape (N, d)
            Raw features.

        Returns
        -------
        ndarray of shape (N, d)
            What the centre and the shapes read.

        Raises
        ------
        InputError
            Features of the wrong width, or not numbers.
        """
        return self._features(features)
