"""``service.state``'s contract, on both backends (SQLite and a real PostgreSQL): per-model records, feedback
and counters, a compare-and-set publish, concurrent writers of the adaptive and shift states."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from service.state import PublishConflict, Served, open_state
from tests.service.state import batch


def test_models_keep_separate_records_feedback_and_counters(state_url):
    state = open_state(state_url)
    assert state.publish("a", "/r/a", "ida", configured="/r/a") == 1
    assert state.publish("a", configured="/r/a", loaded=False) == 2
    state.publish("b", "/r/b", "idb")
    records = state.served_all()
    assert not records["a"].loaded and records["a"].path is None and records["b"].bundle_id == "idb"
    state.record_feedback("a", "same-id", batch(3, True))
    state.record_feedback("b", "same-id", batch(2, False))  # two models, one bundle content: kept apart
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
            state.record_feedback("m", "b", batch(1 + i % 3), adapt=adapt)

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
