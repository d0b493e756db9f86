"""The model repository: a directory of bundles, one model per subdirectory, each served by name.

Layout (as MLServer's and Triton's model repositories)::

    repo/
      repository.json        (optional) the manifest ``lmve-train --split-by`` writes: the models it
                             names must all be there (a listed model without its bundle is UNAVAILABLE)
      BUILDINGID=0/          a bundle: the model ``BUILDINGID=0``
      BUILDINGID=1/
      .recalibrated/         hidden directories (and ``*.recal-*`` ones) are never models

``LMVE_BUNDLE`` is a repository of one: its model is named after the bundle's directory. Each model
has its own :class:`~service.store.ModelStore` (loaded, reloaded and unloaded on its own); the
plain routes serve the *default* model: ``LMVE_DEFAULT_MODEL``, or the only one.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from models.bundle import MANIFEST, REPOSITORY_MANIFEST
from service.store import READY, UNLOADED, ModelStore

log = logging.getLogger("lmve.service")



class UnknownModelError(LookupError):
    """A model name the repository does not hold (HTTP 404)."""

    def __init__(self, name: str, known):
        self.name, self.known = name, sorted(known)
        listed = ", ".join(self.known) if self.known else "none"
        super().__init__(f"no model named {name!r} in the repository; the models are: {listed}")


def is_model_dir(path: Path) -> bool:
    """A subdirectory that can name a model: not hidden, not a recalibration's output."""
    return path.is_dir() and not path.name.startswith((".", "_")) and ".recal-" not in path.name


def read_repository_manifest(root: Path) -> dict:
    """``repository.json`` (``{}`` when absent or unreadable: the subdirectories still name the models)."""
    try:
        data = json.loads((root / REPOSITORY_MANIFEST).read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        log.error("%s unreadable, ignored: %s", root / REPOSITORY_MANIFEST, exc)
        return {}
    return data if isinstance(data, dict) else {}


class ModelRepository:
    """Every served model by name.

    Parameters
    ----------
    root : Path or None, default=None
        The repository directory (``LMVE_MODEL_REPOSITORY``): one model per subdirectory holding a bundle,
        and every model its ``repository.json`` lists. ``None``: ``bundle`` alone.
    bundle : Path or None, default=None
        A single bundle directory (``LMVE_BUNDLE``), served as a repository of one.
    default : str or None, default=None
        The model the plain routes serve (``LMVE_DEFAULT_MODEL``); ``None``: the only one.

    Raises
    ------
    ValueError
        Both ``root`` and ``bundle`` given.
    """

    def __init__(self, root: Path | None = None, *, bundle: Path | None = None, default: str | None = None):
        if root is not None and bundle is not None:
            raise ValueError("give a model repository or a bundle, not both")
        self.root = None if root is None else Path(root)
        self.default_name = default
        self.stores: dict[str, ModelStore] = {}
        self.error: str | None = None
        if self.root is None:
            store = ModelStore(bundle)
            self.stores[store.name] = store
        else:
            for name, path in self.discover().items():
                self.stores[name] = ModelStore(path, name)
        self._default = self._find_default()

    @classmethod
    def of(cls, *stores: ModelStore, default: str | None = None) -> ModelRepository:
        """A repository of stores built by the caller (tests, embedding).

        Parameters
        ----------
        *stores : ModelStore
            The stores, each under its name.
        default : str, default=None
            The default model's name; ``None``: the only one.

        Returns
        -------
        ModelRepository
        """
        repo = cls.__new__(cls)
        repo.root, repo.default_name, repo.error = None, default, None
        repo.stores = {s.name: s for s in stores}
        repo._default = repo._find_default()
        return repo

    # ------------------------------------------------------------------ discovery
    def discover(self) -> dict[str, Path]:
        """The models on disk.

        Returns
        -------
        dict of str -> Path
            ``name -> directory``: every subdirectory holding a bundle manifest, and every model
            ``repository.json`` lists (present or not: a missing one is UNAVAILABLE). Empty, with ``error`` set,
            when the root is not a directory.
        """
        root = self.root
        if root is None:
            return {name: s.configured for name, s in self.stores.items() if s.configured is not None}
        if not root.is_dir():
            self.error = f"model repository {root} is not a directory"
            log.error("not ready: %s", self.error)
            return {}
        if (root / MANIFEST).is_file():
            log.warning("model repository %s is itself a bundle: serving it as a repository of one (LMVE_BUNDLE "
                        "says so directly)", root)
            return {root.name: root}
        found = {p.name: p for p in sorted(root.iterdir()) if is_model_dir(p) and (p / MANIFEST).is_file()}
        for name in read_repository_manifest(root).get("models", {}):
            if isinstance(name, str) and name not in found and "/" not in name:
                found[name] = root / name
        return found

    def add(self, name: str) -> ModelStore:
        """The store of a model, created when its bundle appeared on disk since the start.

        Parameters
        ----------
        name : str
            The model.

        Returns
        -------
        ModelStore

        Raises
        ------
        UnknownModelError
            The repository has no such model, on disk or in its manifest.
        """
        store = self.stores.get(name)
        if store is not None:
            return store
        path = self.discover().get(name)
        if path is None:
            raise UnknownModelError(name, self.stores)
        store = ModelStore(path, name)
        self.stores = {**self.stores, name: store}  # a new dict: readers iterating the old one are safe
        self._default = self._find_default()
        return store

    # ------------------------------------------------------------------ lookup
    def get(self, name: str) -> ModelStore:
        """The store of a known model.

        Parameters
        ----------
        name : str
            The model.

        Returns
        -------
        ModelStore

        Raises
        ------
        UnknownModelError
            The repository has no such model.
        """
        store = self.stores.get(name)
        if store is None:
            raise UnknownModelError(name, self.stores)
        return store

    def _find_default(self) -> ModelStore | None:
        if self.default_name is not None:
            return self.stores.get(self.default_name)
        return next(iter(self.stores.values())) if len(self.stores) == 1 else None

    @property
    def default(self) -> ModelStore | None:
        """The model the plain routes serve: ``LMVE_DEFAULT_MODEL``, else the only one (``None``: several
        and none named, or the named one is not in the repository)."""
        return self._default

    def no_default_reason(self) -> str:
        """Why no model is the default, in words an operator can act on.

        Returns
        -------
        str
        """
        names = ", ".join(sorted(self.stores)) or "none"
        if self.default_name is not None:
            return (f"LMVE_DEFAULT_MODEL={self.default_name!r} is not in the repository (models: {names})")
        if not self.stores:
            return self.error or f"the model repository {self.root} holds no bundle"
        return (f"{len(self.stores)} models are served ({names}) and none is the default: name one in the path "
                "(/models/{name}/...) or the \"model\" field, or set LMVE_DEFAULT_MODEL")

    # ------------------------------------------------------------------ state
    def load_all(self) -> None:
        """Load every model (each failure is remembered by its store, never raised)."""
        for store in list(self.stores.values()):
            if store.current is None and store.unloaded_at is None:
                store.load_initial()

    def not_ready(self) -> dict[str, str]:
        """Every model that should serve and does not.

        Returns
        -------
        dict of str -> str
            ``name -> reason`` (an operator's unload is not a fault), plus the repository's own fault (no model,
            an unknown default) under ``""``.
        """
        out = {name: s.reason for name, s in self.stores.items() if s.state not in (READY, UNLOADED)}
        if not self.stores or (self.default_name is not None and self.default_name not in self.stores):
            out[""] = self.no_default_reason()
        return out

    @property
    def ready(self) -> bool:
        """Whether nothing is at fault and at least one model serves."""
        return not self.not_ready() and any(s.state == READY for s in self.stores.values())
