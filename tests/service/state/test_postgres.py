"""``service.state.postgres`` against a real PostgreSQL: one migration when replicas start together, an
unreachable database said within the timeout and healed, a commit that may have landed said so."""

from __future__ import annotations

import threading
import time

import pytest

from service.state import StateUnavailable, open_state
from tests.service.state import batch


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
            state.record_feedback("m", "b", batch(2))
        assert time.monotonic() - t0 < 5.0 and "secret" not in err.value.reason
        assert "cannot be reached" in state.health()
        cluster.start()
        deadline = time.monotonic() + 20
        while state.health() is not None and time.monotonic() < deadline:
            time.sleep(0.2)
        state.record_feedback("m", "b", batch(2))
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
        state.record_feedback("m", "b", batch(3))  # the pool replaced the dead connections
        assert state.counters()["m"]["nle"]["rows"] == 3
    finally:
        admin.close()
        state.close()
