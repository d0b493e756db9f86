"""The shift alarm: each model's served queries, tested online for exchangeability with its calibration rows.

The guarantee holds while queries are exchangeable with the calibration rows. A bundle with the typicality
step (:mod:`models.typicality`) scores every query's features; :class:`ShiftAlarm` feeds those scores to a
conformal test martingale (:class:`models.calibration.martingale.ShiftTest`) whose evidence reaches
``1 / delta`` with probability at most ``delta`` while the queries stay exchangeable (Ville's inequality),
``delta`` being ``LMVE_SHIFT_DELTA``. The alarm informs: answers are never blocked or changed by it.

Off the request path. A region route only appends the answer's scores to its model's pending list
(:meth:`ShiftAlarm.observe`: a lock and an append). :meth:`ShiftAlarm.flush` (every ``LMVE_SYNC_INTERVAL_S``
on each worker, and before ``GET /model`` reports) steps each model's test by its pending scores in one
transaction of the shared state (:meth:`service.state.ServiceState.step_shift`), so every worker of a host
(SQLite) or a fleet (PostgreSQL) steps one test, and a restarted worker finds it where it was. A publish
(reload, recalibration, load, unload) ends the test; the next flush starts a new one against the new
calibration.

At most :data:`MAX_PENDING` queries per model and worker enter the test between two flushes; the
rest are answered (with their ``typicality``) but not tested. Which ones are tested depends on their
arrival alone, never on their scores, so the tested queries stay exchangeable when all are.
"""

from __future__ import annotations

import logging
import threading

import numpy as np
from prometheus_client.core import GaugeMetricFamily

from models.calibration.martingale import ShiftTest
from models.exceptions import InputError
from service.metrics import StateCollector
from service.repository import ModelRepository
from service.settings import ServiceSettings
from service.state import ServiceState, ShiftRecord, StateUnavailable
from service.store import Loaded
from service.sync import flush_every

log = logging.getLogger("lmve.service")

#: the most queries per model one worker feeds to the test between two flushes
MAX_PENDING = 4096
#: queries per step of the test (a step's cost grows with the square of its queries)
STEP_ROWS = 256
NO_STEP = ("the bundle has no typicality step (trained before it): retrain with lmve-train to get the shift "
           "alarm")


class ShiftAlarm:
    """Per model: the pending scores of this worker, and the shared test they step."""

    def __init__(self, state: ServiceState, settings: ServiceSettings):
        self.state, self.delta = state, settings.shift_delta
        self._lock = threading.Lock()
        #: model -> (bundle id, score arrays, their rows): what this worker answered since its last flush
        self._pending: dict[str, tuple[str, list[np.ndarray], int]] = {}
        self._rng = np.random.default_rng()
        self._failing = False

    # ------------------------------------------------------------------ the request path
    def observe(self, loaded: Loaded, scores: np.ndarray | None) -> None:
        """Queue ``scores`` (an answer's ``typicality_scores``; ``None``: a bundle without the step) for the
        test of ``loaded``'s bundle."""
        if scores is None or not len(scores):
            return
        with self._lock:
            version, parts, rows = self._pending.get(loaded.name, (loaded.version, [], 0))
            if version != loaded.version:  # the bundle changed: its scores are for another test
                version, parts, rows = loaded.version, [], 0
            room = MAX_PENDING - rows
            if room > 0:
                parts.append(scores[:room])
                self._pending[loaded.name] = (version, parts, rows + min(room, len(scores)))

    # ------------------------------------------------------------------ stepping the shared test
    def flush(self, repository: ModelRepository) -> None:
        """Step every model's test by this worker's pending scores (blocking: call it from a thread). Scores of a
        bundle no longer served are dropped; with the state unreachable they are dropped too (logged once per
        outage): the test then skips them, which depends on when they came, not on what they were."""
        with self._lock:
            pending, self._pending = self._pending, {}
        for name, (version, parts, _) in pending.items():
            store = repository.stores.get(name)
            loaded = None if store is None else store.current
            if loaded is None or loaded.version != version or loaded.model.typicality is None:
                continue
            scores = np.concatenate(parts)
            try:
                self.state.step_shift(name, version, lambda stored: self._step(loaded, stored, scores), self.delta)
            except StateUnavailable as exc:
                if not self._failing:
                    log.warning("shift alarm: the state is unreachable (%s); queries are not tested until it is back",
                                exc.reason)
                self._failing = True
                continue
            if self._failing:
                log.info("shift alarm: the state is back; testing queries again")
            self._failing = False

    def _step(self, loaded: Loaded, stored: dict | None, scores: np.ndarray) -> dict:
        """The test of ``loaded`` at ``stored`` (``None`` or another test's: a new one), stepped by ``scores``."""
        test = self._test(loaded)
        delta = self.delta
        if stored is not None:
            try:
                test.restore(stored)
                delta = float(stored.get("delta", delta))
            except (InputError, KeyError, TypeError, ValueError) as exc:
                log.error("model %s: the stored shift test cannot be read (%s); starting a new one", loaded.name, exc)
                test = self._test(loaded)
        test.delta = delta  # the level the test started with: a worker configured otherwise does not move it
        for start in range(0, len(scores), STEP_ROWS):
            test.update(scores[start:start + STEP_ROWS])
        return {**test.state(), "evidence": test.evidence, "delta": delta}

    def _test(self, loaded: Loaded) -> ShiftTest:
        with self._lock:
            seed = int(self._rng.integers(2**63))  # fresh smoothing for each step
        return loaded.model.typicality.shift_test(delta=self.delta, seed=seed)

    # ------------------------------------------------------------------ reading it
    def summary(self, loaded: Loaded) -> dict:
        """``{"evidence", "alarm", "queries", "delta", ...}`` of ``loaded``'s test (blocking: reads the state).
        ``available`` false for a bundle without the typicality step (``reason`` says so); ``queries`` 0
        and ``evidence`` 1 before the first flush of a new test."""
        from models.calibration.martingale import TOLERANCE

        if loaded.model.typicality is None:
            return {"available": False, "reason": NO_STEP, "evidence": None, "alarm": False, "queries": 0,
                    "delta": self.delta, "threshold": 1.0 / self.delta, "tolerance": TOLERANCE, "alarm_at": None,
                    "started_at": None}
        rec = self.state.shifts(loaded.name).get((loaded.name, loaded.version))
        return describe(rec, self.delta)

    async def run(self, repository: ModelRepository, interval: float) -> None:
        """Flush every ``interval`` seconds until cancelled (at shutdown); never fatal."""
        await flush_every(interval, self.flush, repository, "shift alarm")


def describe(rec: ShiftRecord | None, delta: float) -> dict:
    """The report of a stored test (``None``: none yet, a new test at ``delta``)."""
    from models.calibration.martingale import TOLERANCE

    if rec is None:
        return {"available": True, "evidence": 1.0, "alarm": False, "queries": 0, "delta": delta,
                "threshold": 1.0 / delta, "tolerance": TOLERANCE, "alarm_at": None, "started_at": None}
    return {"available": True, "evidence": rec.evidence, "alarm": rec.alarm_at is not None, "queries": rec.queries,
            "delta": rec.delta, "threshold": 1.0 / rec.delta, "tolerance": TOLERANCE, "alarm_at": rec.alarm_at,
            "started_at": rec.started_at}


class ShiftCollector(StateCollector):
    """Prometheus view of every loaded model's shift test (read from the shared state at each scrape, so any
    worker answers the same): its evidence, the alarm (1 once the evidence reached ``1 / delta``), that
    threshold and the queries tested, each labelled by model. ``source``: the :class:`ShiftAlarm`."""

    source: ShiftAlarm

    @staticmethod
    def families():
        labels = ["model"]
        return {
            "evidence": GaugeMetricFamily("lmve_shift_evidence", "The shift test's evidence against exchangeable "
                                          "queries (a betting martingale: 1 at the start; reaching 1/delta is the "
                                          "alarm)", labels=labels),
            "alarm": GaugeMetricFamily("lmve_shift_alarm", "1 once the shift test's evidence reached 1/delta for "
                                       "the served bundle (until a recalibration or reload), else 0", labels=labels),
            "threshold": GaugeMetricFamily("lmve_shift_threshold", "1/delta, the evidence at which the alarm "
                                           "sounds (LMVE_SHIFT_DELTA)", labels=labels),
            "queries": GaugeMetricFamily("lmve_shift_queries", "Queries tested since the served bundle's test "
                                         "started", labels=labels),
        }

    def collect(self):
        f = self.families()
        loaded_models = self.loaded(keep=lambda loaded: loaded.model.typicality is not None)
        try:
            records = self.source.state.shifts() if loaded_models else {}
        except StateUnavailable:
            return list(f.values())  # lmve_state_up says why
        for name, loaded in loaded_models.items():
            report = describe(records.get((name, loaded.version)), self.source.delta)
            f["evidence"].add_metric([name], report["evidence"])
            f["alarm"].add_metric([name], 1.0 if report["alarm"] else 0.0)
            f["threshold"].add_metric([name], report["threshold"])
            f["queries"].add_metric([name], report["queries"])
        return list(f.values())
