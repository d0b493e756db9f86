"""``--primary``: which method the plain routes serve, chosen on rows the calibration does not use.

Every calibrated method covers a new row with ``P >= eta``; they differ in how large their regions
are. ``auto`` serves the ellipsoid method whose regions are smallest on **held-out rows**: rows that
neither the shapes nor the calibration saw (the test part). For each method the held-out rows'
own conformity scores give a threshold, their empirical ``eta``-quantile, and the method's score
is the mean volume of its regions at that threshold over the same rows: the area a region of
that method needs to hold ``eta`` of rows it has not seen, with the threshold of neither the
calibration rows nor any other method.

Why not rank the calibrated regions themselves: their threshold ``alpha_q`` is computed from the
calibration scores, so choosing the method of smallest calibrated volume would favour the method
whose calibration draw happened to be low, which is the one most likely to under-cover (SPEC
section 9: selecting on calibration rows breaks the guarantee). Here nothing the choice reads
depends on a calibration row: change them and the choice and its figures stay; the served
method's guarantee is its split-conformal one, exact.

Box methods (Copula) are never served by the plain routes, so never ranked; their held-out figures
are reported beside the others' (Copula's score is itself built on calibration ranks, so its figures,
unlike the ellipsoids', move with the calibration rows). The record also carries, per method, the coverage and mean volume of the *calibrated* regions on
the same rows (what the report's test table shows): figures for people, not inputs to the choice.
With ``auto`` the served method's test figures are those it was chosen on, so its test volume is
the smallest by construction (``benchmarks/primary.py`` measures the choice on rows it did not see).
"""

from __future__ import annotations

import numpy as np

from models import registry
from models.exceptions import InputError

#: what ``--primary`` accepts besides a method name
AUTO = "auto"


def check_primary(primary: str, methods) -> str:
    """``primary`` if it is ``"auto"`` or an ellipsoid method among ``methods``; else an :class:`InputError`."""
    allowed = [m for m in methods if registry.METHODS[m].kind == "ellipsoid"]
    if primary != AUTO and primary not in allowed:
        raise InputError(f"--primary must be auto or an ellipsoid method being trained ({', '.join(allowed)}); got "
                         f"{primary!r}", field="primary", expected=" | ".join([AUTO, *allowed]), received=str(primary))
    return primary


def held_out_figures(model, X_raw: np.ndarray, Y: np.ndarray, eta: float, centers=None) -> dict:
    """Per method of ``model``, on held-out rows ``X_raw`` (k, d), ``Y`` (k, n): ``volume`` (the mean
    volume at the rows' own empirical ``eta``-quantile score, what :func:`choose` ranks), ``threshold``
    (that quantile), and the calibrated regions' ``coverage`` and ``volume_calibrated`` (report only)."""
    X = model.standardise(X_raw)
    mu = model.predict_center(X_raw, centers)
    scores = model.score_points(X_raw, Y, centers)
    out = {}
    for name, reg in model.methods.items():
        s = scores[name]
        q = float(np.quantile(s, eta, method="higher")) if np.isfinite(s).any() else np.inf
        volume = float(np.mean(reg.shape_.region(X, mu, q, eta).volume("lebesgue"))) if np.isfinite(q) else np.inf
        out[name] = {"volume": volume, "threshold": q, "coverage": float(np.mean(s <= reg.alpha_q_)),
                     "volume_calibrated": float(np.mean(reg.shape_.region(X, mu, reg.alpha_q_, eta)
                                                        .volume("lebesgue")))}
    return out


def choose(model, X_raw: np.ndarray, Y: np.ndarray, eta: float, primary: str = AUTO, centers=None,
           rows: str = "test part") -> dict:
    """The ``selection`` record of ``model`` (see :attr:`models.model.RegionModel.selection`):
    ``order``, the ellipsoid methods by held-out volume (ties: the registry's order), with a forced
    ``primary`` first; ``primary``; ``rule`` (``"auto"`` or ``"forced"``); ``rows`` and ``n_rows``
    (what the figures were measured on); ``criterion`` in words; ``held_out`` (:func:`held_out_figures`)."""
    figures = held_out_figures(model, X_raw, Y, eta, centers)
    fallback = registry.fallback_order()
    ellipsoids = [m for m in fallback if m in model.methods]
    if not ellipsoids:
        raise InputError(f"the model has no ellipsoid method to serve; it has {sorted(model.methods)}")
    ranked = sorted(ellipsoids, key=lambda m: (_finite(figures[m]["volume"]), fallback.index(m)))
    if primary != AUTO:
        ranked = [primary, *[m for m in ranked if m != primary]]
    return {"rule": "auto" if primary == AUTO else "forced", "primary": ranked[0], "order": ranked,
            "rows": rows, "n_rows": int(len(Y)),
            "criterion": f"mean volume at the {eta:g}-quantile of the held-out rows' own scores (no calibration "
                         "row is read)",
            "held_out": {m: {k: _json(v) for k, v in f.items()} for m, f in figures.items()}}


def _finite(v: float) -> float:
    return v if np.isfinite(v) else np.inf


def _json(v: float):
    return float(v) if np.isfinite(v) else None


def selection_line(selection: dict) -> str:
    """``NLE (auto: smallest held-out volume on 200 test-part rows: NLE 119, GE 130, LMVE 156)``."""
    if not selection:
        return "not recorded (the registry's order: LMVE, then NLE, then GE)"
    held = selection.get("held_out", {})
    figures = ", ".join(f"{registry.METHODS[m].label} {_fmt(held.get(m, {}).get('volume'))}"
                        for m in selection["order"])
    why = "auto: smallest held-out volume" if selection["rule"] == "auto" else "forced by --primary; held-out volume"
    return (f"{registry.METHODS[selection['primary']].label} ({why} on {selection['n_rows']} rows of the "
            f"{selection['rows']}: {figures}); fallbacks in that order")


def _fmt(v) -> str:
    return "unbounded" if v is None else f"{v:.4g}"
