"""``service.state``: per-model records, feedback and counters, and the migration of a state file from
before the model repository."""

from __future__ import annotations

import sqlite3
import threading
import time

import numpy as np

import pytest

from service.state import MethodFeedback, PublishConflict, Served, SQLiteState, StateUnavailable, open_state

LEGACY = """
CREATE TABLE served (id INTEGER PRIMARY KEY CHECK (id = 1), path TEXT NOT NULL, bundle_id TEXT NOT NULL,
  configured TEXT, generation INTEGER NOT NULL, at REAL NOT NULL);
CREATE TABLE feedback (id INTEGER PRIMARY KEY AUTOINCREMENT, at REAL NOT NULL, bundle_id TEXT NOT NULL,
  method TEXT NOT NULL, inside INTEGER NOT NULL, p_value REAL NOT NULL, level REAL NOT NULL,
  inside_served INTEGER NOT NULL, site TEXT, device TEXT);
CREATE TABLE counters (method TEXT NOT NULL, name TEXT NOT NULL, value REAL NOT NULL, PRIMARY KEY (method, name));
CREATE TABLE adaptive (bundle_id TEXT NOT NULL, method TEXT NOT NULL, alpha REAL NOT NULL, scale REAL,
  n INTEGER NOT NULL, at REAL NOT NULL, PRIMARY KEY (bundle_id, method));
INSERT INTO served VALUES (1, '/b/site.recal-1', 'b2', '/b/site', 4, 0);
INSERT INTO feedback (at, bundle_id, method, inside, p_value, level, inside_served) VALUES (0, 'b2', 'nle', 1, 0.5, 0.9, 1);
INSERT INTO counters VALUES ('nle', 'rows', 7);
INSERT INTO adaptive VALUES ('b2', 'nle', 0.08, NULL, 7, 0);
"""


def _batch(k: int, inside: bool = True) -> dict:
    return {"nle": MethodFeedback(inside=np.full(k, inside), p_value=np.full(k, 0.5), scores=np.ones(k))}


def test_models_keep_separate_records_feedback_and_counters(state_url):
    state = open_state(state_url)
    assert state.publish("a", "/r/a", "ida", configured="/r/a") == 1
    assert state.publish("a", configured="/r/a", loaded=False) == 2
    state.publish("b", "/r/b", "idb")
    records = state.served_all()
    assert not records["a"].loaded and records["a"].path is None and records["b"].bundle_id == "idb"
    state.record_feedback("a", "same-id", _batch(3, True))
    state.record_feedback("b", "same-id", _batch(2, False))  # two models, one bundle content: kept apart
    assert state.window("a", "same-id", 100)["nle"].coverage == 1.0
    assert state.window("b", "same-id", 100)["nle"].coverage == 0.0
    assert state.counters() == {"a": {"nle": {"rows": 3, "inside": 3, "p_value_sum": 1.5, "inside_served": 3}},
                                "b": {"nle": {"rows": 2, "inside": 0, "p_value_sum": 1.0, "inside_served": 0}}}
    assert [r["inside"] for r in state.recent("b", "nle", 5)] == [False, False]
    state.close()


def test_a_compare_and_set_publish_wins_once_and_names_the_winner(state_url):
    state = open_state(state_url)
    assert state.publish("m", "/r/m.recal-1", "child-1", expect="absent") == 1  # no record yet: nothing to lose to
    assert state.publish("m", "/r/m.recal-2", "child-2", expect="child-1") == 2
    with pytest.raises(PublishConflict) as info:  # a second child of child-1: child-2 won
        state.publish("m", "/r/m.recal-3", "child-3", expect="child-1")
    assert (info.value.expected, info.value.published) == ("child-1", "child-2")
    assert state.served("m") == Served("/r/m.recal-2", "child-2", None, 2, True)  # untouched
    state.publish("m", configured="/r/m", loaded=False)
    with pytest.raises(PublishConflict):  # unloaded since: a recalibration of child-2 is not published
        state.publish("m", "/r/m.recal-4", "child-4", expect="child-2")
    assert state.publish("m", "/r/m", "parent") == 4  # an operator's publish (no expect) always lands

    racers = [open_state(state_url) for _ in range(4)]
    won, lost = [], []

    def race(i):  # four processes recalibrating the same parent at once: one wins
        try:
            racers[i].publish("m", f"/r/m.recal-r{i}", f"r{i}", expect="parent")
            won.append(i)
        except PublishConflict as exc:
            lost.append(exc.published)

    threads = [threading.Thread(target=race, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1 and lost == [f"r{won[0]}"] * 3
    assert state.served("m").bundle_id == f"r{won[0]}" and state.served("m").generation == 5
    for s in (state, *racers):
        s.close()


def test_concurrent_writers_step_the_adaptive_state_one_batch_at_a_time(state_url):
    """Four writers, each with its own connection (as four processes), 30 batches each: every row is counted
    once and the adaptive step saw every batch's predecessor (a lost update would leave value < rows)."""
    states = [open_state(state_url) for _ in range(4)]

    def adapt(method, stored, scores):  # value: rows seen so far; the read-modify-write a race would break
        value = (0.0 if stored is None else stored[0]) + len(scores)
        return (value, None), np.full(len(scores), 0.9), np.ones(len(scores), bool)

    def write(state):
        for i in range(30):
            state.record_feedback("m", "b", _batch(1 + i % 3), adapt=adapt)

    threads = [threading.Thread(target=write, args=(s,)) for s in states]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    rows = 4 * sum(1 + i % 3 for i in range(30))
    assert states[0].counters()["m"]["nle"]["rows"] == rows
    assert states[1].adaptive_state("m", "b") == {"nle": (rows, None)}
    assert states[2].window("m", "b", 10_000)["nle"].rows == rows
    for s in states:
        s.close()


def test_shift_steps_of_concurrent_writers_each_see_the_last_and_a_publish_ends_the_test(state_url):
    """Four writers (as four processes) step one model's shift test 20 times each: every step reads the state its
    predecessor wrote (a lost update would leave queries short); other bundles' and models' tests are their own;
    publishing the model (a reload, a recalibration) deletes its tests, and only its."""
    states = [open_state(state_url) for _ in range(4)]

    def step(stored):
        queries = (0 if stored is None else stored["queries"]) + 3
        return {"queries": queries, "evidence": float(queries), "alarm_at": 12 if queries >= 12 else None,
                "delta": 0.01, "counts": [queries]}

    def write(state):
        for _ in range(20):
            state.step_shift("m", "b", step, delta=0.01)

    threads = [threading.Thread(target=write, args=(s,)) for s in states]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    states[0].step_shift("m", "old", step, delta=0.01)
    states[0].step_shift("other", "b", step, delta=0.01)
    rec = states[1].shifts("m")[("m", "b")]
    assert (rec.queries, rec.evidence, rec.alarm_at, rec.delta) == (240, 240.0, 12, 0.01)
    assert set(states[2].shifts()) == {("m", "b"), ("m", "old"), ("other", "b")}
    states[3].publish("m", "/b/m", "b2")
    assert set(states[0].shifts()) == {("other", "b")}
    for s in states:
        s.close()


def test_a_legacy_state_file_moves_to_the_model_configured_with_its_bundle(tmp_path):
    path = tmp_path / "state.sqlite"
    db = sqlite3.connect(path)
    db.executescript(LEGACY)
    db.commit()
    db.close()
    state = SQLiteState(path)  # the new tables beside the old ones; feedback gains its model column
    assert not state.claim_legacy("other", "/b/other")  # configured with another bundle: not this model's
    assert state.claim_legacy("site", "/b/site")
    rec = state.served("site")
    assert (rec.path, rec.bundle_id, rec.configured, rec.generation, rec.loaded) == ("/b/site.recal-1", "b2",
                                                                                    "/b/site", 4, True)
    assert state.counters()["site"]["nle"]["rows"] == 7
    assert state.adaptive_state("site", "b2") == {"nle": (0.08, None)}
    assert state.window("site", "b2", 10)["nle"].rows == 1
    assert not state.claim_legacy("site", "/b/site")  # done once: the legacy tables are gone
    state.close()
    tables = {r[0] for r in sqlite3.connect(path).execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert not tables & {"served", "counters", "adaptive"}


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


def test_state_urls_name_the_backend_and_the_file(tmp_path, monkeypatch):
    import pytest

    from service.settings import ServiceSettings
    from service.state import open_state, sqlite_path

    assert sqlite_path("sqlite://") is None and str(sqlite_path("sqlite:///rel/s.db")) == "rel/s.db"
    assert str(sqlite_path("sqlite:////abs/s.db")) == "/abs/s.db"
    state = open_state(f"sqlite:///{tmp_path}/s.db")  # SQLAlchemy's spelling: four slashes for an absolute path
    assert state.shared and state.path == tmp_path / "s.db" and state.health() is None
    assert not open_state(None).shared
    monkeypatch.setenv("LMVE_STATE_DB", str(tmp_path / "old.sqlite"))
    assert ServiceSettings().state_url == f"sqlite:///{tmp_path}/old.sqlite"  # the old variable still works
    monkeypatch.setenv("LMVE_STATE_URL", "sqlite:///elsewhere.sqlite")
    with pytest.raises(ValueError, match="LMVE_STATE_URL .* or LMVE_STATE_DB"):
        ServiceSettings()
    monkeypatch.delenv("LMVE_STATE_DB")
    monkeypatch.setenv("LMVE_STATE_URL", "mysql://db/lmve")
    with pytest.raises(ValueError, match="sqlite:// or postgresql://; got 'mysql'"):
        ServiceSettings()


def test_postgres_migrates_once_when_replicas_start_together(pg_cluster):
    url = pg_cluster.create_database()
    states = [None] * 3

    def start(i):
        states[i] = open_state(url)

    threads = [threading.Thread(target=start, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    from service.state.migrations import latest

    assert states[0]._read("SELECT version FROM schema_version ORDER BY version") == \
        [(v,) for v in range(1, latest("postgresql") + 1)]
    assert states[1].publish("a", "/r/a", "x") == 1 and states[2].served("a").bundle_id == "x"
    for s in states:
        s.close()


@pytest.mark.slow
def test_postgres_unreachable_is_said_within_the_timeout_and_heals(tmp_path):
    """A server down at start: the state opens anyway, says why it cannot write (naming the server, never the
    password), and migrates and writes once the server is up."""
    import pytest

    from tests.postgres import Cluster, bindir

    if bindir() is None:
        pytest.skip("PostgreSQL's server is not installed")
    cluster = Cluster()
    try:
        url = cluster.url("postgres").replace("lmve@", "lmve:secret@")
        state = open_state(url)
        t0 = time.monotonic()
        with pytest.raises(StateUnavailable, match=f"127.0.0.1:{cluster.port}/postgres cannot be reached") as err:
            state.record_feedback("m", "b", _batch(2))
        assert time.monotonic() - t0 < 5.0 and "secret" not in err.value.reason
        assert "cannot be reached" in state.health()
        cluster.start()
        deadline = time.monotonic() + 20
        while state.health() is not None and time.monotonic() < deadline:
            time.sleep(0.2)
        state.record_feedback("m", "b", _batch(2))
        assert state.counters()["m"]["nle"]["rows"] == 2
        state.close()
    finally:
        cluster.destroy()


def test_postgres_says_when_a_commit_may_have_landed(pg_cluster):
    """The server going away during a transaction's body: nothing was stored; during its COMMIT: the outcome
    is unknown, and the error says so (a feedback resend might count twice, a published bundle must stay)."""
    import psycopg
    import pytest

    url = pg_cluster.create_database()
    state = open_state(url)
    admin = psycopg.connect(url, autocommit=True)
    try:
        for at_commit in (False, True):
            with pytest.raises(StateUnavailable) as err:
                with state._transaction() as tx:
                    pid = tx.execute("SELECT pg_backend_pid()").fetchone()[0]
                    admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
                    if not at_commit:
                        tx.execute("SELECT 1")  # the body fails: nothing can have been committed
            assert err.value.outcome_unknown is at_commit
            assert ("went away while committing" in err.value.reason) is at_commit, err.value.reason
        state.record_feedback("m", "b", _batch(3))  # the pool replaced the dead connections
        assert state.counters()["m"]["nle"]["rows"] == 3
    finally:
        admin.close()
        state.close()
