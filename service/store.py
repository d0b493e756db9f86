"""The served bundle: loaded and verified once, swapped atomically on reload.

Requests take ``store.current`` once and use that snapshot to the end, so a reload in the
middle of a request never mixes two bundles; a bad bundle never replaces a good one.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from models.bundle import load_bundle
from models.exceptions import BundleError
from models.model import RegionModel

log = logging.getLogger("lmve.service")


@dataclass(frozen=True)
class Loaded:
    model: RegionModel
    path: Path
    version: str
    loaded_at: float


class ModelStore:
    def __init__(self, path: Path | None = None):
        self.path = Path(path) if path is not None else None
        self.current: Loaded | None = None
        self.error: str | None = "no bundle configured (set LMVE_BUNDLE or --bundle)" if path is None else None
        self._lock = threading.Lock()

    @property
    def ready(self) -> bool:
        return self.current is not None

    def load_initial(self) -> None:
        """Load the configured bundle; on failure stay unready and remember why (never raise)."""
        if self.path is None:
            log.error("not ready: %s", self.error)
            return
        try:
            self.reload()
        except BundleError as exc:
            self.error = str(exc)
            log.error("not ready: bundle %s refused: %s", self.path, exc)

    def reload(self, path: Path | None = None) -> tuple[Loaded, Loaded | None]:
        """Verify and load ``path`` (default: the configured one), then swap. Raises BundleError."""
        with self._lock:
            target = Path(path) if path is not None else self.path
            if target is None:
                raise BundleError("no bundle path configured or given")
            model = load_bundle(target)  # verifies schema and every sha256 before anything is used
            new = Loaded(model=model, path=target, version=model.manifest.get("bundle_id", "unknown"),
                         loaded_at=time.time())
            previous, self.current = self.current, new  # one reference assignment: atomic for readers
            self.path, self.error = target, None
            log.info("serving bundle %s (version %s, primary method %s)", target, new.version,
                     model.primary_method)
            return new, previous
