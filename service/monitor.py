"""Feedback on served regions: observed coverage, and the adaptive mode (opt-in).

:class:`Monitor` scores labelled rows (``POST /feedback``) with every method of the served bundle,
stores the verdicts in the :class:`~service.state.ServiceState` and, in adaptive mode, moves what
each method serves: its level by adaptive conformal inference (``aci``,
:class:`models.calibration.adaptive.AdaptiveConformal`) or its threshold by quantile tracking (``quantile``,
:class:`models.calibration.adaptive.QuantileTracker`).
Each worker keeps the levels of each model's served bundle in memory for the region routes (a dict lookup
per request) and refreshes them from the shared state after its own feedback and on every sync
tick, so that all workers serve the level that all feedback produced.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from models.calibration.adaptive import AdaptiveConformal, QuantileTracker, run_stream
from service.metrics import StateCollector
from service.settings import ServiceSettings
from service.state import MethodFeedback, ServiceState, StateUnavailable
from service.store import Loaded


@dataclass(frozen=True)
class FeedbackResult:
    rows: int
    inside: dict[str, list[bool]]
    p_value: dict[str, list[float]]
    inside_served: dict[str, list[bool]]


def binomial_margin(target: float, rows: int, z: float = 2.326) -> float:
    """One-sided margin ``z sqrt(target (1 - target) / rows)`` of a coverage observed over ``rows``
    (z = 2.326: about 1 % false alarms when the regions do cover at ``target``)."""
    return math.inf if rows <= 0 else z * math.sqrt(target * (1.0 - target) / rows)


class Monitor:
    def __init__(self, state: ServiceState, settings: ServiceSettings):
        self.state, self.settings = state, settings
        self.adaptive = settings.adaptive != "off"
        #: model -> (bundle_id, method -> (level, threshold or None)): what the region routes serve
        self._served: dict[str, tuple[str, dict[str, tuple[float, float | None]]]] = {}

    # ------------------------------------------------------------------ the served level
    def _rule(self, loaded: Loaded, method: str, stored: tuple | None):
        """The online rule of ``method`` in its stored state (``None``: fresh)."""
        model = loaded.model
        reg = model.methods[method]
        cal = reg.calibrator_
        if self.settings.adaptive == "aci":
            return AdaptiveConformal(target=model.coverage, quantile=cal.quantile, gamma=self.settings.adaptive_gamma,
                                     min_level=min(self.settings.adaptive_min_level, model.coverage),
                                     max_level=cal.max_coverage, alpha=None if stored is None else stored[0])
        return QuantileTracker(target=model.coverage, q0=reg.threshold(None), lr=self.settings.adaptive_lr,
                               q=None if stored is None else stored[0], scale=None if stored is None else stored[1])

    @staticmethod
    def _serves(rule, cal) -> tuple[float, float | None]:
        """``(level, threshold)`` a rule serves now: ACI a calibrated level (threshold ``None``: the
        calibration's at that level); quantile tracking its threshold, reported as the calibration's
        level of it."""
        if isinstance(rule, AdaptiveConformal):
            return rule.level, None
        q = rule.threshold()
        return cal.level_of(q), q

    @staticmethod
    def _state(rule) -> tuple[float, float | None]:
        return (rule.alpha, None) if isinstance(rule, AdaptiveConformal) else (rule.q, rule.scale)

    def level(self, loaded: Loaded, method: str) -> float | None:
        """The served level of ``method`` on ``loaded``; ``None`` when adaptive mode is off (the
        request's or the bundle's level applies)."""
        if not self.adaptive:
            return None
        bundle_id, served = self._served.get(loaded.name, ("", {}))
        if bundle_id != loaded.version or method not in served:
            return loaded.model.coverage
        return served[method][0]

    def thresholds(self, loaded: Loaded) -> dict[str, tuple[float, float]] | None:
        """``method -> (threshold, level)`` to serve instead of the calibrated thresholds (quantile
        tracking), or ``None``."""
        if self.settings.adaptive != "quantile":
            return None
        bundle_id, served = self._served.get(loaded.name, ("", {}))
        if bundle_id != loaded.version:
            return None
        return {m: (t, lv) for m, (lv, t) in served.items() if t is not None} or None

    def refresh(self, loaded: Loaded | None) -> None:
        """Reload what is served for ``loaded`` from the shared state."""
        if not self.adaptive or loaded is None:
            return
        try:
            stored = self.state.adaptive_state(loaded.name, loaded.version)
        except StateUnavailable:  # keep serving the levels last read; the next sync tick tries again
            return
        served = {m: self._serves(self._rule(loaded, m, st), loaded.model.methods[m].calibrator_)
                  for m, st in stored.items() if m in loaded.model.methods}
        self._served = {**self._served, loaded.name: (loaded.version, served)}  # one assignment: atomic for readers

    def forget(self, name: str) -> None:
        """Drop what is served for an unloaded model."""
        self._served = {k: v for k, v in self._served.items() if k != name}

    # ------------------------------------------------------------------ feedback
    def record(self, loaded: Loaded, features, points, centers=None, site: str | None = None,
               device: str | None = None) -> FeedbackResult:
        """Score and store labelled rows (checked first: bad input raises before anything is stored)."""
        model = loaded.model
        scores = model.score_points(features, points, centers=centers)
        batch = {}
        for name, s in scores.items():
            reg = model.methods[name]
            alpha_q = reg.threshold(None)
            batch[name] = MethodFeedback(inside=s <= alpha_q, p_value=reg.calibrator_.p_value(s), scores=s)

        def adapt(method, stored, s):
            rule = self._rule(loaded, method, stored)
            cal = model.methods[method].calibrator_
            misses, levels = run_stream(rule, s, served=lambda r: self._serves(r, cal)[0])
            return self._state(rule), levels, ~misses

        served = self.state.record_feedback(loaded.name, loaded.version, batch, site=site, device=device,
                                            adapt=adapt if self.adaptive else None, target=model.coverage,
                                            points=points)
        self.refresh(loaded)
        return FeedbackResult(rows=len(next(iter(scores.values()))),
                              inside={m: fb.inside.tolist() for m, fb in batch.items()},
                              p_value={m: fb.p_value.tolist() for m, fb in batch.items()},
                              inside_served={m: v.tolist() for m, v in served.items()})

    def summary(self, loaded: Loaded) -> dict:
        """Per method: the observed coverage over the window, its rows, mean p-value, the target, the
        binomial margin and (adaptive mode) the served level."""
        model = loaded.model
        stats = self.state.window(loaded.name, loaded.version, self.settings.feedback_window)
        out = {}
        for name in model.methods:
            w = stats.get(name)
            rows = 0 if w is None else w.rows
            entry = {"window": self.settings.feedback_window, "rows": rows,
                     "observed_coverage": None if w is None else w.coverage,
                     "p_value_mean": None if w is None else w.p_value_mean,
                     "target": model.coverage, "margin": binomial_margin(model.coverage, rows) if rows else None}
            if self.adaptive:
                entry["effective_coverage"] = self.level(loaded, name)
                entry["served_coverage"] = None if w is None else w.served_coverage
                bundle_id, by_method = self._served.get(loaded.name, ("", {}))
                served = by_method.get(name) if bundle_id == loaded.version else None
                entry["threshold"] = (served[1] if served and served[1] is not None
                                      else model.methods[name].threshold(entry["effective_coverage"]))
            out[name] = entry
        step = {"aci": {"gamma": self.settings.adaptive_gamma}, "quantile": {"lr": self.settings.adaptive_lr}}
        return {"adaptive": self.settings.adaptive, **step.get(self.settings.adaptive, {}),
                "shared_state": self.state.shared, "methods": out}


class FeedbackCollector(StateCollector):
    """Prometheus view of the shared state: host totals as counters (any worker answers the same),
    the window's observed coverage, its rows and mean p-value, the target and the served level as
    gauges of each loaded model's bundle; every family is labelled by model and method. ``source``: the
    :class:`Monitor`."""

    source: Monitor

    @staticmethod
    def families():
        labels = ["model", "method"]
        return {
            "rows": CounterMetricFamily("lmve_feedback_rows", "Labelled feedback rows scored (host total)",
                                        labels=labels),
            "inside": CounterMetricFamily("lmve_feedback_inside", "Feedback rows inside the region at the bundle's "
                                          "level (host total)", labels=labels),
            "inside_served": CounterMetricFamily("lmve_feedback_inside_served", "Feedback rows inside the region "
                                                 "actually served (the adaptive level when on; host total)",
                                                 labels=labels),
            "coverage": GaugeMetricFamily("lmve_observed_coverage", "Observed coverage over the feedback window "
                                          "(served bundle, bundle's level)", labels=labels),
            "served": GaugeMetricFamily("lmve_observed_served_coverage", "Observed coverage of the regions actually "
                                        "served (the adaptive level when on) over the window", labels=labels),
            "count": GaugeMetricFamily("lmve_observed_rows", "Feedback rows in the window", labels=labels),
            "p": GaugeMetricFamily("lmve_observed_p_value_mean", "Mean conformal p-value over the window "
                                   "(about 0.5 when calibrated)", labels=labels),
            "target": GaugeMetricFamily("lmve_coverage_target", "The bundle's coverage level", labels=labels),
            "effective": GaugeMetricFamily("lmve_effective_coverage", "The level served now (adaptive mode: moved "
                                           "by feedback)", labels=labels),
            "up": GaugeMetricFamily("lmve_state_up", "1 when the shared state's database answered this scrape, 0 "
                                    "when not (the feedback families are then absent)"),
        }

    def collect(self):
        f = self.families()
        loaded_models = self.loaded()
        try:
            counters = self.source.state.counters()
            windows = {model: self.source.state.window(model, loaded.version, self.source.settings.feedback_window)
                       for model, loaded in loaded_models.items()}
        except StateUnavailable:
            counters, windows = {}, None
        f["up"].add_metric([], 0.0 if windows is None else 1.0)
        for model, methods in counters.items():
            if model not in loaded_models:  # label values only for loaded models
                continue
            for method, c in methods.items():
                f["rows"].add_metric([model, method], c["rows"])
                f["inside"].add_metric([model, method], c["inside"])
                f["inside_served"].add_metric([model, method], c["inside_served"])
        for model, loaded in loaded_models.items():
            stats = {} if windows is None else windows[model]
            for method in loaded.model.methods:
                w = stats.get(method)
                if w is not None and w.rows:
                    f["coverage"].add_metric([model, method], w.coverage)
                    f["served"].add_metric([model, method], w.served_coverage)
                    f["count"].add_metric([model, method], w.rows)
                    f["p"].add_metric([model, method], w.p_value_mean)
                f["target"].add_metric([model, method], loaded.model.coverage)
                level = self.source.level(loaded, method)
                f["effective"].add_metric([model, method], loaded.model.coverage if level is None else level)
        return list(f.values())
