"""The survey's radio map kept in a bundle, and the model it gives under a live transmitter set.

A :class:`RadioMap` is the survey's own rows as they were read: the raw features of the rows the centre was
fitted on (``reference``) and of the rows that calibrated it (``calibration``), their positions and units
(positions, or rows). It supports two things no label is needed for:

* :meth:`RadioMap.baseline`: what the survey heard of each transmitter (:class:`models.radio.RadioBaseline`);
* :meth:`RadioMap.adapt`: with some transmitters gone (a :class:`models.radio.RadioView`), the centre becomes a
  weighted k-nearest-neighbour search of the reference rows with those columns "not heard" on both sides (the
  bundle's own fingerprint or k-NN configuration; for any other centre, which cannot leave a column out of
  its fitted function, the textbook configuration on the same readings, or on the standardised features of a
  bundle without an RSSI step), and each method's calibration is
  re-scored: every calibration row read under the live set, its centre from the reference rows of *other*
  units, scored by the method's own shape, thresholded by the bundle's rule. The survey's labels, no new
  ones: the region's size follows the centre's error under the live set.

What is exact and what approximate: for a reading drawn as the survey's were with the gone transmitters
switched off, the re-scored calibration rows are exchangeable with it when they were held out of the shapes'
fit (a split bundle), and the level holds as the bundle's guarantee says; for the real drift (other changes
than the gone transmitters), and for a bundle whose shapes learned from its calibration rows (cross-fit), it is
approximate.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from models.centres.fingerprint import TEXTBOOK, FingerprintCentre, _weighted
from models.centres.knn import KNNCentre
from models.centres.representations import ReadingSpace
from models.exceptions import BundleError
from models.predictor import SplitConformalRegressor
from models.radio import RadioBaseline, RadioView

#: what an adapted model's regions promise, in the words the README, ``GET /model`` and the report share
GUARANTEE = ("The regions follow the radio the service is sent: transmitters it no longer hears leave the position "
             "search, and each region's size is re-measured on the survey's own labelled readings with them left "
             "out, so it grows with the position's error. Exact: where the only changes are those transmitters "
             "switched off and a constant signal offset (taken off), a split-calibrated bundle keeps its stated "
             "level. Approximate: any other change of the radio (new transmitters are ignored), and a cross-fit "
             "bundle, whose shapes learned from the rows that re-measure them.")
#: gone transmitters that carried less than this share of the survey's readings leave the bundle's own centre
#: and calibration as they are (they read "not heard", as the queries read them)
MIN_GONE_WEIGHT = 0.05
#: a fingerprint configuration's keys
KNN_KEYS = ("representation", "cutoff_db", "n_neighbors", "weights")
#: reference rows kept at most (a seeded subset beyond), as the k-NN centre caps its own
MAX_ROWS = 16384
#: query rows per block of the leave-unit-out search (a block's float32 distances to 16,384 rows: 32 MB)
BLOCK = 512
#: candidates beyond ``k`` whose distances :func:`leave_unit_out` re-measures exactly
SPARE = 8


@dataclass(frozen=True)
class RadioMap:
    """``features`` (m, d) raw rows, ``positions`` (m, n), ``units`` (m,) int codes, and two (m,) bool flags:
    ``reference`` (the centre's rows) and ``calibration`` (the rows that calibrated it; both for a cross-fit
    bundle); ``knn``: the fingerprint configuration (``representation``, ``cutoff_db``, ``n_neighbors``,
    ``weights``) a centre that is no k-NN search is replaced by (training's fingerprint search, where it ran;
    ``None``: the textbook one)."""

    features: np.ndarray
    positions: np.ndarray
    units: np.ndarray
    reference: np.ndarray
    calibration: np.ndarray
    knn: dict | None = None

    @classmethod
    def of(cls, features, positions, units, reference, calibration, seed: int = 0,
           knn: dict | None = None) -> "RadioMap":
        """The map of the rows ``reference | calibration`` of raw ``features`` and ``positions`` (``units``:
        each row's unit, ``None``: each row alone), at most :data:`MAX_ROWS` reference rows (seeded); ``knn``
        as the class says."""
        features, positions = np.asarray(features), np.asarray(positions, dtype=np.float64)
        m = len(features)
        units = np.arange(m) if units is None else np.unique(np.asarray(units), return_inverse=True)[1].ravel()
        reference, calibration = np.asarray(reference, bool).copy(), np.asarray(calibration, bool)
        ref = np.flatnonzero(reference)
        if len(ref) > MAX_ROWS:
            keep = np.random.default_rng(seed).choice(ref, MAX_ROWS, replace=False)
            reference[:] = False
            reference[keep] = True
        rows = reference | calibration
        if knn is not None:  # plain JSON values
            knn = {"representation": str(knn["representation"]), "cutoff_db": float(knn["cutoff_db"]),
                   "n_neighbors": int(knn["n_neighbors"]), "weights": str(knn["weights"])}
        return cls(knn=knn, features=features[rows].astype(np.float32), positions=positions[rows],
                   units=units[rows].astype(np.int64), reference=reference[rows], calibration=calibration[rows])

    def refits(self, view: RadioView, baseline: RadioBaseline) -> bool:
        """Whether ``view``'s gone transmitters carried :data:`MIN_GONE_WEIGHT` of the survey's readings (the
        share of its heard readings that were theirs): only then is the centre searched without them and the
        calibration re-scored."""
        if not view.gone:
            return False
        heard = baseline.rate[baseline.surveyed].sum()
        return bool(heard > 0 and baseline.rate[list(view.gone)].sum() >= MIN_GONE_WEIGHT * heard)

    def baseline(self, rssi: np.ndarray, unheard: np.ndarray) -> RadioBaseline:
        """What the survey heard, over every row of the map and per position group (built once for the same
        ``rssi`` and ``unheard`` arrays, the model's own: every query's count reads it)."""
        cached = self.__dict__.get("_baseline")
        if cached is None or cached[0] is not rssi or cached[1] is not unheard:
            cached = (rssi, unheard, RadioBaseline.of(self.features, rssi, unheard, self.positions))
            object.__setattr__(self, "_baseline", cached)  # a cache beside the frozen fields
        return cached[2]

    # ------------------------------------------------------------------ the model under a live set
    def adapt(self, model, view: RadioView, baseline: RadioBaseline) -> tuple[object, dict, np.ndarray]:
        """``(centre, methods, held_out)`` of ``model`` (a :class:`~models.model.RegionModel`) under ``view``'s gone
        transmitters: the masked k-NN centre, every method re-scored (see the module), and the calibration rows'
        centres from the reference rows of other units (q, n) that re-scored them."""
        mask = RadioView(gone=view.gone, new=view.new)
        ref, cal = np.flatnonzero(self.reference), np.flatnonzero(self.calibration)
        X = mask.apply(self.features.astype(np.float64), baseline)
        Xs = model._scaled(X)
        centre, represent = masked_centre(model, Xs[ref], self.positions[ref])
        mu = leave_unit_out(represent(Xs[ref]), self.positions[ref], self.units[ref], represent(Xs[cal]),
                            self.units[cal], centre)
        methods = {}
        for name, reg in model.methods.items():
            new = SplitConformalRegressor(reg.shape_, centre=centre, coverage=model.coverage, prefit_centre=True,
                                          calibration=reg.calibration, random_state=reg.random_state)
            new.centre_, new.shape_ = centre, reg.shape_
            grouped = reg.calibration != "rows"
            methods[name] = new.conformalize(Xs[cal], self.positions[cal], centers=mu,
                                             groups=self.units[cal] if grouped else None)
        return centre, methods, mu

    def extended(self, features: np.ndarray, positions: np.ndarray, units: np.ndarray | None) -> "RadioMap":
        """This map with labelled rows added, each both a reference and a calibration row (at most
        :data:`MAX_ROWS` reference rows: the newest kept). ``units``: each new row's unit (``None``: each row
        alone); a new unit at one of the map's positions joins that position's unit, so that a row is never
        centred on readings taken where it was."""
        features, positions = np.asarray(features), np.asarray(positions, dtype=np.float64)
        k = len(features)
        fresh = np.arange(k) if units is None else np.unique(np.asarray(units), return_inverse=True)[1].ravel()
        codes = fresh + int(self.units.max(initial=-1)) + 1
        where = {tuple(np.round(p, 6)): u for p, u in zip(self.positions, self.units)}
        for code in np.unique(codes):
            rows = codes == code
            at = {tuple(np.round(p, 6)) for p in positions[rows]}
            if len(at) == 1 and next(iter(at)) in where:
                codes[rows] = where[next(iter(at))]
        reference = np.concatenate([self.reference, np.ones(k, bool)])
        ref = np.flatnonzero(reference)
        if len(ref) > MAX_ROWS:  # the oldest reference rows go first
            reference[ref[:len(ref) - MAX_ROWS]] = False
        return RadioMap(knn=self.knn, features=np.concatenate([self.features, features.astype(np.float32)]),
                        positions=np.concatenate([self.positions, positions]),
                        units=np.concatenate([self.units, codes.astype(np.int64)]), reference=reference,
                        calibration=np.concatenate([self.calibration, np.ones(k, bool)]))

    # ------------------------------------------------------------------ the stored form
    def to_arrays(self) -> tuple[dict, dict[str, np.ndarray]]:
        return ({"rows": int(len(self.features)), "reference": int(self.reference.sum()),
                 "calibration": int(self.calibration.sum()), "knn": self.knn},
                {"features": self.features, "positions": self.positions, "units": self.units,
                 "reference": self.reference.astype(np.int8), "calibration": self.calibration.astype(np.int8)})

    @classmethod
    def from_arrays(cls, arrays, d: int, n: int, path: str = "radio.npz", knn: dict | None = None) -> "RadioMap":
        if knn is not None and (not isinstance(knn, dict) or set(knn) != set(KNN_KEYS)):
            raise BundleError(f"the manifest's radio.knn must have the keys {', '.join(KNN_KEYS)}; got {knn!r}",
                              path=path)
        try:
            out = cls(knn=knn, features=np.asarray(arrays["features"]),
                      positions=np.asarray(arrays["positions"], float),
                      units=np.asarray(arrays["units"], np.int64), reference=np.asarray(arrays["reference"]) != 0,
                      calibration=np.asarray(arrays["calibration"]) != 0)
        except KeyError as exc:
            raise BundleError(f"{path} lacks the array {exc}", path=path) from None
        m = len(out.features)
        if (out.features.shape != (m, d) or out.positions.shape != (m, n)
                or any(a.shape != (m,) for a in (out.units, out.reference, out.calibration))):
            raise BundleError(f"{path}: its arrays do not fit the bundle (d = {d}, n = {n})", path=path)
        return out


def masked_centre(model, Xs: np.ndarray, Y: np.ndarray):
    """``(centre, represent)``: a k-NN centre fitted on the masked standardised reference rows ``Xs`` in the
    bundle's own configuration (a fingerprint or k-NN centre), else the radio map's (:attr:`RadioMap.knn`, or the
    textbook one) on the readings; and the map from standardised rows to what it searches."""
    own = model.centre
    if isinstance(own, FingerprintCentre):
        c = own.chosen_
        centre = FingerprintCentre(representation=c["representation"], cutoff_db=c["cutoff_db"],
                                   n_neighbors=int(c["n_neighbors"]), weights=c["weights"], space=own.space)
        centre.fit(Xs, Y)
        return centre, centre._represent
    if isinstance(own, KNNCentre):
        centre = KNNCentre(n_neighbors=own.n_neighbors, weights=own.weights, max_rows=None).fit(Xs, Y)
        return centre, lambda X: X
    knn = (model.radio_map.knn if model.radio_map is not None else None) or TEXTBOOK
    space = None if model.preprocess is None else ReadingSpace.of(model.preprocess, _Scaler(model))
    if space is None:  # no RSSI step: a k-NN search of the standardised features (a masked column adds 0)
        centre = KNNCentre(n_neighbors=int(knn["n_neighbors"]), weights=knn["weights"], max_rows=None)
        return centre.fit(Xs, Y), lambda X: X
    centre = FingerprintCentre(**{k: knn[k] for k in KNN_KEYS}, space=space).fit(Xs, Y)
    return centre, centre._represent


class _Scaler:
    """The model's scaler as :meth:`ReadingSpace.of` reads one."""

    def __init__(self, model):
        self.mean_, self.scale_ = model.scaler_mean, model.scaler_scale


def leave_unit_out(F_ref: np.ndarray, Y_ref: np.ndarray, u_ref: np.ndarray, F_q: np.ndarray, u_q: np.ndarray,
                   centre) -> np.ndarray:
    """(q, n) each query row's weighted k-NN centre among the reference rows of other units (the centre's ``k``
    and weights). Candidates from float32 distances, one matrix product per :data:`BLOCK` queries (a dense
    search beats a tree index at hundreds of features); the :data:`SPARE` nearest beyond ``k`` re-measured in
    float64, so that the weights are exact and the cancellation of float32 norms cannot reorder them."""
    knn = centre.knn_ if isinstance(centre, FingerprintCentre) else centre
    k, weights = int(knn.n_neighbors), knn.weights
    R = np.ascontiguousarray(F_ref, dtype=np.float32)
    R64 = np.asarray(F_ref, dtype=np.float64)
    norms = np.einsum("ij,ij->i", R, R)
    out = np.empty((len(F_q), Y_ref.shape[1]))
    K = min(k, len(R))
    C = min(K + SPARE, len(R))
    for start in range(0, len(F_q), BLOCK):
        Q = np.ascontiguousarray(F_q[start:start + BLOCK], dtype=np.float32)
        D = Q @ R.T
        D *= -2.0
        D += norms
        D += np.einsum("ij,ij->i", Q, Q)[:, None]
        mine = u_q[start:start + BLOCK, None] == u_ref[None, :]
        D[mine] = np.inf
        cand = np.argpartition(D, C - 1, axis=1)[:, :C]
        Q64 = np.asarray(F_q[start:start + BLOCK], dtype=np.float64)
        exact = np.sqrt(((Q64[:, None, :] - R64[cand]) ** 2).sum(axis=2))
        exact[np.take_along_axis(mine, cand, axis=1)] = np.inf
        order = np.argsort(exact, axis=1, kind="stable")[:, :K]
        part = np.take_along_axis(cand, order, axis=1)
        out[start:start + len(Q)] = _weighted(part, np.take_along_axis(exact, order, axis=1), Y_ref, weights)
    return out
