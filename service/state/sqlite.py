"""The state in one SQLite file (WAL mode), shared by the workers of one host, or in memory.

Every write runs in one ``BEGIN IMMEDIATE`` transaction: SQLite's single write lock serialises the
writers of every process on the file, so two workers never interleave a read-modify-write of the
adaptive state. Reads run outside it (WAL readers never block). A state file written before the
model repository (tables ``served``, ``counters``, ``adaptive``, and ``feedback`` without a model) is
moved at start to the model it served (:meth:`SQLiteState.claim_legacy`).
"""

from __future__ import annotations

import sqlite3
import threading
import time
from contextlib import contextmanager
from pathlib import Path

from service.state.base import ServiceState, StateUnavailable, Tx
from service.state.migrations import migrate


class SQLiteState(ServiceState):
    dialect = "sqlite"

    def __init__(self, path: Path | str | None = None, keep: int = 10_000):
        super().__init__(keep)
        self.path = None if path is None else Path(path)
        self.shared = self.path is not None
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
        with self._transaction() as tx:
            migrate(tx, self.dialect)

    def describe(self) -> str:
        return f"sqlite:///{self.path}" if self.path is not None else "sqlite:// (memory)"

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _unavailable(self, exc: sqlite3.Error) -> StateUnavailable:
        return StateUnavailable(f"the state file {self.path or ':memory:'} cannot be used now: {exc}")

    @contextmanager
    def _transaction(self):
        with self._lock:
            try:
                self._db.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:  # locked past busy_timeout, read-only, vanished
                raise self._unavailable(exc) from None
            try:
                yield Tx(self._db.cursor(), qmark=True)
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            try:
                self._db.execute("COMMIT")
            except sqlite3.OperationalError as exc:
                self._db.execute("ROLLBACK")
                raise self._unavailable(exc) from None

    def _read(self, sql: str, args=()) -> list[tuple]:
        with self._lock:
            try:
                return self._db.execute(sql, args).fetchall()
            except sqlite3.OperationalError as exc:
                raise self._unavailable(exc) from None

    def claim_legacy(self, model: str, configured) -> bool:
        """Move a pre-repository state (one served bundle, counters per method, feedback and adaptive
        state without a model) to ``model``, when the legacy record was configured with the same bundle
        (``configured``); ``True`` when something moved. Idempotent: the legacy tables are dropped."""
        with self._transaction() as tx:
            tables = {r[0] for r in tx.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()}
            if "served" not in tables:
                return False
            row = tx.execute("SELECT path, bundle_id, configured, generation FROM served WHERE id = 1").fetchone()
            if row is not None and row[2] is not None and configured is not None and row[2] != str(configured):
                return False  # another bundle's state: leave it for the model configured with that bundle
            if row is not None:
                tx.execute("INSERT OR IGNORE INTO model_served (model, path, bundle_id, configured, loaded, generation,"
                           " at) VALUES (?, ?, ?, ?, 1, ?, ?)", (model, *row, time.time()))
            if "counters" in tables:
                tx.execute("INSERT OR IGNORE INTO model_counters (model, method, name, value) "
                           "SELECT ?, method, name, value FROM counters", (model,))
            if "adaptive" in tables:
                tx.execute("INSERT OR IGNORE INTO model_adaptive (model, bundle_id, method, alpha, scale, n, at) "
                           "SELECT ?, bundle_id, method, alpha, scale, n, at FROM adaptive", (model,))
            tx.execute("UPDATE feedback SET model = ? WHERE model IS NULL", (model,))
            for table in ("served", "counters", "adaptive"):
                tx.execute(f"DROP TABLE IF EXISTS {table}")
        return True
