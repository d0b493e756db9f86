import numpy as np
import pytest

from models import registry
from models.exceptions import InputError
from training.calibration.across import centre_folds
from training.calibration.centre_cost import RATES, fit_seconds
from training.pipeline import TrainConfig


def test_every_centre_kind_has_a_rate():
    assert set(registry.CENTRES) - {"stack"} == set(RATES)


@pytest.mark.parametrize("name", sorted(RATES))
def test_the_cost_follows_the_rate_and_grows_with_rows_and_features(name):
    config = TrainConfig()
    rate, power = RATES[name]
    assert fit_seconds(config, name, 1000, 100) == pytest.approx(rate)
    assert fit_seconds(config, name, 1000, 300) == pytest.approx(3 * rate)  # linear in the features
    cap = getattr(config.make_centre(name), "max_rows", None)
    rows = min(cap or 10**9, 8000)
    assert fit_seconds(config, name, rows, 100) == pytest.approx(rate * (rows / 1000) ** power)


def test_a_capped_centre_costs_no_more_beyond_its_cap():
    config = TrainConfig()
    cap = config.make_centre("gp").max_rows
    assert fit_seconds(config, "gp", 10 * cap, 50) == fit_seconds(config, "gp", cap, 50)
    assert fit_seconds(config, "gp", cap // 2, 50) < fit_seconds(config, "gp", cap, 50)
    capped = TrainConfig(centre="gp", centre_params={"max_rows": 500})  # the configured centre's own cap
    assert fit_seconds(capped, "gp", 4000, 50) == pytest.approx(fit_seconds(config, "gp", 500, 50))


def test_a_stack_costs_its_members_once_per_blending_fold_and_once_on_all_rows():
    config = TrainConfig(centre="stack", centre_params={"members": ("knn", "hgb"), "cv": 3})
    members = fit_seconds(config, "knn", 2000, 80) + fit_seconds(config, "hgb", 2000, 80)
    assert fit_seconds(config, "stack", 2000, 80) == pytest.approx(4 * members)


def test_the_fold_count_is_a_function_of_the_data():
    """The same train part makes the same folds, whatever the machine: a boosted centre on a building's
    worth of fingerprints keeps fewer folds than a k-NN one, and more on a small survey."""
    config = TrainConfig()
    big = [centre_folds(16, 20, 5, fit_seconds(config, name, 4700, 520), 60.0)[0] for name in ("knn", "hgb")]
    assert big[0] == 16 and 5 <= big[1] < 16
    small = centre_folds(16, 20, 5, fit_seconds(config, "hgb", 300, 40), 60.0)
    assert small == (16, "one unit per fold (16 units)")
    with pytest.raises(InputError, match="centre must be one of") as err:
        fit_seconds(config, "no such kind", 100, 10)
    assert err.value.field == "centre"


@pytest.mark.slow
def test_a_centre_that_fits_slowly_makes_the_same_folds(monkeypatch):
    """Under cross-fit calibration across units the folds follow the centre's cost, not the clock: a machine
    on which every fit of the centre takes longer than the folds may take makes the same bundle's folds."""
    import time

    from models.centres.knn import KNNCentre
    from tests.training.calibration.test_across import survey
    from training.pipeline import train

    ds = survey(12)
    config = TrainConfig(methods=("ge",), centre="knn", calibrate_across=("PHONEID",), seed=2,
                         across_centre_seconds=0.5)
    quick = train(ds, config)
    fit = KNNCentre.fit

    def slow_fit(self, X, Y):
        time.sleep(0.1)  # longer than 0.5 s over the folds
        return fit(self, X, Y)

    monkeypatch.setattr(KNNCentre, "fit", slow_fit)
    slow = train(ds, config)
    assert slow.centre["centre_folds"] == quick.centre["centre_folds"] == quick.split.across["units"]["train"] > 5
    assert slow.centre["centre_folds_by"] == quick.centre["centre_folds_by"]
    np.testing.assert_array_equal(slow.model.methods["ge"].calibrator_.scores_,
                                  quick.model.methods["ge"].calibrator_.scores_)
