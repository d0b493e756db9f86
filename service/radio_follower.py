"""The radio watch: what each model's queries still hear, followed by the model every worker serves.

Off the request path, as the shift alarm (:mod:`service.shift`). A region route appends the query's rows (as
the model read them) and its device to its model's pending list (:meth:`RadioFollower.observe`: a lock and an append) and computes with
:meth:`RadioFollower.serving`'s model (a dictionary read). :meth:`RadioFollower.flush` (every
``LMVE_SYNC_INTERVAL_S`` on each worker) counts each model's pending rows into the shared watch
(:class:`models.radio.RadioWatch`) in one transaction of the state
(:meth:`service.state.ServiceState.step_radio`), so every worker of a host (SQLite) or a fleet (PostgreSQL)
steps one watch, and a restarted worker finds it where it was. The watch's decision (a
:class:`models.radio.RadioView`) is stored beside it; each worker, at its flush, builds the model under the
stored decision once (:meth:`models.model.RegionModel.adapted`: seconds for a large survey, in a child
process, :mod:`service.radio_builds`) and serves it from then on, so that every worker answers the same. A
worker without queries of its own still reads the stored decision at each flush.

``LMVE_RADIO``: ``adapt`` (the default) follows the decision, ``watch`` only reports it, ``off`` neither counts
nor reports. :meth:`RadioFollower.reset` forgets a model's watch: every worker serves the bundle as trained at its
next flush, until the evidence decides again. The watch is the model's, not its bundle's: a new bundle of the
same model (a reload, a recalibration, ``lmve-update``) keeps the traffic's counts and decides against its own
survey. Of a request, at most :data:`ROWS_PER_REQUEST` rows are counted (evenly spaced: the rows of one
request were read at about one place and time, and every row counted is work a flush does while requests
wait for the interpreter); at most :data:`MAX_PENDING` rows per model and worker between two flushes (which
ones depends on their arrival alone). The watch's figures are in counted rows.
"""

from __future__ import annotations

import dataclasses
import logging
import threading

import numpy as np

from models.exceptions import InputError
from models.radio import ALL, RadioTally, RadioView, RadioWatch
from models.radio_map import GUARANTEE
from service.radio_builds import RadioBuilder
from service.repository import ModelRepository
from service.settings import ServiceSettings
from service.state import RadioRecord, ServiceState, StateUnavailable
from service.store import Loaded
from service.sync import flush_every

log = logging.getLogger("lmve.service")

#: the most rows per model one worker counts between two flushes
MAX_PENDING = 4096
#: the most rows of one request counted (evenly spaced)
ROWS_PER_REQUEST = 16
#: the transmitters a report names at most
NAMED = 20
NO_MAP = ("the bundle keeps no radio map (trained before it, or without RSSI readings): retrain with lmve-train to "
          "follow the radio")


def view_of(record: RadioRecord | None) -> RadioView:
    """The decision a stored record holds (none: the survey's radio)."""
    if record is None:
        return RadioView()
    v = record.view
    return RadioView(gone=tuple(int(j) for j in v.get("gone", ())), new=tuple(int(j) for j in v.get("new", ())),
                     offsets={str(k): float(x) for k, x in (v.get("offsets_db") or {}).items()})


class RadioFollower:
    """Per model: this worker's pending rows, the shared watch they step, and the model it serves under the
    watch's decision."""

    def __init__(self, state: ServiceState, settings: ServiceSettings):
        self.state, self.mode = state, settings.radio
        self.builder = RadioBuilder(settings.radio_build)
        self._lock = threading.Lock()
        #: model -> (bundle id, [(rows, device)], rows): what this worker answered since its last flush
        self._pending: dict[str, tuple[str, list, int]] = {}
        #: model -> (bundle id, the decision's key, the Loaded served under it)
        self._serving: dict[str, tuple[str, tuple, Loaded]] = {}
        self._failing = False

    # ------------------------------------------------------------------ the request path
    def serving(self, loaded: Loaded) -> Loaded:
        """The snapshot to compute with: ``loaded``'s model under the followed decision, once built for this
        bundle; ``loaded`` itself otherwise."""
        got = self._serving.get(loaded.name)
        return got[2] if got is not None and got[0] == loaded.version else loaded

    def observe(self, loaded: Loaded, readings: np.ndarray | None, device: str | None = None) -> None:
        """Queue a query's rows of ``device`` for ``loaded``'s model's watch: ``readings``, the answer's rows as
        read (:attr:`models.model.Answer.readings`: the model converted them once; ``None`` without the readings
        step, which keeps no radio map)."""
        if self.mode == "off" or readings is None or not len(readings) or loaded.model.radio_baseline is None:
            return
        if len(readings) > ROWS_PER_REQUEST:  # a copy of those rows: the request's array is not kept to the flush
            readings = readings[::-(-len(readings) // ROWS_PER_REQUEST)].copy()
        with self._lock:
            version, parts, rows = self._pending.get(loaded.name, (loaded.version, [], 0))
            if version != loaded.version:
                version, parts, rows = loaded.version, [], 0
            room = MAX_PENDING - rows
            if room > 0:
                parts.append((readings[:room], device))
                self._pending[loaded.name] = (version, parts, rows + min(room, len(readings)))

    # ------------------------------------------------------------------ stepping and following
    def flush(self, repository: ModelRepository, follow: bool = True) -> None:
        """Count every model's pending rows into its shared watch, then (``follow``) serve each model under its
        stored decision (blocking: call it from a thread; a request that reports, ``GET /model``, counts
        without following, which may take seconds). With the state unreachable the rows are dropped (logged
        once per outage) and each worker keeps serving what it served."""
        if self.mode == "off":
            return
        with self._lock:
            pending, self._pending = self._pending, {}
        for name, store in list(repository.stores.items()):
            loaded = store.current
            if loaded is None or loaded.model.radio_baseline is None:
                continue
            queued = pending.get(name)
            try:
                if queued is not None and queued[0] == loaded.version:
                    # the rows counted here, in a few array operations, before the transaction: a step of
                    # the shared watch is then a merge of plain values
                    tally = RadioWatch(loaded.model.radio_baseline).tally(queued[1])
                    record = self.state.step_radio(name, lambda stored: self._step(loaded, stored, tally))
                elif follow:
                    record = self.state.radio(name)
                else:
                    continue
            except StateUnavailable as exc:
                if not self._failing:
                    log.warning("radio watch: the state is unreachable (%s); queries are not counted until it is "
                                "back", exc.reason)
                self._failing = True
                continue
            if self._failing:
                log.info("radio watch: the state is back; counting queries again")
            self._failing = False
            if follow:
                self.follow(loaded, record)

    def _step(self, loaded: Loaded, stored: dict | None, tally: RadioTally) -> tuple[dict, dict]:
        watch = RadioWatch(loaded.model.radio_baseline)
        if stored is not None:
            try:
                watch.restore(stored)
            except (InputError, KeyError, TypeError, ValueError) as exc:
                log.error("model %s: the stored radio watch cannot be read (%s); starting a new one", loaded.name, exc)
                watch.reset()
        watch.add(tally)
        return watch.state(), watch.view().to_dict()

    def follow(self, loaded: Loaded, record: RadioRecord | None) -> Loaded:
        """Serve ``loaded``'s model under ``record``'s decision (built once per decision and bundle; ``watch``
        mode: as trained); the snapshot now served."""
        view = view_of(record) if self.mode == "adapt" else RadioView()
        key = view.key()
        got = self._serving.get(loaded.name)
        if got is not None and got[0] == loaded.version and got[1] == key:
            return got[2]
        last = got[2].model if got is not None and got[0] == loaded.version else None
        try:
            model = self.builder.build(loaded.model, view, loaded.path, loaded.version, last)
        except InputError as exc:
            log.error("model %s: the radio's decision cannot be followed (%s); serving the bundle as trained",
                      loaded.name, exc)
            model, key = loaded.model, RadioView().key()
        served = dataclasses.replace(loaded, model=model) if model is not loaded.model else loaded
        self._serving[loaded.name] = (loaded.version, key, served)
        if not view.empty:
            log.info("model %s: following the radio: %s", loaded.name, words(view, loaded.model))
        return served

    def reset(self, name: str) -> bool:
        """Forget model ``name``'s watch (every worker serves it as trained at its next flush); whether there
        was one. Raises :class:`StateUnavailable`."""
        with self._lock:
            self._pending.pop(name, None)
        existed = self.state.reset_radio(name)
        self._serving.pop(name, None)
        return existed

    def close(self) -> None:
        """At shutdown: build nothing more, and stop a build in progress (:meth:`RadioBuilder.close`)."""
        self.builder.close()

    async def run(self, repository: ModelRepository, interval: float) -> None:
        """Flush every ``interval`` seconds until cancelled (at shutdown); never fatal."""
        await flush_every(interval, self.flush, repository, "radio watch")

    # ------------------------------------------------------------------ reading it
    def summary(self, loaded: Loaded) -> dict:
        """The watch of ``loaded``'s model for ``GET /model`` (blocking: reads the state)."""
        model = loaded.model
        base = model.radio_baseline
        if self.mode == "off" or base is None:
            return {"available": False, "mode": self.mode, "reason": "LMVE_RADIO=off" if base is not None else NO_MAP}
        record = self.state.radio(loaded.name)
        view = view_of(record)
        got = self._serving.get(loaded.name)
        following = got is not None and got[0] == loaded.version and got[1] == view.key()
        names = model.feature_names
        return {"available": True, "mode": self.mode, "queries_counted": 0 if record is None else record.seen,
                "started_at": None if record is None else record.started_at,
                "updated_at": None if record is None else record.at,
                "surveyed": int(base.surveyed.sum()), "gone": len(view.gone), "new": len(view.new),
                "gone_names": [names[j] for j in view.gone[:NAMED]], "new_names": [names[j] for j in view.new[:NAMED]],
                "offsets_db": {k: round(v, 2) for k, v in view.offsets.items()},
                "followed": self.mode == "adapt" and following, "drift": words(view, model),
                "guarantee": GUARANTEE}


def words(view: RadioView, model) -> str:
    """The decision in one sentence a site manager reads."""
    if view.empty:
        return "the radio is as surveyed (or not enough queries yet to say otherwise)"
    base = model.radio_baseline
    parts = []
    if view.gone:
        parts.append(f"{len(view.gone)} of the survey's {int(base.surveyed.sum())} transmitters no longer heard")
    if view.new:
        parts.append(f"{len(view.new)} new transmitter{'s' if len(view.new) > 1 else ''} heard (ignored: the survey "
                     "cannot place them)")
    off = view.offsets.get(ALL, 0.0)
    if off:
        parts.append(f"readings {off:+.1f} dB off the survey's (taken off)")
    devices = [k for k, v in view.offsets.items() if k != ALL and v]
    if devices:
        parts.append(f"{len(devices)} device{'s' if len(devices) > 1 else ''} with an offset of {'their' if len(devices) > 1 else 'its'} own")
    return "the radio changed since the survey: " + "; ".join(parts)
