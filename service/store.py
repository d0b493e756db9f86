"""One served model: its bundle loaded and verified once, swapped atomically on reload, unloaded on demand.

Requests take ``store.current`` once and use that snapshot to the end, so a reload in the
middle of a request never mixes two bundles; a bad bundle never replaces a good one.
A :class:`service.repository.ModelRepository` holds one store per model name.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from models.bundle import load_bundle
from models.exceptions import BundleError
from models.model import RegionModel

log = logging.getLogger("lmve.service")

#: a model's states, as ``GET /models`` reports them (Triton's and KServe's words)
READY, LOADING, UNAVAILABLE, UNLOADED = "READY", "LOADING", "UNAVAILABLE", "UNLOADED"


@dataclass(frozen=True)
class Loaded:
    model: RegionModel
    path: Path
    version: str
    loaded_at: float
    name: str = "default"


class ModelStore:
    """The bundle one model name serves.

    Parameters
    ----------
    path : the configured bundle directory (``None``: none configured; the store stays unready)
    name : the model's name (default: the directory's name)
    """

    def __init__(self, path: Path | None = None, name: str | None = None):
        self.path = Path(path) if path is not None else None
        self.configured = self.path
        self.name = name or (self.path.name if self.path is not None else "default")
        self.current: Loaded | None = None
        self.error: str | None = "no bundle configured (set LMVE_BUNDLE or LMVE_MODEL_REPOSITORY)" \
            if path is None else None
        self.unloaded_at: float | None = None
        #: the published bundle this worker could not load (``bundle_id``, ``path``, ``reason``); it
        #: keeps serving :attr:`current`. Set and cleared by :class:`service.sync.Follower`.
        self.refused_publish: dict | None = None
        self._lock = threading.Lock()

    @property
    def ready(self) -> bool:
        return self.current is not None

    @property
    def state(self) -> str:
        """``READY`` (a verified bundle serves), ``UNLOADED`` (an operator unloaded it), ``UNAVAILABLE``
        (its bundle was refused: :attr:`error` says why) or ``LOADING`` (not tried yet)."""
        if self.current is not None:
            return READY
        if self.unloaded_at is not None:
            return UNLOADED
        return LOADING if self.error is None else UNAVAILABLE

    @property
    def reason(self) -> str | None:
        """Why the model does not serve (``None`` when it does)."""
        state = self.state
        if state == READY:
            return None
        if state == UNLOADED:
            return "unloaded by an operator (POST /admin/models/{name}/load serves it again)".format(name=self.name)
        return self.error or "not loaded yet"

    def load_initial(self) -> None:
        """Load the configured bundle; on failure stay unready and remember why (never raise)."""
        if self.path is None:
            log.error("not ready: %s", self.error)
            return
        try:
            self.reload()
        except BundleError as exc:
            log.error("model %s not ready: bundle %s refused: %s", self.name, self.path, exc)

    def reload(self, path: Path | None = None, commit: Callable[[Loaded], None] | None = None,
               unless_serving: str | None = None) -> tuple[Loaded, Loaded | None]:
        """Verify and load ``path`` (default: the configured one), then swap. Raises BundleError
        (remembered as :attr:`error` while no bundle serves).

        ``commit(new)`` runs once the bundle is verified, before it serves (under the store's lock):
        whatever it raises propagates and nothing is swapped (the shared state's publish, so a bundle
        serves only once every worker can be told). With ``unless_serving`` (a bundle id), a store that
        already serves it returns at once (``previous`` is then the current bundle itself)."""
        with self._lock:
            if unless_serving is not None and self.current is not None and self.current.version == unless_serving:
                return self.current, self.current
            target = Path(path) if path is not None else self.path
            if target is None:
                raise BundleError("no bundle path configured or given")
            try:
                model = load_bundle(target)  # verifies schema and every sha256 before anything is used
                model.prepare()  # the search index and the compiled loops before the first request
            except BundleError as exc:
                if self.current is None:
                    self.error, self.unloaded_at = str(exc), None
                raise
            new = Loaded(model=model, path=target, version=model.manifest.get("bundle_id", "unknown"),
                         loaded_at=time.time(), name=self.name)
            if commit is not None:
                commit(new)
            previous, self.current = self.current, new  # one reference assignment: atomic for readers
            self.path, self.error, self.unloaded_at = target, None, None
            log.info("model %s: serving bundle %s (version %s, primary method %s)", self.name, target, new.version,
                     model.primary_method)
            return new, previous

    def unload(self) -> Loaded | None:
        """Stop serving (requests in flight finish on their snapshot); the previous bundle or ``None``."""
        with self._lock:
            previous, self.current = self.current, None
            self.unloaded_at = time.time()
            if previous is not None:
                log.info("model %s: unloaded (was %s)", self.name, previous.version)
            return previous
