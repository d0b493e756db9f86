"""Keep every worker on the published state of every model.

A load, an unload, a reload or a recalibration is taken by one worker; it publishes the model's
new record in the shared state (:meth:`service.state.ServiceState.publish`). Every worker runs
:meth:`Follower.follow` in its lifespan: each ``sync_interval_s`` it reads the published records
and, for each model whose record names another bundle than the one it serves, verifies and loads
it, or unloads the model the record says is unloaded, or adds a model another worker loaded from
the repository since the start. A bundle that fails verification is remembered (``GET /models``
says which and why) and not retried until another is published (the worker keeps serving its own). At start a worker adopts a model's
published bundle when it was derived from the same configured bundle (a recalibration survives a
restart), and keeps a model an operator unloaded unloaded; a changed configured bundle wins and is
published.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import anyio

from models.exceptions import BundleError
from service.metrics import Metrics
from service.monitor import Monitor
from service.repository import ModelRepository
from service.state import ANY, ServiceState, StateUnavailable
from service.store import Loaded, ModelStore

log = logging.getLogger("lmve.service")


async def flush_every(interval: float, flush, repository: ModelRepository, what: str) -> None:
    """``flush(repository)`` in a thread every ``interval`` seconds until cancelled (at shutdown); never fatal
    (``what`` names it in the log)."""
    while True:
        await asyncio.sleep(interval)
        try:
            await anyio.to_thread.run_sync(flush, repository)
        except Exception:  # pragma: no cover - a bug: log it, keep going
            log.exception("%s: flush failed; retrying in %.1f s", what, interval)


class Follower:
    def __init__(self, repository: ModelRepository, state: ServiceState, monitor: Monitor, metrics: Metrics):
        self.repository, self.state, self.monitor, self.metrics = repository, state, monitor, metrics

    # ------------------------------------------------------------------ one model's changes
    def publish(self, store: ModelStore) -> None:
        """Record what ``store`` now serves (or that it is unloaded) as what every worker serves."""
        configured = None if store.configured is None else str(store.configured)
        cur = store.current
        if cur is not None:
            self.state.publish(store.name, cur.path, cur.version, configured=configured)
        elif store.unloaded_at is not None:
            self.state.publish(store.name, configured=configured, loaded=False)

    def swap(self, name: str | None = None, path: Path | None = None, publish: bool = True, expect=ANY,
             unless_serving: str | None = None) -> tuple[Loaded, Loaded | None]:
        """Verify and load ``path`` (default: the model's configured bundle) for model ``name`` (default:
        the default model; a model new on disk is added), count it and, with ``publish``, make every
        worker follow: it is published before it serves here, so a publish that fails (the state
        unreachable: :class:`~service.state.StateUnavailable`; ``expect`` given and another bundle
        published: :class:`~service.state.PublishConflict`) leaves the previous bundle serving
        everywhere. A refused bundle is counted and its ``BundleError`` raised; the previous bundle
        keeps serving. ``unless_serving``: see :meth:`ModelStore.reload`. Raises
        :class:`~service.repository.UnknownModelError`. Blocking: call it from a thread."""
        store = self._store(name)
        configured = None if store.configured is None else str(store.configured)

        def commit(new: Loaded) -> None:
            self.state.publish(store.name, new.path, new.version, configured=configured, expect=expect)

        try:
            new, previous = store.reload(path, commit=commit if publish else None, unless_serving=unless_serving)
        except BundleError:
            self.metrics.reloads.labels(store.name, "refused").inc()
            if store.current is None:
                self.metrics.set_model(store.name, None)
            raise
        store.refused_publish = None
        if new is previous:
            return new, previous
        self.metrics.reloads.labels(store.name, "ok").inc()
        self.metrics.set_model(store.name, new)
        self.monitor.refresh(new)
        return new, previous

    def unload(self, name: str, publish: bool = True) -> Loaded | None:
        """Stop serving model ``name`` (every worker follows with ``publish``); the bundle it served."""
        store = self.repository.get(name)
        previous = store.unload()
        self.metrics.set_model(name, None, unloaded=True)
        self.monitor.forget(name)
        if publish:
            self.publish(store)
        return previous

    def _store(self, name: str | None) -> ModelStore:
        if name is None:
            store = self.repository.default
            if store is None:
                raise BundleError(self.repository.no_default_reason())
            return store
        return self.repository.add(name)

    # ------------------------------------------------------------------ start and follow
    def start(self) -> None:
        """At start-up (after the configured bundles were loaded or refused). With the state unreachable,
        the configured bundles serve and the first tick after it is back catches up."""
        try:
            self._start()
        except StateUnavailable as exc:
            log.warning("state unreachable at start (%s): serving the configured bundles", exc.reason)
            for name, store in self.repository.stores.items():
                self.metrics.set_model(name, store.current, unloaded=store.unloaded_at is not None)

    def _start(self) -> None:
        if len(self.repository.stores) == 1:
            (store,) = self.repository.stores.values()
            self.state.claim_legacy(store.name, store.configured)  # a state file from before the repository
        records = self.state.served_all()
        for name, store in list(self.repository.stores.items()):
            rec = records.get(name)
            configured = None if store.configured is None else str(store.configured)
            if rec is not None and rec.configured == configured and not rec.loaded:
                log.warning("model %s stays unloaded, as an operator left it (POST /admin/models/%s/load serves it)",
                            name, name)
                self.unload(name, publish=False)
            elif rec is not None and rec.configured == configured and rec.path and Path(rec.path).is_dir() \
                    and (store.current is None or rec.bundle_id != store.current.version):
                self._adopt(store, rec.path, rec.bundle_id)
            elif store.current is not None and (rec is None or rec.bundle_id != store.current.version):
                self.publish(store)
            self.metrics.set_model(name, store.current, unloaded=store.unloaded_at is not None)
            self.monitor.refresh(store.current)

    def tick(self) -> None:
        """One poll: follow every model's published record; refresh the adaptive levels."""
        for name, rec in self.state.served_all().items():
            self._follow(name, rec)

    def catch_up(self, name: str) -> None:
        """Follow model ``name``'s published record now (after a publish lost to another worker's)."""
        rec = self.state.served(name)
        if rec is not None:
            self._follow(name, rec)

    def _follow(self, name: str, rec) -> None:
        store = self.repository.stores.get(name)
        if store is None:
            if not rec.loaded:
                return
            try:
                store = self.repository.add(name)  # another worker loaded a model new on disk
            except LookupError:
                return
        cur = store.current
        if not rec.loaded:
            if cur is not None or store.unloaded_at is None:
                self.unload(name, publish=False)
            return
        refused = store.refused_publish
        if rec.path and (cur is None or rec.bundle_id != cur.version) \
                and (refused is None or (refused["path"], refused["bundle_id"]) != (rec.path, rec.bundle_id)):
            self._adopt(store, rec.path, rec.bundle_id)
        self.monitor.refresh(store.current)

    def _adopt(self, store: ModelStore, path: str, bundle_id: str | None) -> None:
        try:
            self.swap(store.name, Path(path), publish=False, unless_serving=bundle_id)
        except BundleError as exc:
            store.refused_publish = {"bundle_id": bundle_id, "path": path, "reason": str(exc)}
            log.error("model %s: published bundle %s (%s) refused, still serving the previous one: %s", store.name,
                      path, bundle_id, exc)

    async def follow(self, interval: float) -> None:
        """Follow forever (cancelled at shutdown): on each notification of a publish (a backend that sends
        them: PostgreSQL) and at least every ``interval`` seconds. Errors are logged once per outage, never
        fatal."""
        loop, wake = asyncio.get_running_loop(), asyncio.Event()
        self.state.on_change(lambda: loop.call_soon_threadsafe(wake.set))
        failing = False
        while True:
            try:
                await asyncio.wait_for(wake.wait(), interval)
            except asyncio.TimeoutError:
                pass
            wake.clear()
            try:
                await anyio.to_thread.run_sync(self.tick)
            except StateUnavailable as exc:
                if not failing:
                    log.warning("state sync failed (%s); still serving the loaded bundles, retrying every %.1f s",
                                exc.reason, interval)
                failing = True
                continue
            except Exception:  # pragma: no cover - a bug: log it, keep following
                log.exception("state sync failed; retrying in %.1f s", interval)
                continue
            if failing:
                log.info("state sync back")
            failing = False
