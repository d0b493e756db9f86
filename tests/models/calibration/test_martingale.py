import numpy as np
import pytest

from models.calibration.martingale import BETS, ShiftTest
from models.exceptions import InputError

#: bins from scores the tests never rank (a train part's, in the product)
EDGES = np.quantile(np.random.default_rng(99).normal(size=5000), np.linspace(0, 1, 257)[1:-1])


def test_exchangeable_streams_stay_under_the_bound():
    """200 streams of 500 scores drawn like the calibration's: the alarm rate is at most delta, checked
    one-sided against the binomial (Ville's inequality bounds it by delta = 0.05 here)."""
    from scipy.stats import binom

    delta, alarms, n = 0.05, 0, 200
    for seed in range(n):
        rng = np.random.default_rng(seed)
        test = ShiftTest(rng.normal(size=300), EDGES, delta=delta, seed=seed)
        test.update(rng.normal(size=500))
        alarms += test.alarm
        assert test.queries_ == 500 and test.counts_.sum() == 800
    assert binom.sf(alarms - 1, n, delta) > 0.01, f"{alarms} alarms in {n} streams at delta {delta}"


def test_the_p_values_of_an_exchangeable_stream_are_uniform_even_on_coarse_bins():
    """Binned ranks with smoothed ties stay exactly uniform: 8 bins here, most scores tied."""
    from scipy.stats import kstest

    rng = np.random.default_rng(1)
    coarse = np.quantile(rng.exponential(size=1000), np.linspace(0, 1, 9)[1:-1])
    p = ShiftTest(rng.exponential(size=200), coarse, seed=1).update(rng.exponential(size=3000))
    assert kstest(p, "uniform").pvalue > 0.01


def test_a_batch_is_the_same_test_as_its_queries_one_by_one():
    rng = np.random.default_rng(5)
    cal, stream = rng.normal(size=100), np.concatenate([rng.normal(size=40), rng.normal(1.0, size=40)])
    batch, single = ShiftTest(cal, EDGES, seed=3), ShiftTest(cal, EDGES, seed=3)
    p_batch = batch.update(stream)
    p_single = np.concatenate([single.update(stream[i:i + 1]) for i in range(len(stream))])
    np.testing.assert_allclose(p_batch, p_single, rtol=1e-12)
    assert batch.evidence == pytest.approx(single.evidence, rel=1e-12) and batch.alarm_at_ == single.alarm_at_
    assert np.array_equal(batch.counts_, single.counts_)


def test_a_shifted_stream_raises_the_alarm_and_it_stays():
    rng = np.random.default_rng(2)
    test = ShiftTest(rng.normal(size=300), EDGES, delta=0.01)
    test.update(rng.normal(size=300))  # a typical stretch first: the jumper keeps some capital betting
    assert not test.alarm
    test.update(rng.normal(loc=1.5, size=200))
    assert test.alarm and 300 < test.alarm_at_ <= 500 and test.evidence >= 100
    assert test.summary() == {"evidence": test.evidence, "alarm": True, "queries": 500, "delta": 0.01,
                              "tolerance": 0.075}


@pytest.mark.slow
def test_the_tolerance_lets_a_slightly_less_typical_stream_be_and_keeps_the_bound_for_it():
    """p-values of mean 0.45 (within a tolerance of 0.075): no test alarms more often than delta; without the
    tolerance most do."""
    rng = np.random.default_rng(7)
    alarms = {0.0: 0, 0.075: 0}
    for seed in range(100):
        for tol in alarms:
            test = ShiftTest(rng.normal(size=400), EDGES, delta=0.05, tolerance=tol, seed=seed)
            test.update(rng.normal(loc=0.2, size=2000))  # a mean p-value of about 0.44
            alarms[tol] += test.alarm
    assert alarms[0.075] <= 5 and alarms[0.0] >= 50, alarms
    for p in np.linspace(0, 1, 11):  # every bet's factor is non-negative
        assert min(1 + b * (1 - 2 * 0.3 - 2 * p) for b in ShiftTest(np.ones(2), EDGES, tolerance=0.3).bets) >= 0


def test_more_typical_queries_raise_no_alarm():
    """One-sided: queries closer to the survey than the calibration rows (small scores) are no risk."""
    rng = np.random.default_rng(3)
    test = ShiftTest(rng.normal(size=300), EDGES)
    test.update(rng.normal(loc=-2.0, size=2000))
    assert not test.alarm and test.evidence < 1.0


def test_one_step_by_hand():
    test = ShiftTest(np.array([1.0, 2.0, 3.0]), np.array([1.5, 2.5, 5.0]), jump=0.0, tolerance=0.1)
    p = test.update([10.0])[0]  # above every calibration score, its own bin: p = (0 + u * 1) / 4
    assert 0.0 <= p <= 0.25
    assert test.evidence == pytest.approx(np.mean([1.0 + b / 1.2 * (0.8 - 2.0 * p) for b in BETS]))
    assert test.counts_.tolist() == [1, 1, 1, 1]
    p = test.update([2.2])[0]  # the bin of 2.0: 2 scores above (3, 10), 1 tied: (2 + u * 2) / 5
    assert 0.4 <= p <= 0.8
    assert np.isnan(test.update([np.nan])[0]) and test.queries_ == 2


def test_state_round_trip_and_another_tests_state_is_refused():
    rng = np.random.default_rng(4)
    test = ShiftTest(rng.normal(size=50), EDGES)
    test.update(rng.normal(loc=2.0, size=300))
    again = ShiftTest(rng.normal(size=50), EDGES).restore(test.state())
    assert again.summary() == test.summary() and np.array_equal(again.counts_, test.counts_)
    with pytest.raises(InputError, match="bins"):
        ShiftTest(np.ones(3), EDGES[:10]).restore(test.state())


@pytest.mark.parametrize("kwargs, field", [({"delta": 0.0}, "delta"), ({"delta": 1.0}, "delta"),
                                           ({"delta": True}, "delta"), ({"jump": 1.5}, "jump"),
                                           ({"tolerance": 0.5}, "tolerance"), ({"tolerance": -0.1}, "tolerance"),
                                           ({"calibration": np.array([])}, "calibration"),
                                           ({"calibration": np.array([1.0, np.inf])}, "calibration"),
                                           ({"edges": np.array([1.0, 1.0])}, "edges"),
                                           ({"edges": np.array([])}, "edges")])
def test_bad_parameters_name_the_field(kwargs, field):
    with pytest.raises(InputError) as err:
        ShiftTest(**{"calibration": np.ones(3), "edges": EDGES, **kwargs})
    assert err.value.field == field
