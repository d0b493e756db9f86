"""The state in PostgreSQL, shared by every replica of a fleet (``LMVE_STATE_URL=postgresql://...``).

psycopg 3 and its connection pool (``psycopg_pool``; a few connections per worker: the state is
touched by feedback, publishes and the sync tick, never by the region routes). Writes run in
READ COMMITTED transactions; a feedback batch first upserts its counters row, whose row lock holds
every other batch of the same model and method until it commits (the adaptive state is stepped by
one batch at a time, as ``BEGIN IMMEDIATE`` does on SQLite). The schema is migrated under an
advisory lock, so replicas starting together apply each migration once.

A publish sends ``NOTIFY lmve_served`` in its transaction; :meth:`PostgresState.on_change` runs a
listener thread on its own connection that wakes the worker's follower (polling stays as the
fallback). When the server cannot be reached, every operation raises
:class:`~service.state.base.StateUnavailable` within ``connect_timeout_s``; the pool reconnects by
itself once the server is back, and the schema is checked again then.
"""

from __future__ import annotations

import logging
import threading
from contextlib import contextmanager
from typing import Callable

import psycopg
from psycopg_pool import ConnectionPool, PoolTimeout

from service.state.base import ServiceState, StateUnavailable, Tx
from service.state.migrations import migrate

log = logging.getLogger("lmve.service")
# the pool logs every failed reconnection attempt; PostgresState logs an outage once, and its end
logging.getLogger("psycopg.pool").setLevel(logging.ERROR)
CHANNEL = "lmve_served"
#: pg_advisory_xact_lock's key for the migrations (any constant no other application of the database uses)
MIGRATION_LOCK = 0x4C4D5645  # "LMVE"
FAILURES = (psycopg.OperationalError, psycopg.InterfaceError, PoolTimeout)


def redact(url: str) -> str:
    """``url`` without its password."""
    try:
        info = psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return "postgresql://?"
    host, port, db, user = info.get("host", ""), info.get("port", ""), info.get("dbname", ""), info.get("user", "")
    return f"postgresql://{user + '@' if user else ''}{host}{':' + str(port) if port else ''}/{db}"


class PostgresState(ServiceState):
    dialect = "postgresql"
    shared = True

    def __init__(self, url: str, keep: int = 10_000, pool_size: int = 4, connect_timeout_s: float = 2.0):
        super().__init__(keep)
        self.url, self.connect_timeout_s = url, connect_timeout_s
        self._migrated = False
        self._schema_lock = threading.Lock()
        self._pool = ConnectionPool(url, min_size=1, max_size=pool_size, timeout=connect_timeout_s,
                                    kwargs={"autocommit": True, "connect_timeout": max(1, round(connect_timeout_s))},
                                    check=ConnectionPool.check_connection, reconnect_timeout=3600.0,
                                    name="lmve-state", open=False)
        self._pool.open(wait=False)
        self._listener: threading.Thread | None = None
        self._callbacks: list[Callable[[], None]] = []
        self._closing = threading.Event()
        try:
            self._ensure_schema()
        except StateUnavailable as exc:  # serve what is configured; migrate when the server is back
            log.warning("state %s unreachable at start (%s); serving the configured bundles until it is back",
                        self.describe(), exc.reason)

    def describe(self) -> str:
        return redact(self.url)

    def close(self) -> None:
        self._closing.set()
        self._pool.close(timeout=2.0)
        if self._listener is not None:
            self._listener.join(timeout=3.0)

    # ------------------------------------------------------------------ transactions
    def _unavailable(self, exc: BaseException, committing: bool = False) -> StateUnavailable:
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        what = "went away while committing" if committing else "cannot be reached"
        return StateUnavailable(f"the state database {self.describe()} {what}: {text}", outcome_unknown=committing)

    def _ensure_schema(self) -> None:
        if self._migrated:
            return
        with self._schema_lock:
            if self._migrated:
                return
            try:
                with self._pool.connection() as conn, conn.transaction():
                    tx = Tx(conn.cursor(), qmark=False)
                    tx.execute("SELECT pg_advisory_xact_lock(?)", (MIGRATION_LOCK,))
                    applied = migrate(tx, self.dialect)
            except FAILURES as exc:
                raise self._unavailable(exc) from None
            if applied:
                log.info("state %s: schema migrations %s applied", self.describe(), applied)
            self._migrated = True

    @contextmanager
    def _transaction(self):
        self._ensure_schema()
        committing = False
        try:
            with self._pool.connection() as conn, conn.transaction():
                yield Tx(conn.cursor(), qmark=False)
                committing = True  # the body ran: a failure from here on is the COMMIT's, whose outcome is unknown
        except FAILURES as exc:
            raise self._unavailable(exc, committing) from None

    def _read(self, sql: str, args=()) -> list[tuple]:
        self._ensure_schema()
        try:
            with self._pool.connection() as conn:
                return Tx(conn.cursor(), qmark=False).execute(sql, args).fetchall()
        except FAILURES as exc:
            raise self._unavailable(exc) from None

    # ------------------------------------------------------------------ notifications
    def _notify(self, tx: Tx, model: str) -> None:
        tx.execute("SELECT pg_notify(?, ?)", (CHANNEL, model))

    def on_change(self, callback: Callable[[], None]) -> None:
        self._callbacks.append(callback)
        if self._listener is None:
            self._listener = threading.Thread(target=self._listen, name="lmve-state-listen", daemon=True)
            self._listener.start()

    def _wake(self) -> None:
        for callback in list(self._callbacks):
            callback()

    def _listen(self) -> None:
        """LISTEN on its own connection; reconnect (and wake once: a publish may have been missed) after a loss."""
        delay, lost = 0.5, False
        while not self._closing.is_set():
            try:
                with psycopg.connect(self.url, autocommit=True,
                                     connect_timeout=max(1, round(self.connect_timeout_s))) as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    if lost:
                        log.info("state %s: listening again", self.describe())
                        self._wake()
                    delay, lost = 0.5, False
                    while not self._closing.is_set():
                        for _ in conn.notifies(timeout=1.0, stop_after=1):
                            self._wake()
            except FAILURES as exc:
                if not lost:
                    log.warning("state %s: notifications lost (%s); polling until the server is back",
                                self.describe(), str(exc).strip().splitlines()[0] if str(exc).strip() else exc)
                lost = True
                self._closing.wait(delay)
                delay = min(delay * 2, 5.0)
