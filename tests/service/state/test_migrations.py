"""``service.state.migrations``: each migration recorded once, a newer schema refused."""

from __future__ import annotations

import sqlite3

from service.state import SQLiteState, StateUnavailable


def test_migrations_are_recorded_once_and_a_newer_schema_is_refused(tmp_path):
    from service.state import StateUnavailable
    from service.state.migrations import latest

    path = tmp_path / "state.sqlite"
    SQLiteState(path).close()
    SQLiteState(path).close()  # a second start applies nothing again
    db = sqlite3.connect(path)
    assert [v for (v,) in db.execute("SELECT version FROM schema_version")] == list(range(1, latest("sqlite") + 1))
    db.execute("INSERT INTO schema_version VALUES (?, 0)", (latest("sqlite") + 1,))
    db.commit()
    db.close()
    try:
        SQLiteState(path)
    except StateUnavailable as exc:
        assert f"version {latest('sqlite') + 1}, newer than this lmve's {latest('sqlite')}" in exc.reason
    else:
        raise AssertionError("a state written by a newer lmve was opened")
