"""centre="auto" and the RSSI step in the training pipeline, and their CLI flags."""

import json

import numpy as np
import pytest

from models.bundle import load_bundle
from training.commands.train import main
from training.data.datasets import Dataset
from training.pipeline import TrainConfig, centre_errors, out_of_fold_centers, train


def fingerprints(m: int = 600, seed: int = 0) -> Dataset:
    """RSSI of 8 transmitters with a +100 'not detected' code; positions on a 20 m square."""
    rng = np.random.default_rng(seed)
    P = rng.uniform(0, 20, size=(m, 2))
    B = rng.uniform(0, 20, size=(8, 2))
    dist = np.linalg.norm(P[:, None] - B[None], axis=2) + 0.5
    X = -40 - 25 * np.log10(dist) + rng.normal(0, 2, size=dist.shape)
    X = np.where(X < -70, 100.0, np.round(X))
    names = [f"WAP{i:03d}" for i in range(8)]
    return Dataset("fp", X, P, names, ["x", "y"], sha256="0" * 64)


@pytest.mark.slow
def test_auto_centre_picks_the_smallest_cross_validated_error_and_says_so():
    ds = fingerprints()
    config = TrainConfig(centre="auto", methods=("ge", "nle"), rssi="auto", seed=1)
    result = train(ds, config)
    cv = result.centre["cv"]
    assert set(cv) == set(config.centre_candidates)
    assert result.centre["name"] == min(cv, key=lambda n: cv[n]["rmse"])
    # the recorded error is the candidate's 5-fold out-of-fold error on the train part
    from training.pipeline.stages import RSSIFloor  # the step the pipeline fitted
    from sklearn.preprocessing import StandardScaler

    tr = result.split.train
    X = RSSIFloor().fit(ds.X[tr]).transform(ds.X[tr])
    Xs = StandardScaler().fit(X).transform(X)
    oof = out_of_fold_centers(Xs, ds.Y[tr], config, 5, name="knn")
    assert np.isclose(cv["knn"]["rmse"], centre_errors(ds.Y[tr], oof)["rmse"])
    kinds = {"knn": "KNNCentre", "hgb": "HGBCentre", "stack": "StackCentre", "paper": "SVRCentre", "scaled": "SVRCentre",
             "fingerprint": "FingerprintCentre", "gp": "GPCentre"}
    assert type(result.model.centre).__name__ == kinds[result.centre["name"]]


def test_rssi_step_is_applied_at_serving_and_stored(tmp_path):
    ds = fingerprints()
    result = train(ds, TrainConfig(centre="knn", methods=("ge",), rssi="auto"))
    model = result.model
    assert model.preprocess is not None and model.preprocess.columns_.size == 8
    from models.bundle import save_bundle

    save_bundle(model, tmp_path / "b")
    loaded = load_bundle(tmp_path / "b")
    assert loaded.manifest["preprocess"]["type"] == "RSSIFloor"
    Q = ds.X[:20]
    np.testing.assert_array_equal(loaded.predict_center(Q), model.predict_center(Q))
    # a 'not detected' code and the floor value are the same reading to the served model
    floored = np.where(Q == 100.0, model.preprocess.floor_, Q)
    np.testing.assert_array_equal(loaded.predict_center(floored), loaded.predict_center(Q))


def _write_csv(path, ds):
    lines = [",".join([*ds.feature_names, "x", "y"])]
    lines += [",".join(f"{v:g}" for v in [*x, *y]) for x, y in zip(ds.X, ds.Y)]
    path.write_text("\n".join(lines) + "\n")


@pytest.mark.slow
def test_cli_reports_the_centre_choice_and_the_rssi_step(tmp_path, capsys):
    csv = tmp_path / "fp.csv"
    _write_csv(csv, fingerprints())
    out = tmp_path / "run"
    assert main(["--csv", str(csv), "--targets", "x,y", "--methods", "ge", "--out", str(out), "--quiet",
                 "--groups", "none"]) == 0
    printed = capsys.readouterr().out
    assert "centre: " in printed and "CV RMSE" in printed
    assert "8 of 8 columns are RSSI" in printed and "(most often 100)" in printed
    manifest = json.loads((out / "bundle" / "manifest.json").read_text())
    assert set(manifest["training"]["centre"]["cv"]) == {"paper", "scaled", "knn", "fingerprint", "hgb", "gp"}
    report = (out / "report.md").read_text()
    assert "- centre: " in report and "- RSSI preprocessing: 8 of 8 columns" in report


def test_cli_rssi_flag_errors_write_nothing(tmp_path, capsys):
    csv = tmp_path / "fp.csv"
    _write_csv(csv, fingerprints())
    out = tmp_path / "run"
    assert main(["--csv", str(csv), "--targets", "x,y", "--out", str(out), "--quiet", "--no-rssi",
                 "--not-detected", "100"]) == 2
    assert "--no-rssi turns the RSSI step off" in capsys.readouterr().err
    assert main(["--csv", str(csv), "--targets", "x,y", "--out", str(out), "--quiet", "--not-detected", "-999"]) == 2
    assert "--not-detected -999: no column holds" in capsys.readouterr().err
    assert main(["--csv", str(csv), "--targets", "x,y", "--out", str(out), "--quiet", "--rssi-floor", "-50"]) == 2
    assert "--rssi-floor must lie below the weakest real reading" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.slow
def test_cli_centre_candidates_choose_among_the_named_ones_and_bad_names_write_nothing(tmp_path, capsys):
    csv = tmp_path / "fp.csv"
    _write_csv(csv, fingerprints())
    out = tmp_path / "run"
    assert main(["--csv", str(csv), "--targets", "x,y", "--out", str(out), "--quiet", "--centre-candidates",
                 "knn,svm"]) == 2
    assert "--centre-candidates: unknown centre 'svm'" in capsys.readouterr().err
    assert main(["--csv", str(csv), "--targets", "x,y", "--out", str(out), "--quiet", "--centre", "knn",
                 "--centre-candidates", "knn,hgb"]) == 2
    assert "--centre-candidates is for --centre auto" in capsys.readouterr().err
    assert not out.exists()
    assert main(["--csv", str(csv), "--targets", "x,y", "--methods", "ge", "--out", str(out), "--quiet",
                 "--groups", "none", "--centre-candidates", "knn,hgb"]) == 0
    manifest = json.loads((out / "bundle" / "manifest.json").read_text())
    assert set(manifest["training"]["centre"]["cv"]) == {"knn", "hgb"}
    assert manifest["centre"]["type"] in ("KNNCentre", "HGBCentre")


@pytest.mark.slow
def test_auto_centre_stacks_complementary_candidates_with_an_honest_error(tmp_path):
    """One target is smooth (the SVR's), the other a step (the trees'): the per-target blend beats
    both, its recorded error is its nested out-of-fold one, and the bundle stores the blend."""
    from models.centres.stack import fold_splits, stacked_out_of_fold
    from sklearn.preprocessing import StandardScaler

    rng = np.random.default_rng(5)
    X = rng.normal(size=(500, 8))
    Y = np.column_stack([X.sum(axis=1), 3.0 * (X[:, 2] > 0) + 0.05 * rng.normal(size=500)])
    ds = Dataset("two-kinds", X, Y, [f"x{i}" for i in range(8)], ["y1", "y2"], sha256="0" * 64)
    config = TrainConfig(centre="auto", centre_candidates=("scaled", "hgb", "stack"), methods=("ge",), seed=2)
    result = train(ds, config)
    cv = result.centre["cv"]
    assert result.centre["name"] == "stack" and cv["stack"]["rmse"] < 0.8 * min(cv["scaled"]["rmse"], cv["hgb"]["rmse"])
    w = cv["stack"]["weights"]
    assert w["scaled"][0] > w["hgb"][0] and w["hgb"][1] > w["scaled"][1]  # each target leans on its own member
    tr = result.split.train
    Xs = StandardScaler().fit(X[tr]).transform(X[tr])
    preds = [out_of_fold_centers(Xs, Y[tr], config, 5, name=n) for n in ("scaled", "hgb")]
    honest = stacked_out_of_fold(preds, Y[tr], fold_splits(len(tr), 5, config.seed))
    assert np.isclose(cv["stack"]["rmse"], centre_errors(Y[tr], honest)["rmse"])
    assert type(result.model.centre).__name__ == "StackCentre"
    from models.bundle import save_bundle

    save_bundle(result.model, tmp_path / "b")
    again = load_bundle(tmp_path / "b")
    np.testing.assert_array_equal(again.predict_center(X[:30]), result.model.predict_center(X[:30]))


def test_forced_stack_learns_shapes_from_its_nested_out_of_fold_centres():
    """``centre="stack"``: the members' out-of-fold centres are computed once; they weight the blend,
    record every member's error, and give the shapes' residuals (the nested blend, not a whole blend
    refitted per fold)."""
    from models.shapes.base import second_moment
    from models.centres.stack import fold_splits, stacked_out_of_fold
    from sklearn.preprocessing import StandardScaler

    rng = np.random.default_rng(6)
    X = rng.normal(size=(300, 6))
    Y = np.column_stack([X.sum(axis=1), 2.0 * (X[:, 1] > 0)]) + 0.1 * rng.normal(size=(300, 2))
    ds = Dataset("two-kinds", X, Y, [f"x{i}" for i in range(6)], ["y1", "y2"], sha256="0" * 64)
    config = TrainConfig(centre="stack", centre_params={"members": ("scaled", "knn")}, methods=("ge",), seed=3)
    result = train(ds, config)
    assert result.centre["name"] == "stack" and set(result.centre["cv"]) == {"scaled", "knn", "stack"}
    assert result.centre["cross_fit"] == 5
    tr = result.split.train
    Xs = StandardScaler().fit(X[tr]).transform(X[tr])
    preds = [out_of_fold_centers(Xs, Y[tr], config, 5, name=n) for n in ("scaled", "knn")]
    nested = stacked_out_of_fold(preds, Y[tr], fold_splits(len(tr), 5, config.seed))
    assert np.isclose(result.centre["cv"]["stack"]["rmse"], centre_errors(Y[tr], nested)["rmse"])
    np.testing.assert_allclose(result.model.methods["ge"].shape_.covariance_, second_moment(Y[tr] - nested),
                               rtol=1e-9)


def test_stack_needs_two_other_candidates_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "run"
    for candidates in ("stack", "knn,stack"):
        assert main(["--dataset", "synthetic", "--n-samples", "1000", "--methods", "ge", "--out", str(out),
                     "--quiet", "--centre-candidates", candidates]) == 2
        err = capsys.readouterr().err
        assert "the candidate stack blends the other candidates, so it needs at least two of them" in err
        assert not out.exists()


@pytest.mark.slow
def test_quantile_criterion_chooses_the_smallest_error_at_the_coverage_level(tmp_path, capsys):
    """--centre-criterion quantile: every candidate's recorded out-of-fold error quantile at the run's
    coverage is recomputable, the choice is the smallest one, the report says so; the flag with a
    forced centre or an unknown criterion is refused before anything is written."""
    from models.exceptions import InputError

    ds = fingerprints()
    config = TrainConfig(centre="auto", methods=("ge",), rssi="auto", seed=1, coverage=0.8,
                         centre_candidates=("scaled", "knn"), centre_criterion="quantile")
    result = train(ds, config)
    cv = result.centre["cv"]
    assert result.centre["criterion"] == "quantile" and "quantile at the coverage level" in result.centre["selected_by"]
    assert result.centre["name"] == min(cv, key=lambda n: cv[n]["quantile"])
    from sklearn.preprocessing import StandardScaler

    from training.pipeline import RSSIFloor

    tr = result.split.train
    X = RSSIFloor().fit(ds.X[tr]).transform(ds.X[tr])
    Xs = StandardScaler().fit(X).transform(X)
    for name in ("scaled", "knn"):
        e = np.linalg.norm(ds.Y[tr] - out_of_fold_centers(Xs, ds.Y[tr], config, 5, name=name), axis=1)
        assert np.isclose(cv[name]["quantile"], np.quantile(e, 0.8))
    with pytest.raises(InputError) as err:
        train(ds, TrainConfig(centre="auto", methods=("ge",), centre_criterion="mae"))
    assert err.value.field == "centre_criterion"

    csv = tmp_path / "fp.csv"
    _write_csv(csv, ds)
    out = tmp_path / "run"
    assert main(["--csv", str(csv), "--targets", "x,y", "--out", str(out), "--quiet", "--centre", "knn",
                 "--centre-criterion", "quantile"]) == 2
    assert "--centre-criterion is for --centre auto" in capsys.readouterr().err
    assert not out.exists()
    assert main(["--csv", str(csv), "--targets", "x,y", "--methods", "ge", "--out", str(out), "--quiet",
                 "--groups", "none", "--centre-candidates", "scaled,knn", "--centre-criterion", "quantile"]) == 0
    assert "CV quantile at the coverage level" in capsys.readouterr().out
    manifest = json.loads((out / "bundle" / "manifest.json").read_text())
    assert manifest["training"]["centre"]["criterion"] == "quantile"


def test_the_fingerprint_centre_is_chosen_once_by_the_runs_units_and_every_fit_searches_that(tmp_path):
    """Across phones, the train part's phones decide the representation and k (the search leaves each out), once:
    the unit folds and the served centre fit that configuration without a search of their own, and the bundle
    answers as the run did."""
    from models.bundle import save_bundle
    from models.centres.fingerprint import tune
    from models.centres.representations import ReadingSpace
    from tests.training.calibration.test_across import offset_survey

    ds = offset_survey(n_devices=8, offset_sd_db=8.0)
    config = TrainConfig(methods=("ge", "nle"), centre="fingerprint", rssi="auto", calibrate_across=("PHONEID",),
                         primary_folds=0)
    result = train(ds, config)
    record, centre = result.centre["fingerprint"], result.model.centre
    train_rows = result.split.train
    space = ReadingSpace.of(result.model.preprocess, type("S", (), {"mean_": result.model.scaler_mean,
                                                                     "scale_": result.model.scaler_scale}))
    Xs = result.model.standardise(ds.X[train_rows])
    by_hand = tune(space.readings(Xs), ds.Y[train_rows], ds.meta["PHONEID"][train_rows], space.floor, space.weakest,
                   space.reference, {k: "auto" for k in ("representation", "cutoff_db", "n_neighbors", "weights")})
    assert record["chosen"] == by_hand["chosen"] == centre.chosen_ and record["held_out"] == "each unit"
    assert record["units"] == len(np.unique(ds.meta["PHONEID"][train_rows]))
    assert record["best"][0]["error"] <= record["textbook"]  # the textbook is a candidate
    rule = record["rule"]
    if record["chosen"]["representation"] != rule["lowest"]["representation"]:  # dbm kept within a standard error
        assert record["chosen"]["representation"] == "dbm" and rule["difference"] <= rule["standard_error"]
    assert centre.tuning_["candidates"][0] == by_hand["candidates"][0]
    save_bundle(result.model, tmp_path / "b")
    served = load_bundle(tmp_path / "b")
    Q = ds.X  # no test part across units: every row
    np.testing.assert_array_equal(served.predict_center(Q), result.model.predict_center(Q))
    assert served.centre.chosen_ == centre.chosen_


def test_every_fingerprint_fit_of_a_run_gets_the_chosen_configuration():
    from dataclasses import replace

    from models.centres.representations import ReadingSpace

    space = ReadingSpace(np.arange(3), np.zeros(3), np.ones(3), -100.0, -95.0)
    chosen = {"representation": "powed", "cutoff_db": 4.0, "n_neighbors": 7, "weights": "uniform"}
    config = replace(TrainConfig(centre="auto"), centre_context={"fingerprint": {"space": space, **chosen}})
    made = config.make_centre("fingerprint")
    assert made.space is space and {k: getattr(made, k) for k in chosen} == chosen
    assert TrainConfig().make_centre("fingerprint").representation == "auto"  # a user's config: nothing fixed
    assert "centre_context" not in repr(config) and config == replace(config, centre_context={})
