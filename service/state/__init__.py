"""The service's durable state, behind one interface with two backends.

It holds what must outlive a request, a worker and a restart, and what every worker (of a host with
SQLite, of a fleet with PostgreSQL) must agree on:

* ``model_served``: per model, the bundle every worker should serve (path and id) or that it is
  unloaded. ``/admin/reload``, ``/admin/recalibrate`` and the per-model load and unload publish
  here; each worker follows (:mod:`service.sync`).
* ``feedback``: the recent labelled rows, per model and method (:meth:`ServiceState.record_feedback`).
* ``model_counters``: running totals per model and method, exported as Prometheus counters by every
  worker, so a scrape of any worker sees the totals of all.
* ``model_adaptive``: the online rule's state per model, bundle and method.
* ``model_shift``: the shift alarm's test per model and bundle (:mod:`service.shift`); a publish ends it.
* ``schema_version``: the migrations applied (:mod:`service.state.migrations`).

:func:`open_state` picks the backend from ``LMVE_STATE_URL``: ``sqlite:///relative/path``,
``sqlite:////absolute/path`` (SQLAlchemy's spelling), ``sqlite://`` (memory: one worker, lost on
restart) or ``postgresql://user@host/db``.
"""

from __future__ import annotations

from service.state.base import (ANY, COUNTERS, AdaptStep, MethodFeedback, PublishConflict, RadioRecord, RadioStep,
                                Served, ServiceState, ShiftRecord, ShiftStep, StateUnavailable, WindowStats)
from service.state.sqlite import SQLiteState

__all__ = ["ANY", "COUNTERS", "AdaptStep", "MethodFeedback", "PublishConflict", "RadioRecord", "RadioStep", "Served",
           "ServiceState", "ShiftRecord",
           "ShiftStep", "SQLiteState", "StateUnavailable", "WindowStats", "open_state", "sqlite_path"]


def sqlite_path(url: str):
    """The file of a ``sqlite://`` URL (``None``: memory); ``None`` for any other scheme is an error."""
    from pathlib import Path

    if not url.startswith("sqlite://"):
        raise ValueError(f"not a sqlite:// URL: {url!r}")
    rest = url[len("sqlite://"):]
    if rest in ("", "/", "/:memory:"):
        return None
    if not rest.startswith("/"):
        raise ValueError(f"a SQLite state URL is sqlite:///relative/path or sqlite:////absolute/path; got {url!r}")
    return Path(rest[1:])


def open_state(url: str | None, keep: int = 10_000) -> ServiceState:
    """The state at ``url`` (``None``: SQLite in memory)."""
    if url is None or url.startswith("sqlite:"):
        return SQLiteState(None if url is None else sqlite_path(url), keep=keep)
    if url.startswith(("postgresql://", "postgres://")):
        from service.state.postgres import PostgresState

        return PostgresState(url, keep=keep)
    raise ValueError(f"LMVE_STATE_URL must start with sqlite:// or postgresql://; got {url.split('://')[0]!r}")
