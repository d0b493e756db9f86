"""``--primary``: the served method chosen on held-out rows, never on calibration rows."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from models.bundle import load_bundle, save_bundle
from models.exceptions import BundleError, InputError
from training.data.datasets import load_dataset
from training.pipeline import Split, TrainConfig, default_split, train
from training.pipeline.served_volume import cross_fit_figures, expected_threshold, leader_excess, pooled_figures

from tests.conftest import FAST_TRAIN_LMVE

# every fold of the cross-fit, as before primary_tolerance: the record of a full cross-fit
CONFIG = TrainConfig(seed=0, methods=("ge", "nle", "lmve", "copula"), method_params={"lmve": FAST_TRAIN_LMVE},
                     primary_tolerance=None)


@pytest.fixture(scope="module")
def survey():
    ds = load_dataset("synthetic", n_samples=800, seed=1)
    from training.data.datasets import group_by_position

    ds = group_by_position(ds)
    return ds, default_split(ds, CONFIG)


@pytest.fixture(scope="module")
def trained(survey):
    ds, split = survey
    return train(ds, CONFIG, split=split)


@pytest.mark.slow
def test_auto_serves_the_method_of_smallest_held_out_volume(trained, survey):
    ds, split = survey
    model, sel = trained.model, trained.model.selection
    held = sel["held_out"]
    assert sorted(sel["order"]) == ["ge", "lmve", "nle"] and "copula" in held  # boxes are figures, never served
    assert held["copula"]["volume"] is None and held["copula"]["threshold"] is None
    volumes = [held[m]["volume"] for m in sel["order"]]
    assert volumes == sorted(volumes) and sel["rule"] == "auto" and sel["primary"] == sel["order"][0]
    assert model.primary_method == sel["primary"] and model.serving_order == tuple(sel["order"])
    assert sel["folds"] == 3 and sel["folds_run"] == 3 and sel["n_rows"] == len(split.train) + len(split.test)
    assert "evidence" not in sel and "cross_fit_skipped" not in sel
    assert sel["rows"] == f"3-fold cross-fit of the train part ({len(split.train)} rows) and the test part"
    X = ds.X[split.test]
    for name in held:  # the report-only figures are the calibrated regions' on the test part
        assert held[name]["coverage"] == pytest.approx(trained.metrics[name]["coverage"])
        assert held[name]["volume_calibrated"] == pytest.approx(trained.metrics[name]["volume"])
    # the plain route's answer is the primary's
    assert model.predict_region(X[:3]).method == sel["primary"]


def test_the_ge_figures_are_its_out_of_fold_and_test_scores_by_hand(trained, survey):
    """GE's shape is the second moment of its training residuals, so its cross-fitted scores can be
    written out: each fold's Mahalanobis distances under the other folds' moment, pooled with the
    test rows' under the served one; the threshold is their order statistic and the volume
    ``q * pi * mean sqrt(det C)`` (n = 2)."""
    from models.centres.stack import fold_splits

    ds, split = survey
    model = trained.model
    Xs = model.standardise(ds.X)
    centers = model.predict_center(ds.X)
    train_groups = ds.groups[split.train]
    # the train rows' residuals are the out-of-fold centres' (cross_fit=5 by groups), as the shapes saw them
    from training.pipeline.centre_selection import out_of_fold_centers

    oof = out_of_fold_centers(Xs[split.train], ds.Y[split.train], replace(CONFIG, centre="paper"), 5, train_groups)
    R = ds.Y[split.train] - oof
    scores, dets = [], []
    for rest, fold in fold_splits(len(split.train), 3, CONFIG.seed, train_groups):
        C = R[rest].T @ R[rest] / len(rest)
        scores.append(np.einsum("ij,jk,ik->i", R[fold], np.linalg.inv(C), R[fold]))
        dets += [np.sqrt(np.linalg.det(C))] * len(fold)
    C = model.methods["ge"].shape_.covariance_
    Rt = ds.Y[split.test] - centers[split.test]
    scores.append(np.einsum("ij,jk,ik->i", Rt, np.linalg.inv(C), Rt))
    dets += [np.sqrt(np.linalg.det(C))] * len(Rt)
    s = np.concatenate(scores)
    q = np.sort(s)[int(np.ceil(0.9 * (len(s) - 1)))]
    ge = trained.model.selection["held_out"]["ge"]
    assert ge["quantile"] == pytest.approx(q, rel=1e-9)
    assert ge["quantile_volume"] == pytest.approx(q * np.pi * np.mean(dets), rel=1e-9)
    # ranked: the volume at the expected threshold of this split's calibration (group-subsample, m groups)
    m = len(np.unique(ds.groups[split.calibration]))
    pooled_groups = np.concatenate([train_groups, ds.groups[split.test]])
    t = expected_threshold(s, 0.9, m, "group-subsample", pooled_groups)
    assert ge["threshold"] == pytest.approx(t, rel=1e-9) and ge["threshold"] > ge["quantile"]
    assert ge["volume"] == pytest.approx(t * np.pi * np.mean(dets), rel=1e-9)


def test_folds_zero_chooses_on_the_test_part_alone(survey):
    ds, split = survey
    result = train(ds, replace(CONFIG, primary_folds=0), split=split)
    model, sel = result.model, result.model.selection
    assert sel["rows"] == "test part" and sel["n_rows"] == len(split.test) and sel["folds"] == 0
    X, Y = ds.X[split.test], ds.Y[split.test]
    scores = model.score_points(X, Y)
    for name in sel["order"]:  # the figures are what they say: recomputed here from the test rows alone
        s, held = scores[name], sel["held_out"][name]
        assert np.mean(s <= held["quantile"]) >= 0.9 and held["quantile"] in s  # an order statistic
        for q, volume in ((held["quantile"], held["quantile_volume"]), (held["threshold"], held["volume"])):
            region = model.methods[name].shape_.region(model.standardise(X), model.predict_center(X), q, 0.9)
            assert volume == pytest.approx(np.mean(region.volume("lebesgue")))


@pytest.mark.parametrize("field, value, message", [
    *(("primary_folds", v, "primary_folds must be 0") for v in (1, -2, 2.5, True)),
    *(("primary_tolerance", v, "primary_tolerance must be a share") for v in (-0.1, 1.0, "2%", True))])
def test_bad_fold_counts_and_tolerances_are_refused_before_fitting(survey, field, value, message):
    ds, split = survey
    with pytest.raises(InputError, match=message) as err:
        train(ds, replace(CONFIG, **{field: value}), split=split)
    assert err.value.field == field


@pytest.mark.slow
def test_auto_never_reads_calibration_rows(trained, survey):
    """Change the calibration rows (their labels, and which rows they are, keeping the groups' count, the
    one thing the choice reads): the choice and every figure it read stay; the calibrated thresholds
    move, so the calibration did change."""
    ds, split = survey
    rng = np.random.default_rng(7)
    Y = ds.Y.copy()
    Y[split.calibration] += rng.normal(0.0, 5.0, size=(len(split.calibration), 2))
    cal = split.calibration
    first = np.unique(ds.groups[cal], return_index=True)[1]  # one row of each calibration group
    kept = np.sort(np.concatenate([cal[first], rng.choice(np.delete(cal, first), size=len(cal) // 4, replace=False)]))
    assert len(kept) < len(cal) and len(np.unique(ds.groups[kept])) == len(np.unique(ds.groups[cal]))
    fewer = Split(train=split.train, calibration=kept, test=split.test)
    for data, part in ((replace(ds, Y=Y), split), (ds, fewer)):
        other = train(data, CONFIG, split=part)
        assert other.model.selection["order"] == trained.model.selection["order"]
        for name in trained.model.selection["order"]:  # Copula's score is built on calibration ranks:
            f, again = trained.model.selection["held_out"][name], other.model.selection["held_out"][name]
            keys = ("volume", "threshold", "quantile", "quantile_volume")  # equal to the last ulp or so: BLAS
            assert {k: again[k] for k in keys} == pytest.approx({k: f[k] for k in keys}, rel=1e-12, abs=0.0)
        assert other.model.methods["ge"].alpha_q_ != trained.model.methods["ge"].alpha_q_


@pytest.mark.slow
def test_forced_primary_goes_first_and_the_rest_keep_their_rank(trained, survey):
    ds, split = survey
    auto = trained.model.selection["order"]
    forced = auto[-1]
    sel = train(ds, replace(CONFIG, primary=forced), split=split).model.selection
    assert sel["rule"] == "forced" and sel["order"] == [forced, *auto[:-1]]


@pytest.mark.parametrize("primary", ["copula", "svr", ""])
def test_a_primary_that_cannot_serve_is_refused_before_fitting(survey, primary):
    ds, split = survey
    with pytest.raises(InputError, match="^primary must be auto or an ellipsoid method") as err:
        train(ds, replace(CONFIG, primary=primary), split=split)
    assert err.value.field == "primary"


def test_the_selection_travels_with_the_bundle(trained, tmp_path):
    save_bundle(trained.model, tmp_path / "b")
    model = load_bundle(tmp_path / "b")
    assert model.selection == json.loads(json.dumps(trained.model.selection))
    assert model.primary_method == trained.model.primary_method
    assert model.serving_order == trained.model.serving_order
    # a recalibration keeps the order
    assert trained.model.recalibrated(np.zeros((12, 16)) - 70, np.zeros((12, 2))).serving_order \
        == trained.model.serving_order


def test_a_selection_naming_a_missing_method_is_a_bundle_error(trained, tmp_path):
    save_bundle(trained.model, tmp_path / "b")
    path = tmp_path / "b" / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["selection"]["order"] = ["mystery", "ge"]
    path.write_text(json.dumps(manifest))
    with pytest.raises(BundleError, match="selection.order must list methods of the bundle"):
        load_bundle(tmp_path / "b")


def test_without_a_selection_the_registry_order_serves(trained):
    model = replace(trained.model, selection={})
    assert model.serving_order == ("lmve", "nle", "ge") and model.primary_method == "lmve"
    ranked = replace(trained.model, selection={"order": ["ge", "lmve", "nle"]})
    assert ranked.serving_order == ("ge", "lmve", "nle")
    assert [n for n, _ in ranked._candidates(None, None)] == ["ge", "lmve", "nle"]
    assert [n for n, _ in ranked._candidates("lmve", None)] == ["lmve", "nle"]


def _enumerated(scores, weights, m, k):
    """E[k-th smallest of m weighted draws], by enumerating every draw."""
    from itertools import product

    total = 0.0
    for draw in product(range(len(scores)), repeat=m):
        total += np.prod(weights[list(draw)]) * np.sort(scores[list(draw)])[k - 1]
    return total


@pytest.mark.parametrize("eta, m", [(0.5, 3), (0.7, 4), (0.8, 4)])
def test_expected_threshold_is_the_order_statistic_of_m_draws(eta, m):
    rng = np.random.default_rng(m)
    s = rng.exponential(size=5)
    k = int(np.ceil((m + 1) * eta))
    assert expected_threshold(s, eta, m) == pytest.approx(_enumerated(s, np.full(5, 0.2), m, k), rel=1e-12)
    # group-subsample: a group weighted 1/G, spread over its rows
    groups = np.array([0, 0, 0, 1, 2])
    w = np.array([1 / 9, 1 / 9, 1 / 9, 1 / 3, 1 / 3])
    assert expected_threshold(s, eta, m, "group-subsample", groups) == pytest.approx(_enumerated(s, w, m, k), rel=1e-12)


def test_expected_threshold_edges():
    s = np.array([1.0, 2.0, 3.0, 4.0])
    assert expected_threshold(s, 0.9, 8) == np.inf  # ceil(9 * 0.9) = 9 > 8 rows: no finite threshold
    assert expected_threshold(np.array([1.0, 2.0, np.inf]), 0.5, 3) == np.inf  # a draw can meet the infinite score
    # group-pooled: the pooled quantile at eta (m + 1) / m, groups weighted equally
    g = np.array([0, 0, 0, 1])  # weights 1/6, 1/6, 1/6, 1/2: cumulative 1/6, 1/3, 1/2, 1
    assert expected_threshold(s, 0.3, 4, "group-pooled", g) == 3.0  # 0.3 * 5 / 4 = 0.375
    assert expected_threshold(s, 0.5, 4, "group-pooled", g) == 4.0  # 0.625
    assert expected_threshold(s, 0.9, 4, "group-pooled", g) == np.inf  # 1.125 > 1


def test_leader_excess_is_the_quantile_of_the_leaders_excess_over_resampled_rows():
    """Redo the resampling by hand: the same generator's draws, every method's volume in each resample,
    the leader's excess over the smallest, its 95 % quantile (an order statistic)."""
    rng = np.random.default_rng(3)
    s_a, s_b = rng.exponential(size=60), rng.exponential(size=60)
    v_a, v_b = np.full(60, 1.0), np.full(60, 1.05)
    figures = {"nle": (s_a, v_a), "ge": (s_b, v_b)}
    got = leader_excess(figures, 0.8, 2, ("rows", 20), seed=5, resamples=40)
    full = {m: pooled_figures(s, v, 0.8, 2, ("rows", 20))["volume"] for m, (s, v) in figures.items()}
    assert got["leader"] == min(full, key=full.get)
    draws = np.random.default_rng(5)
    excess, wins = [], 0
    for _ in range(40):
        rows = draws.integers(0, 60, 60)
        vol = {m: pooled_figures(s[rows], v[rows], 0.8, 2, ("rows", 20))["volume"] for m, (s, v) in figures.items()}
        excess.append(vol[got["leader"]] / min(vol.values()) - 1.0)
        wins += vol[got["leader"]] == min(vol.values())
    assert got["excess"] == pytest.approx(np.sort(excess)[int(np.ceil(0.95 * 39))], rel=1e-12)
    assert got["wins"] == wins / 40 and 0 < got["wins"] < 1  # a real contest: each method wins some resamples
    assert got["excess"] > 0 and got["units"] == got["rows"] == 60 and got["resamples"] == 40


def test_leader_excess_resamples_whole_groups_and_is_zero_for_a_clear_winner():
    rng = np.random.default_rng(0)
    s = rng.exponential(size=90)
    groups = np.repeat(np.arange(30), 3)
    figures = {"lmve": (s, np.full(90, 1.0)), "nle": (s, np.full(90, 1.3))}  # NLE: the same scores, larger
    got = leader_excess(figures, 0.9, 2, ("group-subsample", 12), groups, seed=1, resamples=50)
    assert got["leader"] == "lmve" and got["excess"] == 0.0 and got["wins"] == 1.0
    assert got["units"] == 30 and got["rows"] == 90
    # too few units to resample settle nothing, however clear the winner
    few = leader_excess({m: (f[0][:27], f[1][:27]) for m, f in figures.items()}, 0.9, 2, ("group-subsample", 12),
                        groups[:27], seed=1, resamples=50)
    assert few["units"] == 9 and few["wins"] == 1.0 and few["excess"] == np.inf
    # equal methods: the first named leads and never loses (ties are not losses)
    tie = leader_excess({"nle": (s, np.ones(90)), "ge": (s, np.ones(90))}, 0.9, 2, seed=1, resamples=20)
    assert tie["leader"] == "nle" and tie["excess"] == 0.0
    # unbounded volumes settle nothing: the excess is unbounded, never a tie at infinity
    s_inf = np.r_[s[:-1], np.inf]  # with the rows rule any draw can meet the infinite score
    inf = leader_excess({"nle": (s_inf, np.ones(90)), "ge": (s_inf, np.ones(90))}, 0.9, 2, ("rows", 30), seed=1,
                        resamples=20)
    assert inf["leader"] == "nle" and inf["excess"] == np.inf and inf["wins"] == 1.0


def test_a_stopped_cross_fit_keeps_the_folds_it_ran(survey):
    """``stop`` ends the cross-fit between folds: the figures are those of the full run on the rows it
    scored, and the rows are the first fold's."""
    from models.centres.stack import fold_splits
    from models.centres.constant import ConstantCentre
    from models.predictor import SplitConformalRegressor
    from models.shapes.ge import GaussianEllipsoid

    ds, split = survey
    X, Y, g = ds.X[split.train], ds.Y[split.train], ds.groups[split.train]
    centre = ConstantCentre().fit(X, Y)
    centers = centre.predict(X)

    def make(name):
        return SplitConformalRegressor(GaussianEllipsoid(), centre=centre, coverage=0.9, prefit_centre=True)

    full, rows = cross_fit_figures(make, ["ge"], X, Y, centers, 3, 0, 0.9, groups=g)
    assert sorted(rows) == list(range(len(X)))
    seen = []
    part, first = cross_fit_figures(make, ["ge"], X, Y, centers, 3, 0, 0.9, groups=g,
                                    stop=lambda figures, done, folds: seen.append((len(done), folds)) or True)
    fold = fold_splits(len(X), 3, 0, g)[0][1]
    assert np.array_equal(first, fold) and seen == [(len(fold), 1)]
    position = {r: i for i, r in enumerate(rows)}
    for k in (0, 1):
        assert np.allclose(part["ge"][k], full["ge"][k][[position[r] for r in first]])


def test_folds_that_cannot_settle_anything_run_side_by_side_with_the_same_figures(survey):
    """The leading folds after which ``stop`` could not decide (``unsettled``) are fitted on worker threads,
    the rest one by one; ``stop`` first reads the evidence after them, and the figures and rows are those
    of the folds run in order."""
    import threading

    from models.centres.constant import ConstantCentre
    from models.predictor import SplitConformalRegressor
    from models.shapes.ge import GaussianEllipsoid
    from models.shapes.nle import NearestNeighbourEllipsoid

    ds, split = survey
    X, Y, g = ds.X[split.train], ds.Y[split.train], ds.groups[split.train]
    centre = ConstantCentre().fit(X, Y)
    centers = centre.predict(X)
    threads = []
    meet = threading.Barrier(2, timeout=20)  # the first fits of two workers wait for each other: side by side

    def make(name):
        me = threading.current_thread().name
        if me != threading.main_thread().name and me not in threads:
            meet.wait()
        threads.append(me)
        shape = GaussianEllipsoid() if name == "ge" else NearestNeighbourEllipsoid()
        return SplitConformalRegressor(shape, centre=centre, coverage=0.9, prefit_centre=True)

    names = ["nle", "ge"]
    in_order, rows = cross_fit_figures(make, names, X, Y, centers, 4, 0, 0.9, groups=g, workers=1)
    assert set(threads) == {threading.main_thread().name}
    threads.clear()
    seen = []
    side, side_rows = cross_fit_figures(
        make, names, X, Y, centers, 4, 0, 0.9, groups=g, workers=2,
        stop=lambda figures, done, folds: seen.append(folds) or False,
        unsettled=lambda done: len(done) < 0.4 * len(X))  # two folds of four hold about half the rows
    lead = seen[0]
    assert lead >= 2 and seen == list(range(lead, 4))
    assert len(set(threads[: 2 * lead])) == 2 and threading.main_thread().name not in threads[: 2 * lead]
    assert set(threads[2 * lead:]) == {threading.main_thread().name}
    assert np.array_equal(side_rows, rows)
    for m in names:
        for k in (0, 1):
            np.testing.assert_array_equal(side[m][k], in_order[m][k])


@pytest.mark.slow
def test_a_settled_test_part_skips_the_cross_fit_and_says_why(trained, survey):
    """A tolerance no resample can exceed stops before any fold: the choice is then the test part's,
    recorded with the evidence read; the full cross-fit's record is kept otherwise."""
    ds, split = survey
    sel = train(ds, replace(CONFIG, primary_tolerance=0.999), split=split).model.selection
    assert sel["folds"] == 0 and sel["folds_run"] == 0 and sel["n_rows"] == len(split.test)
    assert sel["rows"] == "test part" and sel["cross_fit_skipped"].startswith("not needed (3 folds saved)")
    ev = sel["evidence"]
    assert ev["tolerance"] == 0.999 and ev["excess"] <= 0.999 and ev["leader"] == sel["primary"]
    assert ev["checks"] == [{"folds": 0, "rows": len(split.test), "leader": ev["leader"], "excess": ev["excess"],
                             "wins": ev["wins"]}]
    assert ev["units"] == len(np.unique(ds.groups[split.test])) and ev["rows"] == len(split.test)
    # the same choice as the test part alone, which ranks by the same figures: equal up to the last digits of
    # numpy's reductions, whose SIMD blocks follow the arrays' memory alignment (float64 eps x the summed rows)
    alone = train(ds, replace(CONFIG, primary_folds=0), split=split).model.selection
    assert sel["order"] == alone["order"] and sel["held_out"].keys() == alone["held_out"].keys()
    rel = 64 * np.finfo(np.float64).eps * len(split.test)
    for m, figures in sel["held_out"].items():
        assert figures.keys() == alone["held_out"][m].keys()
        for key, value in figures.items():
            other = alone["held_out"][m][key]
            assert (value is None and other is None) or value == pytest.approx(other, rel=rel, abs=0), (m, key)


@pytest.mark.slow
@pytest.mark.parametrize("tolerance", [0.05, 0.0])
def test_the_cross_fit_runs_fold_by_fold_until_the_leader_is_settled(survey, tolerance):
    """Each fold's rows join the held-out rows; the cross-fit stops once the leader's excess is within the
    tolerance (then the record says after how many folds and why), else it runs every fold and the
    evidence is read on all of them. A tolerance of 0 asks for a leader that wins 95 % of resamples."""
    from models.centres.stack import fold_splits

    ds, split = survey
    sel = train(ds, replace(CONFIG, primary_tolerance=tolerance), split=split).model.selection
    ev, folds = sel["evidence"], fold_splits(len(split.train), 3, CONFIG.seed, ds.groups[split.train])
    scored = sum(len(f) for _, f in folds[:sel["folds_run"]])
    assert sel["folds"] == 3 and sel["n_rows"] == len(split.test) + scored == ev["rows"]
    assert ev["leader"] == sel["primary"] and ev["tolerance"] == tolerance
    # every read of the evidence, one before each fold that ran and one after the last
    assert [c["folds"] for c in ev["checks"]] == [*range(sel["folds_run"]), sel["folds_run"]]
    assert all(c["excess"] is None or c["excess"] > tolerance for c in ev["checks"][:-1])
    assert ev["checks"][-1] == {k: ev[k] for k in ("rows", "leader", "excess", "wins")} | {"folds": sel["folds_run"]}
    if sel["folds_run"] < 3:
        assert ev["excess"] <= tolerance and sel["cross_fit_skipped"].startswith(f"stopped after {sel['folds_run']} of 3")
        assert sel["rows"].startswith(f"{sel['folds_run']} of the 3 folds of a cross-fit of the train part ({scored} of")
    else:
        assert "cross_fit_skipped" not in sel and sel["rows"].startswith("3-fold cross-fit")
    # the leader over the pooled rows is the one served
    assert sel["held_out"][sel["primary"]]["volume"] == min(sel["held_out"][m]["volume"] for m in sel["order"])


def test_cli_reads_the_tolerance_as_a_share_or_off(capsys):
    from training.commands.train import build_parser

    parse = build_parser().parse_args
    assert parse([]).primary_tolerance == TrainConfig.primary_tolerance == 0.05
    assert parse(["--primary-tolerance", "off"]).primary_tolerance is None
    assert parse(["--primary-tolerance", "0.1"]).primary_tolerance == 0.1
    for bad, said in (("2%", "got '2%'"), ("1.5", "got 1.5")):
        with pytest.raises(SystemExit):
            parse(["--primary-tolerance", bad])
        assert f"expected a share in [0, 1) (0.02 for 2 %) or 'off'; {said}" in capsys.readouterr().err


def test_the_cross_fit_refits_lmve_at_the_served_fits_configurations(trained, survey):
    """A fold of the served-method choice fits the configurations the served LMVE chose, not its whole grid,
    and GE as configured."""
    from training.calibration.across import fold_regressor

    ds, split = survey
    model = trained.model

    def _regressor(name):  # what the choice's folds fit (training.pipeline.served._regressor)
        return fold_regressor(CONFIG, name, model.methods[name].shape_, model.centre, model.coverage,
                              "group-subsample")

    served = model.methods["lmve"].shape_
    chosen = served.chosen_grid()
    rows = split.train[: len(split.train) * 2 // 3]
    Xs, Y = model.standardise(ds.X[rows]), ds.Y[rows]
    fold = _regressor("lmve").fit(Xs, Y, centers=model.predict_center(ds.X[rows]), groups=ds.groups[rows])
    fitted = {(r["lr_init"], r["dropout"]) for r in fold.shape_.grid_results_}
    assert fitted <= {(a, p) for a in chosen["learning_rates_init"] for p in chosen["dropouts"]}
    assert len(chosen["learning_rates_init"]) < len(served.learning_rates_init)  # this survey's members: one rate
    assert len(fold.shape_.grid_results_) < len(served.grid_results_)
    assert fold.shape_.get_params()["learning_rates_train"] == chosen["learning_rates_train"]
    assert _regressor("ge").shape.get_params() == CONFIG.make_shape("ge").get_params()
