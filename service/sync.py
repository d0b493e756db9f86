"""Keep every worker on the published bundle.

A reload or a recalibration is taken by one worker; it publishes the new bundle in the shared
state (:meth:`service.state.ServiceState.publish`). Every worker runs :func:`follow` in its
lifespan: each ``sync_interval_s`` it reads the published record and, when it names another
bundle than the one it serves, verifies and loads it (a bundle that fails verification is
remembered and not retried until another is published; the worker keeps serving its own).
At start a worker adopts the published bundle when it was derived from the same configured
bundle (a recalibration survives a restart); a changed ``LMVE_BUNDLE`` wins and is published.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import anyio

from models.exceptions import BundleError
from service.metrics import Metrics
from service.monitor import Monitor
from service.state import ServiceState
from service.store import Loaded, ModelStore

log = logging.getLogger("lmve.service")


class Follower:
    def __init__(self, store: ModelStore, state: ServiceState, monitor: Monitor, metrics: Metrics,
                 configured: Path | None):
        self.store, self.state, self.monitor, self.metrics = store, state, monitor, metrics
        self.configured = None if configured is None else str(configured)
        self._refused: tuple[str, str] | None = None

    def publish(self) -> None:
        """Record the bundle this worker now serves as the one every worker serves."""
        cur = self.store.current
        if cur is not None:
            self.state.publish(cur.path, cur.version, configured=self.configured)

    def swap(self, path: Path | None = None, publish: bool = True) -> tuple[Loaded, Loaded | None]:
        """Verify and load ``path`` (default: the configured bundle), count the reload and, with
        ``publish``, make every worker follow. A refused bundle is counted and its ``BundleError``
        raised; the previous bundle keeps serving. Blocking: call it from a thread."""
        try:
            new, previous = self.store.reload(path)
        except BundleError:
            self.metrics.reloads.labels("refused").inc()
            raise
        self.metrics.reloads.labels("ok").inc()
        self.metrics.set_model(new)
        if publish:
            self.publish()
        return new, previous

    def start(self) -> None:
        """At start-up (after the configured bundle was loaded or refused)."""
        rec = self.state.served()
        cur = self.store.current
        if rec is not None and rec.configured == self.configured and Path(rec.path).is_dir() \
                and (cur is None or rec.bundle_id != cur.version):
            self._adopt(rec.path, rec.bundle_id)
        elif cur is not None and (rec is None or rec.bundle_id != cur.version):
            self.publish()
        self.monitor.refresh(self.store.current)

    def tick(self) -> None:
        """One poll: adopt a newly published bundle; refresh the adaptive levels."""
        rec = self.state.served()
        cur = self.store.current
        if rec is not None and (cur is None or rec.bundle_id != cur.version) \
                and self._refused != (rec.path, rec.bundle_id):
            self._adopt(rec.path, rec.bundle_id)
        self.monitor.refresh(self.store.current)

    def _adopt(self, path: str, bundle_id: str) -> None:
        try:
            self.swap(Path(path), publish=False)
        except BundleError as exc:
            self._refused = (path, bundle_id)
            log.error("published bundle %s (%s) refused, still serving the previous one: %s", path, bundle_id, exc)

    async def follow(self, interval: float) -> None:
        """Poll forever (cancelled at shutdown); errors are logged, never fatal."""
        while True:
            await asyncio.sleep(interval)
            try:
                await anyio.to_thread.run_sync(self.tick)
            except Exception:  # pragma: no cover - a locked or vanished state file: try again next tick
                log.exception("state sync failed; retrying in %.1f s", interval)
