"""The service's durable state in one SQLite file (WAL mode), shared by every worker of a host.

It holds what must outlive a request, a worker and a restart:

* ``model_served``: per model, the bundle every worker should serve (path and id) or that it is
  unloaded. ``/admin/reload``, ``/admin/recalibrate`` and the per-model load and unload publish
  here; each worker polls it and follows within a sync interval.
* ``feedback``: the recent labelled rows, per model and method: inside the region at the bundle's
  level, the conformal p-value, the level actually served, whether that region held the point, and
  the point itself (JSON; what ``GET /viewer`` draws).
* ``model_counters``: running totals per model and method (rows, inside, p-value sum), exported as
  Prometheus counters by every worker, so a scrape of any worker sees the host's totals.
* ``model_adaptive``: the online rule's state per model, bundle and method (ACI's ``alpha_t``;
  quantile tracking's threshold ``q_t`` and score scale).

A state file written before the model repository (tables ``served``, ``counters``, ``adaptive``, and
``feedback`` without a model) is migrated at start to the model it served
(:meth:`ServiceState.claim_legacy`).

With no path (``LMVE_STATE_DB`` unset) the state lives in memory: one worker, lost on restart.
Every write runs in one ``BEGIN IMMEDIATE`` transaction, so two workers never interleave a
read-modify-write of the adaptive state.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

SCHEMA = """
CREATE TABLE IF NOT EXISTS model_served (
  model TEXT PRIMARY KEY, path TEXT, bundle_id TEXT, configured TEXT, loaded INTEGER NOT NULL,
  generation INTEGER NOT NULL, at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS feedback (
  id INTEGER PRIMARY KEY AUTOINCREMENT, at REAL NOT NULL, bundle_id TEXT NOT NULL, method TEXT NOT NULL,
  inside INTEGER NOT NULL, p_value REAL NOT NULL, level REAL NOT NULL, inside_served INTEGER NOT NULL,
  site TEXT, device TEXT, model TEXT, point TEXT);
CREATE TABLE IF NOT EXISTS model_counters (
  model TEXT NOT NULL, method TEXT NOT NULL, name TEXT NOT NULL, value REAL NOT NULL,
  PRIMARY KEY (model, method, name));
CREATE TABLE IF NOT EXISTS model_adaptive (
  model TEXT NOT NULL, bundle_id TEXT NOT NULL, method TEXT NOT NULL, alpha REAL NOT NULL, scale REAL,
  n INTEGER NOT NULL, at REAL NOT NULL, PRIMARY KEY (model, bundle_id, method));
"""
#: after SCHEMA: a feedback table from before the repository gains its model column first
INDEXES = "CREATE INDEX IF NOT EXISTS feedback_model_recent ON feedback (model, bundle_id, method, id);"

COUNTERS = ("rows", "inside", "p_value_sum", "inside_served")


@dataclass(frozen=True)
class Served:
    """A model's published record: the bundle every worker serves, or ``loaded`` false (unloaded)."""

    path: str | None
    bundle_id: str | None
    configured: str | None
    generation: int
    loaded: bool = True


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
            columns = {row[1] for row in self._db.execute("PRAGMA table_info(feedback)")}
            for column in ("model", "point"):  # a state file from before either column: add it
                if column not in columns:
                    self._db.execute(f"ALTER TABLE feedback ADD COLUMN {column} TEXT")
            self._db.executescript(INDEXES)

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

    # ------------------------------------------------------------------ the served bundles
    def publish(self, model: str, path=None, bundle_id: str | None = None, configured=None,
                loaded: bool = True) -> int:
        """Record ``path`` (id ``bundle_id``) as the bundle every worker serves for ``model``, or
        (``loaded`` false) that ``model`` is unloaded; the model's new generation."""
        with self._write() as db:
            row = db.execute("SELECT generation FROM model_served WHERE model = ?", (model,)).fetchone()
            generation = (row[0] if row else 0) + 1
            db.execute("INSERT OR REPLACE INTO model_served (model, path, bundle_id, configured, loaded, generation, "
                       "at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                       (model, None if path is None else str(path), bundle_id,
                        None if configured is None else str(configured), int(loaded), generation, time.time()))
        return generation

    def served(self, model: str) -> Served | None:
        rows = self._read("SELECT path, bundle_id, configured, generation, loaded FROM model_served WHERE model = ?",
                          (model,))
        return Served(*rows[0][:4], bool(rows[0][4])) if rows else None

    def served_all(self) -> dict[str, Served]:
        """Every model's published record."""
        return {r[0]: Served(*r[1:5], bool(r[5])) for r in
                self._read("SELECT model, path, bundle_id, configured, generation, loaded FROM model_served")}

    def claim_legacy(self, model: str, configured) -> bool:
        """Move a pre-repository state (one served bundle, counters per method, feedback and adaptive
        state without a model) to ``model``, when the legacy record was configured with the same bundle
        (``configured``); ``True`` when something moved. Idempotent: the legacy tables are dropped."""
        with self._write() as db:
            tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if "served" not in tables:
                return False
            row = db.execute("SELECT path, bundle_id, configured, generation FROM served WHERE id = 1").fetchone()
            if row is not None and row[2] is not None and configured is not None and row[2] != str(configured):
                return False  # another bundle's state: leave it for the model configured with that bundle
            if row is not None:
                db.execute("INSERT OR IGNORE INTO model_served (model, path, bundle_id, configured, loaded, generation,"
                           " at) VALUES (?, ?, ?, ?, 1, ?, ?)", (model, *row, time.time()))
            if "counters" in tables:
                db.execute("INSERT OR IGNORE INTO model_counters (model, method, name, value) "
                           "SELECT ?, method, name, value FROM counters", (model,))
            if "adaptive" in tables:
                db.execute("INSERT OR IGNORE INTO model_adaptive (model, bundle_id, method, alpha, scale, n, at) "
                           "SELECT ?, bundle_id, method, alpha, scale, n, at FROM adaptive", (model,))
            db.execute("UPDATE feedback SET model = ? WHERE model IS NULL", (model,))
            for table in ("served", "counters", "adaptive"):
                db.execute(f"DROP TABLE IF EXISTS {table}")
        return True

    # ------------------------------------------------------------------ feedback
    def record_feedback(self, model: str, bundle_id: str, batch: dict[str, MethodFeedback], *,
                        site: str | None = None, device: str | None = None, adapt: AdaptStep | None = None,
                        target: float = 0.9, points=None) -> dict[str, np.ndarray]:
        """Store a batch of labelled rows' verdicts for every method of ``model`` (with ``points`` (k, n), the
        true positions), update the counters and (with ``adapt``) the adaptive state, in one transaction.
        Returns ``method -> inside served (k,)``."""
        now = time.time()
        k_rows = int(next(iter(batch.values())).inside.shape[0]) if batch else 0
        texts = [None] * k_rows if points is None else [json.dumps(p) for p in np.asarray(points, float).tolist()]
        served_inside = {}
        with self._write() as db:
            for method, fb in batch.items():
                k = int(fb.inside.shape[0])
                key = (model, bundle_id, method)
                if adapt is not None:
                    row = db.execute("SELECT alpha, scale FROM model_adaptive WHERE model = ? AND bundle_id = ? "
                                     "AND method = ?", key).fetchone()
                    (value, scale), levels, inside_served = adapt(method, None if row is None else tuple(row), fb.scores)
                    db.execute("INSERT OR REPLACE INTO model_adaptive (model, bundle_id, method, alpha, scale, n, at) "
                               "VALUES (?, ?, ?, ?, ?, COALESCE((SELECT n FROM model_adaptive WHERE model = ? AND "
                               "bundle_id = ? AND method = ?), 0) + ?, ?)",
                               (*key, float(value), None if scale is None else float(scale), *key, k, now))
                else:
                    levels, inside_served = np.full(k, target), fb.inside
                db.executemany(
                    "INSERT INTO feedback (at, model, bundle_id, method, inside, p_value, level, inside_served, site, "
                    "device, point) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [(now, model, bundle_id, method, int(i), float(p), float(lv), int(s), site, device, pt)
                     for i, p, lv, s, pt in zip(fb.inside, fb.p_value, levels, inside_served, texts)])
                for name, value in (("rows", k), ("inside", int(np.sum(fb.inside))),
                                    ("p_value_sum", float(np.sum(fb.p_value))),
                                    ("inside_served", int(np.sum(inside_served)))):
                    db.execute("INSERT INTO model_counters (model, method, name, value) VALUES (?, ?, ?, ?) "
                               "ON CONFLICT (model, method, name) DO UPDATE SET value = value + excluded.value",
                               (model, method, name, value))
                db.execute("DELETE FROM feedback WHERE model = ? AND bundle_id = ? AND method = ? AND id <= "
                           "(SELECT id FROM feedback WHERE model = ? AND bundle_id = ? AND method = ? ORDER BY id DESC "
                           "LIMIT 1 OFFSET ?)", (*key, *key, self.keep))
                served_inside[method] = np.asarray(inside_served, dtype=bool)
        return served_inside

    def window(self, model: str, bundle_id: str, size: int) -> dict[str, WindowStats]:
        """Observed coverage over the last ``size`` labelled rows of ``model``'s bundle ``bundle_id``, per method."""
        out = {}
        for (method,) in self._read("SELECT DISTINCT method FROM feedback WHERE model = ? AND bundle_id = ?",
                                    (model, bundle_id)):
            rows = self._read("SELECT COUNT(*), AVG(inside), AVG(p_value), AVG(inside_served) FROM (SELECT inside, "
                              "p_value, inside_served FROM feedback WHERE model = ? AND bundle_id = ? AND method = ? "
                              "ORDER BY id DESC LIMIT ?)", (model, bundle_id, method, size))
            n, cov, p, served = rows[0]
            out[method] = WindowStats(int(n), cov, p, served)
        return out

    def recent(self, model: str, method: str, limit: int) -> list[dict]:
        """The last ``limit`` labelled rows of ``model`` scored by ``method`` (any bundle), newest first: when,
        the bundle, the point (None for rows stored before points were), inside at the bundle's level and
        inside the region served."""
        rows = self._read("SELECT at, bundle_id, point, inside, inside_served, level, site, device FROM feedback "
                          "WHERE model = ? AND method = ? ORDER BY id DESC LIMIT ?", (model, method, int(limit)))
        return [{"at": at, "bundle_id": b, "point": None if pt is None else json.loads(pt), "inside": bool(i),
                 "inside_served": bool(s), "level": lv, "site": site, "device": device}
                for at, b, pt, i, s, lv, site, device in rows]

    def counters(self) -> dict[str, dict[str, dict[str, float]]]:
        """``model -> method -> {rows, inside, p_value_sum, inside_served}``: running totals on this host."""
        out: dict[str, dict[str, dict[str, float]]] = {}
        for model, method, name, value in self._read("SELECT model, method, name, value FROM model_counters"):
            out.setdefault(model, {}).setdefault(method, dict.fromkeys(COUNTERS, 0.0))[name] = value
        return out

    def adaptive_state(self, model: str, bundle_id: str) -> dict[str, tuple]:
        """The online rule's ``(value, scale)`` per method of ``model``'s bundle ``bundle_id`` (none before the
        first feedback)."""
        return {m: (a, sc) for m, a, sc in self._read("SELECT method, alpha, scale FROM model_adaptive WHERE model = ? "
                                                     "AND bundle_id = ?", (model, bundle_id))}
