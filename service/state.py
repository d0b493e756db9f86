"""The service's durable state in one SQLite file (WAL mode), shared by every worker of a host.

It holds what must outlive a request, a worker and a restart:

* ``served``: the bundle every worker should serve (path and id). ``/admin/reload`` and
  ``/admin/recalibrate`` publish here; each worker polls it and swaps within a sync interval.
* ``feedback``: the recent labelled rows, per method: inside the region at the bundle's level,
  the conformal p-value, the level actually served and whether that region held the point.
* ``counters``: running totals per method (rows, inside, p-value sum), exported as Prometheus
  counters by every worker, so a scrape of any worker sees the host's totals.
* ``adaptive``: the online rule's state per bundle and method (ACI's ``alpha_t``; quantile
  tracking's threshold ``q_t`` and score scale).

With no path (``LMVE_STATE_DB`` unset) the state lives in memory: one worker, lost on restart.
Every write runs in one ``BEGIN IMMEDIATE`` transaction, so two workers never interleave a
read-modify-write of the adaptive state.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

SCHEMA = """
CREATE TABLE IF NOT EXISTS served (
  id INTEGER PRIMARY KEY CHECK (id = 1), path TEXT NOT NULL, bundle_id TEXT NOT NULL, configured TEXT,
  generation INTEGER NOT NULL, at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS feedback (
  id INTEGER PRIMARY KEY AUTOINCREMENT, at REAL NOT NULL, bundle_id TEXT NOT NULL, method TEXT NOT NULL,
  inside INTEGER NOT NULL, p_value REAL NOT NULL, level REAL NOT NULL, inside_served INTEGER NOT NULL,
  site TEXT, device TEXT);
CREATE INDEX IF NOT EXISTS feedback_recent ON feedback (bundle_id, method, id);
CREATE TABLE IF NOT EXISTS counters (
  method TEXT NOT NULL, name TEXT NOT NULL, value REAL NOT NULL, PRIMARY KEY (method, name));
CREATE TABLE IF NOT EXISTS adaptive (
  bundle_id TEXT NOT NULL, method TEXT NOT NULL, alpha REAL NOT NULL, scale REAL, n INTEGER NOT NULL,
  at REAL NOT NULL, PRIMARY KEY (bundle_id, method));
"""

COUNTERS = ("rows", "inside", "p_value_sum", "inside_served")


@dataclass(frozen=True)
class Served:
    path: str
    bundle_id: str
    configured: str | None
    generation: int


@dataclass(frozen=True)
class MethodFeedback:
    """One method's verdict on a batch of labelled rows."""

    inside: np.ndarray         # (k,) bool: inside the region at the bundle's level
    p_value: np.ndarray        # (k,)
    scores: np.ndarray         # (k,) conformity scores (for the adaptive update)


@dataclass(frozen=True)
class WindowStats:
    rows: int
    coverage: float | None        # inside at the bundle's level, over the window
    p_value_mean: float | None
    served_coverage: float | None  # inside the region actually served (the adaptive level when on)


#: ``(method, stored (value, scale) or None, scores (k,)) -> (new (value, scale), levels served (k,), inside served (k,))``
AdaptStep = Callable[[str, "tuple | None", np.ndarray], "tuple[tuple, np.ndarray, np.ndarray]"]


class ServiceState:
    def __init__(self, path: Path | str | None = None, keep: int = 10_000):
        self.path = None if path is None else Path(path)
        self.keep = keep
        self._lock = threading.Lock()
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(":memory:" if self.path is None else str(self.path), timeout=30.0,
                                   isolation_level=None, check_same_thread=False)
        with self._lock:
            if self.path is not None:
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute("PRAGMA busy_timeout=30000")
            self._db.executescript(SCHEMA)

    @property
    def shared(self) -> bool:
        """Whether other processes can see this state (a file, not memory)."""
        return self.path is not None

    def close(self) -> None:
        with self._lock:
            self._db.close()

    @contextmanager
    def _write(self):
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def _read(self, sql: str, args=()) -> list[tuple]:
        with self._lock:
            return self._db.execute(sql, args).fetchall()

    # ------------------------------------------------------------------ the served bundle
    def publish(self, path, bundle_id: str, configured=None) -> int:
        """Record ``path`` (id ``bundle_id``) as the bundle every worker serves; the new generation."""
        with self._write() as db:
            row = db.execute("SELECT generation FROM served WHERE id = 1").fetchone()
            generation = (row[0] if row else 0) + 1
            db.execute("INSERT OR REPLACE INTO served (id, path, bundle_id, configured, generation, at) "
                       "VALUES (1, ?, ?, ?, ?, ?)", (str(path), bundle_id, None if configured is None else str(configured),
                                                     generation, time.time()))
        return generation

    def served(self) -> Served | None:
        rows = self._read("SELECT path, bundle_id, configured, generation FROM served WHERE id = 1")
        return Served(*rows[0]) if rows else None

    # ------------------------------------------------------------------ feedback
    def record_feedback(self, bundle_id: str, batch: dict[str, MethodFeedback], *, site: str | None = None,
                        device: str | None = None, adapt: AdaptStep | None = None,
                        target: float = 0.9) -> dict[str, np.ndarray]:
        """Store a batch of labelled rows' verdicts for every method, update the counters and (with
        ``adapt``) the adaptive state, in one transaction. Returns ``method -> inside served (k,)``."""
        now = time.time()
        served_inside = {}
        with self._write() as db:
            for method, fb in batch.items():
                k = int(fb.inside.shape[0])
                if adapt is not None:
                    row = db.execute("SELECT alpha, scale FROM adaptive WHERE bundle_id = ? AND method = ?",
                                     (bundle_id, method)).fetchone()
                    (value, scale), levels, inside_served = adapt(method, None if row is None else tuple(row), fb.scores)
                    db.execute("INSERT OR REPLACE INTO adaptive (bundle_id, method, alpha, scale, n, at) VALUES "
                               "(?, ?, ?, ?, COALESCE((SELECT n FROM adaptive WHERE bundle_id = ? AND method = ?), 0) "
                               "+ ?, ?)", (bundle_id, method, float(value), None if scale is None else float(scale),
                                           bundle_id, method, k, now))
                else:
                    levels, inside_served = np.full(k, target), fb.inside
                db.executemany(
                    "INSERT INTO feedback (at, bundle_id, method, inside, p_value, level, inside_served, site, device) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [(now, bundle_id, method, int(i), float(p), float(lv), int(s), site, device)
                     for i, p, lv, s in zip(fb.inside, fb.p_value, levels, inside_served)])
                for name, value in (("rows", k), ("inside", int(np.sum(fb.inside))),
                                    ("p_value_sum", float(np.sum(fb.p_value))),
                                    ("inside_served", int(np.sum(inside_served)))):
                    db.execute("INSERT INTO counters (method, name, value) VALUES (?, ?, ?) "
                               "ON CONFLICT (method, name) DO UPDATE SET value = value + excluded.value",
                               (method, name, value))
                db.execute("DELETE FROM feedback WHERE bundle_id = ? AND method = ? AND id <= "
                           "(SELECT id FROM feedback WHERE bundle_id = ? AND method = ? ORDER BY id DESC "
                           "LIMIT 1 OFFSET ?)", (bundle_id, method, bundle_id, method, self.keep))
                served_inside[method] = np.asarray(inside_served, dtype=bool)
        return served_inside

    def window(self, bundle_id: str, size: int) -> dict[str, WindowStats]:
        """Observed coverage over the last ``size`` labelled rows of ``bundle_id``, per method."""
        out = {}
        for (method,) in self._read("SELECT DISTINCT method FROM feedback WHERE bundle_id = ?", (bundle_id,)):
            rows = self._read("SELECT COUNT(*), AVG(inside), AVG(p_value), AVG(inside_served) FROM (SELECT inside, "
                              "p_value, inside_served FROM feedback WHERE bundle_id = ? AND method = ? "
                              "ORDER BY id DESC LIMIT ?)", (bundle_id, method, size))
            n, cov, p, served = rows[0]
            out[method] = WindowStats(int(n), cov, p, served)
        return out

    def counters(self) -> dict[str, dict[str, float]]:
        """``method -> {rows, inside, p_value_sum, inside_served}``: running totals on this host."""
        out: dict[str, dict[str, float]] = {}
        for method, name, value in self._read("SELECT method, name, value FROM counters"):
            out.setdefault(method, dict.fromkeys(COUNTERS, 0.0))[name] = value
        return out

    def adaptive_state(self, bundle_id: str) -> dict[str, tuple]:
        """The online rule's ``(value, scale)`` per method of ``bundle_id`` (none before the first feedback)."""
        return {m: (a, sc) for m, a, sc in self._read("SELECT method, alpha, scale FROM adaptive WHERE bundle_id = ?",
                                                     (bundle_id,))}
