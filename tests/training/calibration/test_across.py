"""--calibrate-across (training.calibration.across): whole units out of training, the stated guarantee, the errors."""

import json
from dataclasses import replace

import httpx
import numpy as np
import pytest

from models.exceptions import InputError
from training.data import synthetic
from training.calibration.across import UnitCrossFit, across_split, centre_folds, unit_codes
from training.commands.train import main
from training.data.datasets import Dataset, group_by_position, load_csv
from training.pipeline import TrainConfig, train
from training.commands.train_report import centre_line


def survey(n_devices: int, n_points: int = 120, readings: int = 10, seed: int = 0) -> Dataset:
    """A survey whose readings carry a phone (``device``) and a user (two users share each phone)."""
    X, Y, _, device, fn, tn = synthetic.make_survey(n_points=n_points, readings=readings, n_devices=n_devices,
                                                     seed=seed)
    user = 2 * device + np.random.default_rng(seed).integers(0, 2, size=device.size)
    return group_by_position(Dataset("survey", X, Y, fn, tn, "x", meta={"PHONEID": device, "USERID": user}))


def shared(ds, column, a, b) -> np.ndarray:
    return np.intersect1d(ds.meta[column][a], ds.meta[column][b])


@pytest.mark.parametrize("columns", [["PHONEID"], ["USERID"], ["PHONEID", "USERID"]])
@pytest.mark.parametrize("seed", [0, 1])
def test_held_out_units_and_positions_stay_out_of_training(columns, seed):
    ds = survey(12)
    split = across_split(ds, columns, seed, 0.9, mode="held-out")
    parts = (split.train, split.calibration, split.test)
    assert not np.intersect1d(split.train, split.calibration).size and not np.intersect1d(split.train, split.test).size
    assert not np.intersect1d(split.calibration, split.test).size
    for held in (split.calibration, split.test):
        for c in columns:  # no value of any named column is shared with training
            assert not shared(ds, c, held, split.train).size, c
        assert not np.intersect1d(ds.groups[held], ds.groups[split.train]).size  # nor a position
    codes = unit_codes(ds, columns)
    assert not np.intersect1d(codes[split.calibration], codes[split.test]).size  # units: one part each
    a = split.across
    assert a["units"] == {"test": len(np.unique(codes[split.test])), "calibration": len(np.unique(codes[split.calibration])),
                          "train": len(np.unique(codes[split.train]))}
    assert a["rows"]["set_aside"] == len(ds.Y) - sum(map(len, parts)) > 0
    if columns == ["PHONEID", "USERID"]:  # a held-out user's phone leaves training with all its users
        assert not shared(ds, "PHONEID", split.calibration, split.train).size


@pytest.mark.parametrize("columns", [["PHONEID"], ["USERID"], ["PHONEID", "USERID"]])
@pytest.mark.parametrize("seed", [0, 1])
def test_cross_fit_calibrates_every_unit_at_positions_out_of_training(columns, seed):
    ds = survey(12)
    split = across_split(ds, columns, seed, 0.9)
    assert split.across["mode"] == "cross-fit"
    codes = unit_codes(ds, columns)
    assert not len(split.test) and not np.intersect1d(split.train, split.calibration).size
    # calibration at positions out of training; every row is one or the other (nothing set aside)
    assert not np.intersect1d(ds.groups[split.calibration], ds.groups[split.train]).size
    assert len(split.train) + len(split.calibration) == len(ds.Y) and split.across["rows"]["set_aside"] == 0
    # every unit trains and calibrates (each scored by a model of its unit fold)
    assert set(codes[split.calibration]) == set(codes[split.train]) == set(codes)
    a = split.across
    assert a["units"] == {"test": 0, "calibration": len(set(codes)), "train": len(set(codes))}
    assert (a["rule"], a["exact"], a["folds"]) == ("group-weighted", False, 5)
    held_out = across_split(ds, columns, seed, 0.9, mode="held-out").across
    assert a["units"]["calibration"] > held_out["units"]["calibration"]
    # a test part only when asked for: then its units share no value with the other parts
    tested = across_split(ds, columns, seed, 0.9, test_fraction=0.1)
    assert len(tested.test) and tested.across["units"]["test"] >= 1
    for c in columns:
        assert not shared(ds, c, tested.test, tested.train).size
        assert not shared(ds, c, tested.test, tested.calibration).size


def test_without_groups_cross_fit_calibrates_on_the_training_rows():
    ds = replace(survey(8), groups=None, grouping={})
    split = across_split(ds, ["PHONEID"], 0, 0.9)
    assert np.array_equal(split.calibration, split.train) and split.across["held_out_groups"] is None
    assert np.array_equal(split.train, np.arange(len(ds.Y))) and not len(split.test)
    assert "at groups" not in split.across["guarantee"]


def test_without_groups_every_other_unit_trains():
    ds = replace(survey(8), groups=None, grouping={})
    split = across_split(ds, ["PHONEID"], 0, 0.9, mode="held-out")
    assert split.across["rows"]["set_aside"] == 0 and split.across["held_out_groups"] is None
    assert len(split.train) + len(split.calibration) + len(split.test) == len(ds.Y)
    assert "at a" not in split.across["guarantee"]


def test_guarantee_is_exact_with_enough_units_and_approximate_below():
    few, many = (across_split(ds, ["PHONEID"], 0, 0.9, mode="held-out") for ds in (survey(12), survey(150, 200)))
    assert few.across["units"]["calibration"] < 9 <= many.across["units"]["calibration"]
    assert (few.across["rule"], few.across["exact"]) == ("group-weighted", False)
    assert (many.across["rule"], many.across["exact"]) == ("group-subsample", True)
    assert few.across["guarantee"].startswith("P ~ 0.9 (approximate) for a reading from a new PHONEID unit at a "
                                              "position not in the training data")
    assert f"on {few.across['units']['calibration']} PHONEID units" in few.across["guarantee"]
    assert "the exact form needs 9 calibration units" in few.across["guarantee"]
    assert many.across["guarantee"].startswith("P >= 0.9 (exact)")
    # the level decides: at 0.5 one calibration unit fewer than 9 is plenty (m / (m + 1) >= 0.5 needs 1)
    assert across_split(survey(12), ["PHONEID"], 0, 0.5, mode="held-out").across["rule"] == "group-subsample"
    # cross-fitted scores come from the fold models, not the served one: approximate however many units
    cross = across_split(survey(150, 200), ["PHONEID"], 0, 0.9).across
    assert cross["units"]["calibration"] >= 9 and (cross["rule"], cross["exact"]) == ("group-weighted", False)
    assert cross["guarantee"].startswith("P ~ 0.9 (approximate) for a reading from a new PHONEID unit at a position "
                                         f"not in the training data: calibrated on all {cross['units']['calibration']} "
                                         "PHONEID units, each scored at groups out of training by a model fitted "
                                         "without it")
    assert "(5 unit folds, cross-conformal)" in cross["guarantee"]
    assert cross["guarantee"].endswith("the served model is fitted on all of them")
    with pytest.raises(InputError, match="the across mode must be one of cross-fit, held-out; got 'both'"):
        across_split(survey(12), ["PHONEID"], 0, 0.9, mode="both")


def test_unit_cross_fit_predicts_each_row_from_a_model_without_its_unit():
    from sklearn.neighbors import KNeighborsRegressor

    rng = np.random.default_rng(0)
    phone, user = np.repeat(np.arange(8), 30), np.repeat(np.arange(8) % 5, 30)  # users 0-2 have two phones
    units = np.unique(np.column_stack([phone, user]), axis=0, return_inverse=True)[1].ravel()
    X = np.column_stack([100.0 * phone + rng.normal(size=phone.size), rng.normal(size=phone.size)])
    Y = np.column_stack([phone, user]).astype(float)  # a 1-NN centre returns its neighbour's phone and user
    rows = np.arange(phone.size)
    train, score = rows[rows % 3 != 0], rows[rows % 3 == 0]
    one_nn = KNeighborsRegressor(n_neighbors=1)
    assert (one_nn.fit(X[train], Y[train]).predict(X[score])[:, 0] == phone[score]).all()  # in-sample: its own
    cf = UnitCrossFit(4, seed=0).fit(lambda: KNeighborsRegressor(n_neighbors=1), X, Y, train, score, units)
    assert (cf.train_centres_[:, 0] != phone[train]).all() and (cf.score_centres_[:, 0] != phone[score]).all()
    assert len(cf.folds_) == 4 and sorted(np.concatenate([f for _, f, _ in cf.folds_])) == list(range(len(train)))
    assert not np.isnan(cf.score_centres_).any()
    # the centres fold one unit at a time (the shapes keep 4 folds): a row's nearest other phone is next
    # to its own (X ~ 100 * phone), which a centre missing a quarter of the phones often lacks
    assert cf.centre_folds_ == 8
    assert (np.abs(cf.train_centres_[:, 0] - phone[train]) == 1).all()
    assert (np.abs(cf.score_centres_[:, 0] - phone[score]) == 1).all()
    coarse = UnitCrossFit(4, seed=0, centre_k=2).fit(lambda: KNeighborsRegressor(n_neighbors=1), X, Y, train, score,
                                                     units)
    assert coarse.centre_folds_ == 2 and (np.abs(coarse.train_centres_[:, 0] - phone[train]) > 1).any()
    for bad in (1, 2.5, True, "units"):
        with pytest.raises(InputError, match="the centre's unit folds must be an integer >= 2") as err:
            UnitCrossFit(4, centre_k=bad).fit(lambda: KNeighborsRegressor(n_neighbors=1), X, Y, train, score, units)
        assert err.value.field == "across_centre_folds"
    # the client's own centres: nothing fitted, every row keeps its own
    own = UnitCrossFit(4, seed=0).fit(None, X, Y, train, score, units, centres=Y + 0.5)
    assert own.centre_folds_ == 0 and (own.train_centres_ == Y[train] + 0.5).all()
    assert (own.score_centres_ == Y[score] + 0.5).all() and len(own.folds_) == 4
    # with both columns, a fold's model also leaves out the other phone of a held-out phone's user
    meta = {"PHONEID": phone, "USERID": user}
    cf = UnitCrossFit(4, seed=0).fit(lambda: KNeighborsRegressor(n_neighbors=1), X, Y, train, score, units, meta=meta,
                                     columns=("PHONEID", "USERID"))
    assert (cf.score_centres_[:, 1] != user[score]).all() and (cf.train_centres_[:, 1] != user[train]).all()
    # a unit with no training row has no fold: its rows stay NaN for the served model to score
    lone = np.flatnonzero(phone == 7)
    cf = UnitCrossFit(4, seed=0).fit(lambda: KNeighborsRegressor(n_neighbors=1), X, Y,
                                     np.setdiff1d(train, lone), score, units)
    assert np.isnan(cf.score_centres_[np.isin(score, lone)]).all()
    assert not np.isnan(cf.score_centres_[~np.isin(score, lone)]).any()


@pytest.mark.parametrize("n_units, most, least, seconds, allowance, expected", [
    (13, 20, 5, 0.5, 60.0, (13, "one unit per fold (13 units)")),
    (13, 20, 5, None, 60.0, (13, "one unit per fold (13 units)")),  # no cost (the client's centres): no limit
    (13, 20, 5, 21.6, None, (13, "one unit per fold (13 units)")),
    (30, 20, 5, 0.5, 60.0, (20, "20 folds (at most 20)")),
    (13, 20, 5, 5.0, 60.0, (12, "12 folds, not 13: a fit of the centre is costed at 5.0 s and the folds' fits "
                               "may take 60 s (TrainConfig.across_centre_seconds)")),
    (13, 20, 5, 21.6, 60.0, (5, "5 folds, not 13: a fit of the centre is costed at 21.6 s and the folds' fits "
                                "may take 60 s (TrainConfig.across_centre_seconds)")),  # never below the shapes' 5
    (3, 20, 5, 100.0, 1.0, (3, "one unit per fold (3 units)")),  # the floor is at most the units
])
def test_centre_folds_are_one_unit_each_within_the_cost_allowed(n_units, most, least, seconds, allowance, expected):
    assert centre_folds(n_units, most, least, seconds, allowance) == expected


@pytest.mark.parametrize("n_devices", [1, 4])
def test_too_few_units_names_the_column_and_the_count(n_devices):
    ds = survey(n_devices)
    with pytest.raises(InputError, match=rf"--calibrate-across PHONEID: the rows hold {n_devices} distinct PHONEID "
                                         r"value.*at least 5 \(1 for test, 2 for calibration, 2 for training\)") as e:
        across_split(ds, ["PHONEID"], 0, 0.9, mode="held-out")
    assert e.value.field == "--calibrate-across" and e.value.received == str(n_devices)
    # the cross-fit has no test part: each unit is held out in turn against at least two others
    if n_devices < 3:
        with pytest.raises(InputError, match=r"at least 3 \(each held out in turn, scored at a threshold from at "
                                             r"least 2 others\)"):
            across_split(ds, ["PHONEID"], 0, 0.9)
    else:
        split = across_split(replace(ds, groups=None), ["PHONEID"], 0, 0.9)
        assert not len(split.test) and split.across["units"]["calibration"] == n_devices


def test_unknown_column_lists_those_there_are():
    with pytest.raises(InputError, match="names FLOOR, which survey does not have .* it has PHONEID, USERID"):
        across_split(survey(8), ["PHONEID", "FLOOR"], 0, 0.9)


@pytest.mark.slow
def test_train_calibrates_on_the_units_with_the_split_rule():
    ds = survey(12)
    for mode in ("cross-fit", "held-out"):
        result = train(ds, TrainConfig(methods=("ge", "nle", "copula"), centre="knn", calibrate_across=("PHONEID",),
                                       seed=2, across_mode=mode))
        split = result.split
        assert split.across["mode"] == mode
        for reg in result.model.methods.values():
            cal = reg.calibrator_
            assert cal.rule == split.across["rule"] == "group-weighted"
            assert cal.n_calibration_ == split.across["units"]["calibration"]  # m counts phones, not rows
            assert cal.n_rows_ == len(split.calibration)
        if mode == "cross-fit":  # every training phone calibrates, and the scores are not the served model's
            assert result.model.methods["ge"].calibrator_.n_calibration_ == split.across["units"]["train"]
            assert result.centre["cross_fit"] == 5
            assert result.centre["centre_folds"] == split.across["units"]["train"]  # one phone per centre fold
            served = result.model.score_points(ds.X[split.calibration], ds.Y[split.calibration])["ge"]
            assert served.shape == result.model.methods["ge"].calibrator_.scores_.shape
            assert not np.allclose(np.sort(served), result.model.methods["ge"].calibrator_.scores_)
    exact = train(ds, TrainConfig(methods=("ge",), centre="knn", calibrate_across=("PHONEID",), coverage=0.6,
                                  across_mode="held-out"))
    assert exact.model.methods["ge"].calibrator_.rule == "group-subsample"
    few = train(ds, TrainConfig(methods=("ge",), centre="knn", calibrate_across=("PHONEID",), seed=2,
                                across_centre_folds=3))
    assert (few.centre["centre_folds"], few.centre["cross_fit"]) == (3, 5)
    assert few.centre["centre_folds_by"] == "3 folds (at most 3)"
    dear = train(ds, TrainConfig(methods=("ge",), centre="knn", calibrate_across=("PHONEID",), seed=2,
                                 across_centre_seconds=1e-9))  # any fit costs more than the folds may take
    assert dear.centre["centre_folds"] == 5 and dear.centre["centre_folds_by"].startswith("5 folds, not ")
    assert "calibration scored by centres of 5 folds, not " in centre_line(dear.centre)
    for bad in (0, -1.0, "60", True):
        with pytest.raises(InputError, match="across_centre_seconds must be a positive number") as err:
            train(ds, TrainConfig(methods=("ge",), centre="knn", calibrate_across=("PHONEID",),
                                  across_centre_seconds=bad))
        assert err.value.field == "across_centre_seconds"
    with pytest.raises(InputError, match="the centre's unit folds must be an integer >= 2; got 1") as err:
        train(ds, TrainConfig(methods=("ge",), centre="knn", calibrate_across=("PHONEID",), across_centre_folds=1))
    assert err.value.field == "across_centre_folds"


def test_group_weighted_reaches_levels_the_few_units_cannot_with_the_finite_sample_rules():
    from models.calibration.conformal import SplitConformalCalibrator, UnattainableCoverageError

    scores = np.array([1.0, 2.0, 3.0, 4.0, 10.0, 20.0])
    groups = np.array([0, 0, 0, 0, 1, 1])  # unit 0 weighs 1/8 per row, unit 1 1/4 per row
    cal = SplitConformalCalibrator("group-weighted").fit(scores, groups)
    assert cal.max_coverage == 1.0
    assert cal.quantile(0.5) == 4.0 and cal.quantile(0.51) == 10.0 and cal.quantile(0.9) == 20.0
    # containment at level eta <=> p-value > 1 - eta
    for eta in (0.3, 0.5, 0.7, 0.9):
        q = cal.quantile(eta)
        assert cal.p_value([q])[0] > 1 - eta >= cal.p_value([np.nextafter(q, np.inf)])[0]
    assert cal.level_of(4.0) == 0.5 and cal.level_of(100.0) == 1.0
    with pytest.raises(UnattainableCoverageError):
        SplitConformalCalibrator("group-pooled").fit(scores, groups).check_level(0.9)


@pytest.mark.slow
def test_cli_states_the_guarantee_in_the_report_the_manifest_and_get_model(tmp_path, capsys):
    from tests.processes import stop
    from tests.e2e.servers import KEY, free_port, start_server, wait_alive

    ds = survey(10, n_points=80, readings=8)
    header = ",".join([*ds.feature_names, *ds.target_names, "phone"])
    body = np.column_stack([ds.X, ds.Y, ds.meta["PHONEID"]])
    csv = tmp_path / "site.csv"
    csv.write_text(header + "\n" + "\n".join(",".join(f"{v:g}" for v in row) for row in body))
    out = tmp_path / "run"
    assert main(["--csv", str(csv), "--targets", "x_m,y_m", "--calibrate-across", "phone", "--methods", "ge,nle",
                 "--centre", "knn", "--out", str(out), "--quiet"]) == 0
    printed = capsys.readouterr().out
    manifest = json.loads((out / "bundle" / "manifest.json").read_text())
    words = manifest["calibration"]["guarantee"]
    # grouped by position automatically: across phones the positions stay in (a new phone reads at them)
    assert words.startswith("P ~ 0.9 (approximate) for a reading from a new phone unit: calibrated on all")
    assert "at the survey's positions" in printed and manifest["calibration"]["across"]["held_out_groups"] is None
    assert manifest["calibration"]["across"]["columns"] == ["phone"]
    assert manifest["feature_names"] == ds.feature_names  # the label column is no feature
    assert f"guarantee: {words}" in printed and "calibrated across: phone: 10 units" in printed
    assert words in (out / "report.md").read_text()
    port = free_port()
    proc = start_server(out / "bundle", port, tmp_path / "server.log")
    try:
        base = f"http://127.0.0.1:{port}"
        wait_alive(base, proc)
        info = httpx.get(f"{base}/model", headers={"X-API-Key": KEY}).json()
        stated = info["guarantee"]
        assert stated["words"] == words and info["calibration"]["across"]["exact"] is False
        assert (stated["form"], stated["units"], stated["n_units"], stated["mode"]) == (
            "approximate", "phone units", 10, "across cross-fit")
    finally:
        stop(proc)


def test_csv_label_columns_are_checked(tmp_path):
    csv = tmp_path / "site.csv"
    csv.write_text("a,b,x,y,phone\n" + "\n".join(f"{i},{i % 7},{i},{i * 2},{'p' + str(i % 6) if i != 40 else ''}"
                                                 for i in range(100)))
    with pytest.raises(InputError, match=r"column 'phone' is empty at line 42") as e:
        load_csv(csv, ["x", "y"], meta_columns=["phone"])
    assert e.value.field == "--calibrate-across"
    with pytest.raises(InputError, match=r"column\(s\) \['handset'\] not found"):
        load_csv(csv, ["x", "y"], meta_columns=["handset"])


def test_the_served_method_choice_reads_the_unit_folds_train_rows_without_fitting_again():
    """In cross-fit mode each unit fold's shape also scores its fold's train rows (phones it never saw):
    GE's pooled figures are, by hand, those rows' Mahalanobis distances under the other folds' second
    moment about the fold centres, then the test rows' under the served shape (a split with a test part)."""
    from training.pipeline.served_volume import pooled_figures

    ds = survey(12)
    config = TrainConfig(methods=("ge", "nle"), centre="knn", calibrate_across=("PHONEID",), seed=2)
    result = train(ds, config, split=across_split(ds, ["PHONEID"], 2, 0.9, test_fraction=0.1))
    split, model, sel = result.split, result.model, result.model.selection
    units = unit_codes(ds, ["PHONEID"])
    Xs = model.standardise(ds.X)
    cf = UnitCrossFit(5, config.seed).fit(lambda: config.make_centre("knn"), Xs, ds.Y, split.train,
                                          split.calibration, units, meta=ds.meta, columns=("PHONEID",))
    scores, dets, rows = [], [], []
    for rest, fold, scored in cf.folds_:
        if not len(scored):
            continue
        R = ds.Y[split.train[rest]] - cf.train_centres_[rest]
        C = R.T @ R / len(R)
        r = ds.Y[split.train[fold]] - cf.train_centres_[fold]
        scores.append(np.einsum("ij,jk,ik->i", r, np.linalg.inv(C), r))
        dets += [np.sqrt(np.linalg.det(C))] * len(fold)
        rows.append(fold)
    C = model.methods["ge"].shape_.covariance_
    rt = ds.Y[split.test] - model.predict_center(ds.X[split.test])
    scores.append(np.einsum("ij,jk,ik->i", rt, np.linalg.inv(C), rt))
    dets += [np.sqrt(np.linalg.det(C))] * len(rt)
    s, v = np.concatenate(scores), np.pi * np.array(dets)
    groups = np.concatenate([units[split.train[np.concatenate(rows)]], units[split.test]])
    m = split.across["units"]["calibration"]
    expected = pooled_figures(s, v, 0.9, 2, (split.across["rule"], m), groups)
    ge = sel["held_out"]["ge"]
    assert ge["quantile"] == pytest.approx(expected["quantile"], rel=1e-9)
    assert ge["volume"] == pytest.approx(expected["volume"], rel=1e-9)
    n_scored = sum(len(f) for f in rows)
    assert sel["cross_fit_by"] == f"the calibration's {len(rows)} unit folds (no fit of their own)"
    assert sel["n_rows"] == n_scored + len(split.test) and sel["folds"] == sel["folds_run"] == len(rows)
    assert "evidence" not in sel and "primary" in result.stages


@pytest.mark.slow
def test_lmve_unit_folds_refit_the_served_configurations_without_a_new_search():
    """Cross-fit mode: every unit fold's LMVE fits the configurations the served LMVE chose (its members'),
    not the grid; GE, which has no search, is made as configured."""
    made = []

    class Watched(TrainConfig):
        def make_shape(self, name):
            shape = super().make_shape(name)
            made.append((name, shape))
            return shape

    fast = {"lmve": dict(max_steps=60, eval_every=20, patience=2)}
    result = train(survey(12), Watched(methods=("ge", "lmve"), centre="knn", calibrate_across=("PHONEID",), seed=2,
                                       method_params=fast))
    lmve = [shape.get_params() for name, shape in made if name == "lmve"]  # the templates (fits clone them)
    served = result.model.methods["lmve"].shape_
    assert len(lmve) == 1 + result.centre["cross_fit"]
    assert len({(r["lr_init"], r["dropout"]) for r in served.grid_results_}) == 4  # the served fit searched the grid
    assert lmve[0] == served.get_params()
    narrowed = served.chosen_grid()
    assert narrowed != {k: served.get_params()[k] for k in narrowed}  # fewer configurations than the grid
    for fold in lmve[1:]:
        assert fold == {**lmve[0], **narrowed}
    assert all(shape.get_params() == made[0][1].get_params() for name, shape in made if name == "ge")


def offset_survey(n_devices: int = 8, seed: int = 0, offset_sd_db: float = 6.0) -> Dataset:
    """A fingerprint survey whose phones differ by a gain offset (sd ``offset_sd_db``) and whose readings
    below a sensitivity of -85 dBm are "not detected" (+100, as UJIIndoorLoc writes it): a weaker phone
    also hears fewer transmitters."""
    X, Y, _, device, fn, tn = synthetic.make_survey(n_points=60, readings=10, n_devices=n_devices,
                                                     device_sd_db=offset_sd_db, seed=seed)
    X = np.where(X < -85.0, 100.0, np.round(X))
    return group_by_position(Dataset("offsets", X, Y, fn, tn, "x", meta={"PHONEID": device}))


def test_across_units_the_representation_is_fitted_on_the_train_rows_and_served_as_trained(tmp_path):
    from models.bundle import load_bundle, save_bundle
    from models.preprocessing import RSSIFloor

    ds = offset_survey()
    config = TrainConfig(methods=("ge", "nle"), centre="knn", rssi="auto", calibrate_across=("PHONEID",),
                         rssi_representation="relative")
    # a test part, so that the train part is not every row
    result = train(ds, config, split=across_split(replace(ds, groups=None), ["PHONEID"], 0, 0.9, test_fraction=0.3))
    step = result.model.preprocess
    assert step.representation == "relative" and config.resolved_representation() == "relative"
    # "auto" is the readings in dBm across units too: the fingerprint centre chooses its own representation
    auto = replace(config, rssi_representation="auto")
    assert auto.resolved_representation() == replace(auto, calibrate_across=()).resolved_representation() == "dbm"
    # fitted on the train part alone: the same step refitted on those rows has the same state
    again = RSSIFloor(representation="relative").fit(ds.X[result.split.train])
    assert (again.reference_, again.floor_, again.weakest_) == (step.reference_, step.floor_, step.weakest_)
    everything = RSSIFloor(representation="relative").fit(ds.X)
    assert (everything.reference_, everything.weakest_) != (step.reference_, step.weakest_) or \
        not np.array_equal(everything.transform(ds.X), step.transform(ds.X))
    # applied identically at serving: a saved and loaded bundle answers as the trained model, and both as
    # the step, the scaler and the centre by hand
    save_bundle(result.model, tmp_path / "b")
    served = load_bundle(tmp_path / "b")
    assert served.manifest["preprocess"]["params"]["representation"] == "relative"
    Q = ds.X[result.split.test]
    by_hand = result.model.centre.predict((step.transform(Q) - result.model.scaler_mean) / result.model.scaler_scale)
    np.testing.assert_array_equal(served.predict_center(Q), by_hand)
    np.testing.assert_array_equal(result.model.predict_center(Q), by_hand)
    a, b = served.predict_region(Q).regions, result.model.predict_region(Q).regions
    np.testing.assert_array_equal(a.shapes, b.shapes)
    # a new phone 8 dB weaker sees the same regions
    weaker = np.where(Q == 100.0, 100.0, Q - 8.0)
    np.testing.assert_array_equal(served.predict_region(weaker).regions.centers, a.centers)


@pytest.mark.slow
def test_across_phones_a_device_offset_survey_holds_the_level_over_fifty_splits():
    """Issue 70's target for the across rows: at 0.9, coverage at new phones in [88, 93] %, not the 95 % of
    an over-covering calibration. 50 surveys of 10 phones (offset sd 6 dB), each split over its phones;
    the mean of the test parts' coverage (about 18 rows of one or two new phones each)."""
    coverage = {"ge": [], "nle": []}
    for seed in range(50):
        result = train(offset_survey(n_devices=10, seed=seed),
                       TrainConfig(methods=("ge", "nle"), centre="knn", rssi="auto", calibrate_across=("PHONEID",),
                                   rssi_representation="relative", seed=seed, primary_folds=0))
        assert result.model.preprocess.representation == "relative"
        for name in coverage:
            coverage[name].append(result.metrics[name]["coverage"])
    for name, values in coverage.items():
        assert 0.88 <= np.mean(values) <= 0.93, (name, np.mean(values))
