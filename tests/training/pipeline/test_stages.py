import numpy as np
import pytest

from models.exceptions import InputError
from tests.conftest import needs_data
from training.data.datasets import load_dataset
from training.pipeline import TrainConfig, paper_split, train


@pytest.mark.parametrize("m", [60, 372, 768, 1420, 19937])
def test_paper_split_is_81_9_10_and_disjoint(m):
    s = paper_split(m, seed=3)
    assert len(s.test) == int(np.ceil(0.1 * m))
    assert len(s.calibration) == int(np.ceil(0.1 * (m - len(s.test))))
    allrows = np.concatenate([s.train, s.calibration, s.test])
    assert len(np.unique(allrows)) == m
    assert not np.array_equal(paper_split(m, 4).test, s.test)


def test_scaler_is_fitted_on_train_rows_only(trained_synthetic):
    result, ds = trained_synthetic
    np.testing.assert_allclose(result.model.scaler_mean, ds.X[result.split.train].mean(axis=0))
    assert not np.allclose(result.model.scaler_mean, ds.X.mean(axis=0), rtol=0, atol=1e-9)


def test_lmve_never_sees_calibration_rows(trained_synthetic):
    result, _ = trained_synthetic
    nle = result.model.methods["nle"].shape_
    assert nle.X_ref_.shape[0] == len(result.split.train)


def test_unknown_method_is_refused():
    ds = load_dataset("synthetic", n_samples=200)
    with pytest.raises(InputError, match="method must be one of ge, nle, lmve, ball, copula; got 'magic'"):
        train(ds, TrainConfig(methods=("ge", "magic")))


@pytest.mark.slow
@needs_data
def test_enb_short_budget_coverage_is_near_eta():
    ds = load_dataset("enb")
    cover = []
    for seed in range(3):
        r = train(ds, TrainConfig(seed=seed, methods=("ge", "nle", "lmve"),
                                  method_params={"lmve": {"max_steps": 300, "eval_every": 25, "patience": 4}}))
        cover.append([r.metrics[m]["coverage"] for m in ("ge", "nle", "lmve")])
    # 77 test rows per split: one split's sd is ~3.5 points; the mean over 3 splits and 3 methods
    assert abs(np.mean(cover) - 0.9) < 0.05, cover


def test_cross_fit_residuals_are_out_of_fold_and_the_served_centre_is_the_full_one():
    from sklearn.model_selection import KFold

    from models.centres import SVRCentre
    from sklearn.preprocessing import StandardScaler
    from training.pipeline import out_of_fold_centers

    ds = load_dataset("synthetic", n_samples=300)
    config = TrainConfig(seed=2, methods=("ge",), cross_fit=3, use_groups=False)  # row folds
    X, Y = ds.X[:120], ds.Y[:120]
    oof = out_of_fold_centers(X, Y, config, 3)
    for rest, fold in KFold(3, shuffle=True, random_state=2).split(X):
        np.testing.assert_allclose(oof[fold], SVRCentre().fit(X[rest], Y[rest]).predict(X[fold]))
    # out-of-fold residuals are larger than the full centre's in-sample ones
    full = SVRCentre().fit(X, Y).predict(X)
    assert np.mean((Y - oof) ** 2) > np.mean((Y - full) ** 2)

    result = train(ds, config)
    Xs = StandardScaler().fit(ds.X[result.split.train]).transform(ds.X)
    served = result.model.methods["ge"].centre_
    np.testing.assert_allclose(served.predict(Xs[result.split.test]),
                               SVRCentre().fit(Xs[result.split.train], ds.Y[result.split.train])
                               .predict(Xs[result.split.test]))
    # GE's shape is the second moment of the out-of-fold residuals, not of the in-sample ones
    oof_train = out_of_fold_centers(Xs[result.split.train], ds.Y[result.split.train], config, 3)
    R = ds.Y[result.split.train] - oof_train
    np.testing.assert_allclose(result.model.methods["ge"].shape_.predict_shape(Xs[:1])[0], R.T @ R / len(R),
                               rtol=1e-10)


@pytest.mark.parametrize("k", [1, -2, 10_000])
def test_cross_fit_fold_count_is_checked(k):
    ds = load_dataset("synthetic", n_samples=200)
    with pytest.raises(InputError, match=f"cross_fit must be 0 \\(off\\) or a fold count in \\[2, \\d+\\]; got {k}"):
        train(ds, TrainConfig(methods=("ge",), cross_fit=k))


@pytest.mark.parametrize(("n_groups", "seed"), [(12, 0), (28, 1), (40, 2), (200, 3)])
def test_group_split_moves_whole_groups_into_calibration_only_when_the_level_needs_them(n_groups, seed):
    from training.pipeline import group_split

    sizes = np.random.default_rng(seed).integers(3, 15, size=n_groups)
    groups = np.repeat(np.arange(n_groups), sizes)
    plain, split = group_split(groups, seed), group_split(groups, seed, coverage=0.9)
    parts = [set(groups[p]) for p in (split.train, split.calibration, split.test)]
    assert not (parts[0] & parts[1] or parts[0] & parts[2] or parts[1] & parts[2])
    assert sum(map(len, parts)) == n_groups and len(split.train) + len(split.calibration) + len(split.test) == len(groups)
    assert plain.adjustment is None
    if len(set(groups[plain.calibration])) >= 9:  # enough already: the same split
        assert split.adjustment is None and np.array_equal(split.calibration, plain.calibration)
    else:
        adj = split.adjustment
        assert len(parts[1]) == 9 and len(parts[0]) >= 2 and len(parts[2]) >= 1
        assert set(groups[plain.calibration]) <= parts[1]  # the default's calibration groups stay
        assert adj["groups"] == {"train": len(parts[0]), "calibration": 9, "test": len(parts[2])}
        assert adj["train_rows"] == len(split.train) and adj["train_rows_before"] == len(plain.train)


def test_default_cross_fit_never_asks_more_folds_than_training_groups():
    from training.pipeline import TrainConfig

    config = TrainConfig()
    assert [config.resolved_cross_fit(True, n) for n in (None, 2, 3, 5, 16)] == [5, 2, 3, 5, 5]
    assert TrainConfig(cross_fit=4).resolved_cross_fit(True, 2) == 4  # an explicit value is checked, not changed


def test_typicality_is_fitted_on_train_rows_and_calibrated_on_the_calibration_rows(trained_synthetic):
    from models.typicality import Typicality

    result, ds = trained_synthetic
    typ, split = result.model.typicality, result.split
    Xs = result.model.standardise(ds.X)
    again = Typicality(seed=0).fit(Xs[split.train]).calibrate(Xs[split.calibration])
    np.testing.assert_allclose(typ.calibration_, again.calibration_, rtol=1e-12)
    np.testing.assert_allclose(typ.mean_, Xs[split.train].mean(axis=0), atol=1e-9)  # the train part's projection
    assert len(typ.calibration_) == len(split.calibration) and "typicality" in result.stages
    p = typ.p_values(Xs[split.test])  # held-out rows of the same survey look typical
    assert 0.35 < p.mean() < 0.65


def test_across_units_a_calibration_row_is_scored_without_its_unit():
    from tests.training.calibration.test_across import survey
    from training.calibration.across import unit_codes

    ds = survey(8)
    result = train(ds, TrainConfig(seed=0, methods=("ge",), centre="knn", calibrate_across=("PHONEID",)))
    typ, split = result.model.typicality, result.split
    units = unit_codes(ds, ["PHONEID"])
    Xs = result.model.standardise(ds.X)
    np.testing.assert_allclose(typ.calibration_, np.sort(typ.scores(Xs[split.calibration], units[split.calibration])),
                               rtol=1e-12)
    assert np.sort(typ.scores(Xs[split.calibration])).mean() < typ.calibration_.mean()  # its own phone left out
    assert set(np.unique(typ.reference_groups_)) <= set(units[split.train])
    off = train(ds, TrainConfig(seed=0, methods=("ge",), centre="knn", typicality=False))
    assert off.model.typicality is None and "typicality" not in off.stages
