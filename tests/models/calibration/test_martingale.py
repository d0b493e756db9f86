import numpy as np
import pytest

from models.calibration.martingale import BETS, ShiftTest
from models.exceptions import InputError


def test_exchangeable_streams_stay_under_the_bound():
    """200 streams of 500 scores drawn like the calibration's: the alarm rate is at most delta, checked
    one-sided against the binomial (Ville's inequality bounds it by delta = 0.05 here)."""
    from scipy.stats import binom

    delta, alarms, n = 0.05, 0, 200
    for seed in range(n):
        rng = np.random.default_rng(seed)
        test = ShiftTest(rng.normal(size=300), delta=delta, seed=seed)
        test.update(rng.normal(size=500))
        alarms += test.alarm
        assert test.queries_ == 500 and len(test.bag_) == 800
    assert binom.sf(alarms - 1, n, delta) > 0.01, f"{alarms} alarms in {n} streams at delta {delta}"


def test_the_p_values_of_an_exchangeable_stream_are_uniform():
    from scipy.stats import kstest

    rng = np.random.default_rng(1)
    p = ShiftTest(rng.exponential(size=200), seed=1).update(rng.exponential(size=3000))
    assert kstest(p, "uniform").pvalue > 0.01


def test_a_shifted_stream_raises_the_alarm_and_it_stays():
    rng = np.random.default_rng(2)
    test = ShiftTest(rng.normal(size=300), delta=0.01)
    test.update(rng.normal(size=300))  # a typical stretch first: the jumper keeps some capital betting
    assert not test.alarm
    test.update(rng.normal(loc=1.5, size=200))
    assert test.alarm and 300 < test.alarm_at_ <= 500 and test.evidence >= 100
    assert test.summary() == {"evidence": test.evidence, "alarm": True, "queries": 500, "delta": 0.01}


def test_more_typical_queries_raise_no_alarm():
    """One-sided: queries closer to the survey than the calibration rows (small scores) are no risk."""
    rng = np.random.default_rng(3)
    test = ShiftTest(rng.normal(size=300))
    test.update(rng.normal(loc=-2.0, size=2000))
    assert not test.alarm and test.evidence < 1.0


def test_one_step_by_hand():
    test = ShiftTest(np.array([1.0, 2.0, 3.0]), jump=0.0)
    p = test.update([10.0])[0]  # above every calibration score: p = (0 + u * 1) / 4
    assert 0.0 <= p <= 0.25
    assert test.evidence == pytest.approx(np.mean([1.0 + b * (1.0 - 2.0 * p) for b in BETS]))
    assert list(test.bag_) == [1.0, 2.0, 3.0, 10.0]
    assert np.isnan(test.update([np.nan])[0]) and test.queries_ == 1


@pytest.mark.parametrize("kwargs, field", [({"delta": 0.0}, "delta"), ({"delta": 1.0}, "delta"),
                                           ({"delta": True}, "delta"), ({"jump": 1.5}, "jump"),
                                           ({"calibration": np.array([])}, "calibration"),
                                           ({"calibration": np.array([1.0, np.inf])}, "calibration")])
def test_bad_parameters_name_the_field(kwargs, field):
    with pytest.raises(InputError) as err:
        ShiftTest(**{"calibration": np.ones(3), **kwargs})
    assert err.value.field == field
