"""The state's schema, as numbered migrations applied once each and recorded in ``schema_version``.

A migration is a list of steps, each an SQL statement or a callable given the transaction's
:class:`~service.state.base.Tx`. :func:`migrate` runs, in one transaction the backend serialises
across processes (SQLite's write lock, PostgreSQL's advisory lock), every migration newer than the
database's version; a database newer than this code is refused rather than written.
Add a migration by appending to both lists; never edit one that has shipped.
"""

from __future__ import annotations

import time

from service.state.base import StateUnavailable, Tx


def _sqlite_feedback_columns(tx: Tx) -> None:
    """A SQLite state file from before the model repository or the viewer: feedback gains ``model`` and ``point``."""
    columns = {row[1] for row in tx.execute("PRAGMA table_info(feedback)").fetchall()}
    for column in ("model", "point"):
        if column not in columns:
            tx.execute(f"ALTER TABLE feedback ADD COLUMN {column} TEXT")


SQLITE = {
    # IF NOT EXISTS: files written before the version table already hold these tables
    1: ["CREATE TABLE IF NOT EXISTS model_served (model TEXT PRIMARY KEY, path TEXT, bundle_id TEXT, configured TEXT, "
        "loaded INTEGER NOT NULL, generation INTEGER NOT NULL, at REAL NOT NULL)",
        "CREATE TABLE IF NOT EXISTS feedback (id INTEGER PRIMARY KEY AUTOINCREMENT, at REAL NOT NULL, "
        "bundle_id TEXT NOT NULL, method TEXT NOT NULL, inside INTEGER NOT NULL, p_value REAL NOT NULL, "
        "level REAL NOT NULL, inside_served INTEGER NOT NULL, site TEXT, device TEXT, model TEXT, point TEXT)",
        _sqlite_feedback_columns,
        "CREATE TABLE IF NOT EXISTS model_counters (model TEXT NOT NULL, method TEXT NOT NULL, name TEXT NOT NULL, "
        "value REAL NOT NULL, PRIMARY KEY (model, method, name))",
        "CREATE TABLE IF NOT EXISTS model_adaptive (model TEXT NOT NULL, bundle_id TEXT NOT NULL, method TEXT NOT NULL, "
        "alpha REAL NOT NULL, scale REAL, n INTEGER NOT NULL, at REAL NOT NULL, PRIMARY KEY (model, bundle_id, method))",
        "CREATE INDEX IF NOT EXISTS feedback_model_recent ON feedback (model, bundle_id, method, id)"],
    # the shift alarm's test per model and bundle (service.shift)
    2: ["CREATE TABLE model_shift (model TEXT NOT NULL, bundle_id TEXT NOT NULL, state TEXT, evidence REAL NOT NULL, "
        "queries INTEGER NOT NULL, alarm_at INTEGER, delta REAL NOT NULL, started_at REAL NOT NULL, at REAL NOT NULL, "
        "PRIMARY KEY (model, bundle_id))"],
    # the radio watch per model (service.radio_follower): its decayed counts and the view they decided
    3: ["CREATE TABLE model_radio (model TEXT PRIMARY KEY, state TEXT, view TEXT, seen INTEGER NOT NULL, "
        "started_at REAL NOT NULL, at REAL NOT NULL)"],
}

POSTGRESQL = {
    1: ["CREATE TABLE model_served (model TEXT PRIMARY KEY, path TEXT, bundle_id TEXT, configured TEXT, "
        "loaded INTEGER NOT NULL, generation BIGINT NOT NULL, at DOUBLE PRECISION NOT NULL)",
        "CREATE TABLE feedback (id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, at DOUBLE PRECISION NOT NULL, "
        "model TEXT NOT NULL, bundle_id TEXT NOT NULL, method TEXT NOT NULL, inside INTEGER NOT NULL, "
        "p_value DOUBLE PRECISION NOT NULL, level DOUBLE PRECISION NOT NULL, inside_served INTEGER NOT NULL, "
        "site TEXT, device TEXT, point TEXT)",
        "CREATE TABLE model_counters (model TEXT NOT NULL, method TEXT NOT NULL, name TEXT NOT NULL, "
        "value DOUBLE PRECISION NOT NULL, PRIMARY KEY (model, method, name))",
        "CREATE TABLE model_adaptive (model TEXT NOT NULL, bundle_id TEXT NOT NULL, method TEXT NOT NULL, "
        "alpha DOUBLE PRECISION NOT NULL, scale DOUBLE PRECISION, n BIGINT NOT NULL, at DOUBLE PRECISION NOT NULL, "
        "PRIMARY KEY (model, bundle_id, method))",
        "CREATE INDEX feedback_model_recent ON feedback (model, bundle_id, method, id)"],
    2: ["CREATE TABLE model_shift (model TEXT NOT NULL, bundle_id TEXT NOT NULL, state TEXT, "
        "evidence DOUBLE PRECISION NOT NULL, queries BIGINT NOT NULL, alarm_at BIGINT, delta DOUBLE PRECISION NOT NULL, "
        "started_at DOUBLE PRECISION NOT NULL, at DOUBLE PRECISION NOT NULL, PRIMARY KEY (model, bundle_id))"],
    3: ["CREATE TABLE model_radio (model TEXT PRIMARY KEY, state TEXT, view TEXT, seen BIGINT NOT NULL, "
        "started_at DOUBLE PRECISION NOT NULL, at DOUBLE PRECISION NOT NULL)"],
}

MIGRATIONS = {"sqlite": SQLITE, "postgresql": POSTGRESQL}
VERSION_TABLE = "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY KEY, applied_at {real} NOT NULL)"


def latest(dialect: str) -> int:
    return max(MIGRATIONS[dialect])


def migrate(tx: Tx, dialect: str) -> list[int]:
    """Apply, inside ``tx``, the migrations of ``dialect`` newer than the database's version; the versions applied."""
    tx.execute(VERSION_TABLE.format(real="REAL" if dialect == "sqlite" else "DOUBLE PRECISION"))
    (current,) = tx.execute("SELECT COALESCE(MAX(version), 0) FROM schema_version").fetchone()
    steps = MIGRATIONS[dialect]
    if current > latest(dialect):
        raise StateUnavailable(f"the state's schema is version {current}, newer than this lmve's {latest(dialect)}: "
                               "run the newer lmve, or point LMVE_STATE_URL at another database")
    applied = []
    for version in sorted(v for v in steps if v > current):
        for step in steps[version]:
            step(tx) if callable(step) else tx.execute(step)
        tx.execute("INSERT INTO schema_version (version, applied_at) VALUES (?, ?)", (version, time.time()))
        applied.append(version)
    return applied
