"""The radio watch (models/radio.py): gone and new transmitters and the signal offset, decided without labels."""

import json

import numpy as np
import pytest

from models.exceptions import InputError
from models.radio import ALL, RadioBaseline, RadioView, RadioWatch

CODE = 100.0
D = 40


def survey(rng, m=2000, d=D, heard=0.5, mean=-70.0):
    """Rows where each transmitter is heard with probability ``heard`` at ``mean`` +- 5 dB, else the code."""
    X = np.where(rng.random((m, d)) < heard, np.round(mean + 5 * rng.standard_normal((m, d))), CODE)
    X[:, -5:] = CODE  # five transmitters the survey never heard
    return X


def baseline(X):
    return RadioBaseline.of(X, np.ones(X.shape[1], bool), np.full(X.shape[1], CODE))


def feed(watch, X, device=None, batch=10):
    for i in range(0, len(X), batch):
        watch.observe(X[i:i + batch], device)


def test_baseline_rates_and_means():
    X = np.array([[-60.0, CODE], [-70.0, CODE], [CODE, -50.0], [CODE, CODE]])
    b = baseline(X)
    np.testing.assert_array_equal(b.rate, [0.5, 0.25])
    np.testing.assert_allclose(b.mean, [-65.0, -50.0])


def test_an_exchangeable_stream_changes_nothing():
    rng = np.random.default_rng(0)
    watch = RadioWatch(baseline(survey(rng)))
    feed(watch, survey(rng, m=5000))
    view = watch.view()
    assert view.empty and view.gone == () and view.new == ()


def test_a_batch_counts_as_its_rows_one_by_one():
    """Rows counted in one tally of several requests (what a worker's flush does) or one by one give the same
    counts to rounding, per device too, and the times each transmitter was expected since it was last heard are
    exact (one profile: its survey rate per row)."""
    rng = np.random.default_rng(8)
    b = baseline(survey(rng))
    walk = survey(rng, m=600)
    walk[-250:, 0] = CODE  # transmitter 0 silent over the last 250 rows
    walk[-2:, 1:4] = [[-70.0, -70.0, CODE], [CODE, CODE, -70.0]]  # 1 and 2 last heard 1 row ago, 3 in the last
    devices = ["a" if i % 3 else None for i in range(0, 600, 50)]
    one, batched = RadioWatch(b), RadioWatch(b)
    for i, dev in zip(range(0, 600, 50), devices):
        for row in walk[i:i + 50]:
            one.observe(row[None, :], dev)
    batched.add(batched.tally([(walk[i:i + 50].tolist(), dev) for i, dev in zip(range(0, 600, 50), devices)]))
    assert batched.seen == one.seen == 600
    eps = np.finfo(float).eps
    for key in (ALL, "a"):
        for got, want in zip(batched.counts[key], one.counts[key]):
            # sums of up to 600 terms of at most 100 (dB): rounding of 600 * eps * 100 each way
            np.testing.assert_allclose(got, want, rtol=600 * eps, atol=600 * eps * 100 * 600)
    rate = b.rate
    for got in (batched.silent, one.silent):
        np.testing.assert_allclose(got[:4], [250 * rate[0], rate[1], rate[2], 0.0], rtol=600 * eps)
    assert batched.view() == one.view()


def test_nothing_is_decided_before_min_queries():
    rng = np.random.default_rng(1)
    X = survey(rng)
    watch = RadioWatch(baseline(X), min_queries=200)
    walk = survey(rng, m=190)
    walk[:, :10] = CODE  # ten transmitters gone at once
    feed(watch, walk)
    assert watch.view().empty


def test_replaced_transmitters_are_gone_and_new_within_the_stated_queries():
    rng = np.random.default_rng(2)
    watch = RadioWatch(baseline(survey(rng)))
    walk = survey(rng, m=400)
    walk[:, :8] = CODE                      # eight transmitters replaced ...
    walk[:, -5:-2] = np.where(rng.random((400, 3)) < 0.5, -60.0, CODE)  # ... and three the survey never heard
    # decayed queries reach min_queries = 200 after 215 at half-life 1000; e = 0.5 n >= 20 and heard 0 < 0.1 e
    # already then: the first decision has them
    feed(watch, walk[:210])
    assert watch.view().empty
    feed(watch, walk[210:220])
    view = watch.view()
    assert view.gone == tuple(range(8)) and view.new == (D - 5, D - 4, D - 3)
    assert view.offset(None) == 0.0


def test_gone_comes_back_with_hysteresis_and_reset_forgets():
    rng = np.random.default_rng(3)
    watch = RadioWatch(baseline(survey(rng)), half_life=200)
    walk = survey(rng, m=400)
    walk[:, :3] = CODE
    feed(watch, walk)
    assert watch.view().gone == (0, 1, 2)
    feed(watch, survey(rng, m=1200))  # heard again as in the survey: back
    assert watch.view().gone == ()
    feed(watch, walk[:100])  # heard above 0.1 e still, and silent over 100 rows: 50 expected, under 60
    assert watch.view().gone == ()
    feed(watch, walk[100:130])  # silent where it was expected 65 times: gone before the counts say it
    assert watch.view().gone == (0, 1, 2)
    watch.reset()
    assert watch.view().empty and watch.seen == 0


def test_never_more_than_the_share_gone():
    rng = np.random.default_rng(4)
    watch = RadioWatch(baseline(survey(rng)), max_gone_share=0.5)
    walk = survey(rng, m=500)
    walk[:, :30] = CODE  # 30 of the 35 heard transmitters silent
    feed(watch, walk)
    assert len(watch.view().gone) == int(0.5 * (D - 5))


@pytest.mark.parametrize("offset", [-8.0, 3.0])
def test_a_device_offset_is_measured_and_kept_per_device(offset):
    rng = np.random.default_rng(5)
    watch = RadioWatch(baseline(survey(rng)))
    plain = survey(rng, m=1000)
    weak = survey(rng, m=600)
    weak = np.where(weak != CODE, weak + offset, CODE)
    feed(watch, plain, device="good")
    feed(watch, weak, device="odd")
    view = watch.view()
    assert view.offset("odd") == pytest.approx(offset, abs=1.0)  # 5 dB noise over 35 x 300 readings: well inside
    assert view.offset("good") == 0.0  # inside the dead band: not corrected
    assert view.offset("unseen") == view.offset(None) == view.offsets[ALL]


def test_apply_takes_the_offset_off_and_masks():
    X = np.array([[-60.0, CODE, -70.0, -50.0]])
    b = baseline(np.array([[-60.0, -60.0, -70.0, CODE]]))
    view = RadioView(gone=(0,), new=(3,), offsets={ALL: 2.0, "a": -4.0})
    out = view.apply(X.copy(), b)
    np.testing.assert_array_equal(out, [[CODE, CODE, -72.0, CODE]])
    np.testing.assert_array_equal(view.apply(X.copy(), b, device="a"), [[CODE, CODE, -66.0, CODE]])


def test_state_round_trip_through_json():
    rng = np.random.default_rng(6)
    b = baseline(survey(rng))
    watch = RadioWatch(b)
    walk = survey(rng, m=500)
    walk[:, :4] = CODE
    feed(watch, walk, device="p")
    again = RadioWatch(b).restore(json.loads(json.dumps(watch.state())))
    assert again.view() == watch.view() and again.seen == watch.seen
    with pytest.raises(InputError, match="the model has 10"):
        RadioWatch(baseline(survey(rng, d=10))).restore(watch.state())


def test_bad_settings_are_refused():
    b = baseline(survey(np.random.default_rng(7), m=50))
    with pytest.raises(InputError, match="half_life"):
        RadioWatch(b, half_life=0)
    with pytest.raises(InputError, match="gone_ratio"):
        RadioWatch(b, gone_ratio=0.5, back_ratio=0.3)


def test_a_transmitter_the_map_heard_at_a_few_positions_only_is_still_new():
    """After a re-survey of a few positions the map hears a new transmitter in a few rows: while the traffic
    hears it four times as often or more, it stays out of the distance; heard as often, it is a survey one."""
    rng = np.random.default_rng(5)
    X = survey(rng)
    X[:10, -1] = -60.0  # ten of the map's 2,000 rows: a re-walked position
    X[:, -2] = np.where(rng.random(len(X)) < 0.4, -65.0, CODE)  # re-surveyed everywhere
    watch = RadioWatch(baseline(X))
    walk = survey(rng, m=600)
    walk[:, -1] = np.where(rng.random(600) < 0.5, -60.0, CODE)
    walk[:, -2] = np.where(rng.random(600) < 0.5, -65.0, CODE)
    feed(watch, walk)
    new = watch.view().new
    assert D - 1 in new and D - 2 not in new


def test_traffic_from_one_corner_makes_no_surveyed_transmitter_new():
    """A transmitter the survey heard in a tenth of its rows, heard by every query of traffic from its corner,
    is the survey's, not new; one the map heard in a few rows only (a re-walked position) still is."""
    rng = np.random.default_rng(9)
    X = survey(rng)
    X[:, 0] = np.where(np.arange(len(X)) < 200, -55.0, CODE)  # one corner's transmitter: 10 % of the rows
    X[:20, -1] = -60.0  # 1 % of the rows: a re-walked position
    watch = RadioWatch(baseline(X))
    walk = survey(rng, m=600)
    walk[:, 0], walk[:, -1] = -55.0, -60.0  # every query from that corner hears both
    feed(watch, walk)
    new = watch.view().new
    assert 0 not in new and D - 1 in new


def corridor(rng, pos, towers, reach=15.0):
    """Rows at ``pos`` along a 100 m corridor: a transmitter at ``towers[j]`` is heard within ``reach`` m,
    at -45 dBm less 1.5 dB a metre, +- 3 dB; else the code."""
    dist = np.abs(pos[:, None] - towers[None, :])
    return np.where(dist < reach, np.round(-45.0 - 1.5 * dist + 3 * rng.standard_normal(dist.shape)), CODE)


def test_traffic_from_one_corner_leaves_the_far_transmitters_alone():
    """Transmitters heard at one end of the site only: traffic that walks the other end does not hear them, and
    matched to where it walks it does not expect them either, so they are not gone; the survey as one profile
    (no positions) expects them at their survey rate and calls them gone. Two dead ones where the traffic
    walks are gone either way."""
    rng = np.random.default_rng(10)
    towers = np.linspace(0.0, 100.0, D)
    spots = np.repeat(np.arange(0.0, 100.5, 2.5), 40)  # 41 surveyed positions, 40 rows each
    X = corridor(rng, spots, towers)
    rssi, unheard = np.ones(D, bool), np.full(D, CODE)
    walk = corridor(rng, rng.uniform(0.0, 30.0, 800), towers)
    walk[:, [3, 5]] = CODE  # two transmitters where the traffic walks are dead
    far = towers > 50.0
    gone = {}
    for name, positions in (("profiles", spots[:, None]), ("one", None)):
        watch = RadioWatch(RadioBaseline.of(X, rssi, unheard, positions=positions))
        feed(watch, walk)
        gone[name] = set(watch.view().gone)
    assert gone["profiles"] == {3, 5}
    assert {3, 5} <= gone["one"] and any(far[j] for j in gone["one"])


def test_a_gone_transmitter_stays_gone_while_the_traffic_walks_elsewhere():
    """Gone where the traffic walked, a transmitter stays gone once the traffic walks where the survey never
    heard it (no evidence either way: the decision does not flicker as the traffic moves), and comes back
    when the traffic returns and hears it."""
    rng = np.random.default_rng(11)
    towers = np.linspace(0.0, 100.0, D)
    spots = np.repeat(np.arange(0.0, 100.5, 2.5), 40)
    watch = RadioWatch(RadioBaseline.of(corridor(rng, spots, towers), np.ones(D, bool), np.full(D, CODE),
                                        positions=spots[:, None]), half_life=200)
    here = corridor(rng, rng.uniform(0.0, 30.0, 600), towers)
    here[:, 3] = np.where(np.arange(600) % 40 == 0, -60.0, CODE)  # heard now and then: under a tenth, not silent
    feed(watch, here)
    assert 3 in watch.view().gone
    for _ in range(4):  # traffic at the far end, over ten half-lives: transmitter 3 is expected there never
        feed(watch, corridor(rng, rng.uniform(70.0, 100.0, 500), towers))
        assert 3 in watch.view().gone
    feed(watch, corridor(rng, rng.uniform(0.0, 30.0, 600), towers))
    assert 3 not in watch.view().gone
