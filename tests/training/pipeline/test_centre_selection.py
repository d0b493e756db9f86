"""training/pipeline/centre_selection.py: centre="auto" screened and raced above a size, whole below it."""

import json

import numpy as np
import pytest

from models.exceptions import InputError
from models.centres.stack import fold_splits
from training.data.datasets import Dataset
from training.pipeline import TrainConfig, train
from training.pipeline.centre_selection import (DOMINANT, DOMINANT_SECONDS, RACE_FOLDS, _schedule, centre_errors, out_of_fold_centers,
                                select_centre)


def linear(m: int = 900, seed: int = 0, scale: float = 1.0):
    """Targets linear in 8 features plus a little noise: the scaled SVR fits them, a 3-NN average of
    8-D neighbours lags, and the paper's SVR (epsilon and C in raw units) cannot follow targets of scale
    ``scale``."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(m, 8))
    W = rng.normal(size=(8, 2))
    return X, scale * (X @ W + 0.05 * rng.normal(size=(m, 2)))


def test_a_candidate_behind_on_the_screen_is_dropped_with_its_reason():
    X, Y = linear(scale=1000.0)
    config = TrainConfig(centre="auto", centre_candidates=("paper", "scaled", "knn"), centre_screen_rows=200, seed=3)
    chosen, records, oof = select_centre(X, Y, config, 5)
    assert chosen == "scaled"
    rest, fold = fold_splits(len(X), 5, config.seed)[0]
    sub = np.sort(np.random.default_rng(config.seed).choice(rest, 200, replace=False))
    rows = {"paper": sub, "scaled": sub, "knn": rest}  # a lazy learner (k-NN) is screened on all the rows
    screen = {n: centre_errors(Y[fold], config.make_centre(n).fit(X[rows[n]], Y[rows[n]]).predict(X[fold]))["rmse"]
              for n in config.centre_candidates}
    for name, record in records.items():  # the screen's figures are every candidate's own, recomputable
        assert record["screen"] == {"rmse": pytest.approx(screen[name]), "rows": len(rows[name])}
    best = min(screen.values())
    paper = records["paper"]
    margin = config.centre_screen_margin
    assert screen["paper"] > (1 + margin) * best  # far behind: dropped there, with what it was fitted on and why
    assert paper["status"] == "dropped" and paper["stage"] == "screen" and paper["folds"] == 1 and paper["rows"] == 200
    assert paper["rmse"] == pytest.approx(screen["paper"])
    assert f"its RMSE {screen['paper']:.4g} was {100 * (screen['paper'] / best - 1):.0f} % above scaled's" \
        in paper["reason"] and f"screen margin {100 * margin:.0f} %" in paper["reason"]
    assert "paper" not in oof
    # the winner ran every fold on all the rows: its out-of-fold centres are the ordinary ones
    assert records["scaled"]["status"] == "kept" and records["scaled"]["folds"] == 5
    assert records["scaled"]["rows"] == round(np.mean([len(r) for r, _ in fold_splits(len(X), 5, config.seed)]))
    np.testing.assert_array_equal(oof["scaled"], out_of_fold_centers(X, Y, config, 5, name="scaled"))


def test_the_race_drops_a_candidate_behind_after_a_fold_and_the_leader_completes_its_folds():
    X, Y = linear()
    config = TrainConfig(centre="auto", centre_candidates=("scaled", "knn"), centre_screen_rows=200,
                         centre_screen_margin=100.0, seed=1)  # nothing dropped at the screen
    chosen, records, oof = select_centre(X, Y, config, 5)
    rest, fold = fold_splits(len(X), 5, config.seed)[0]
    first = {n: centre_errors(Y[fold], config.make_centre(n).fit(X[rest], Y[rest]).predict(X[fold]))["rmse"]
             for n in ("scaled", "knn")}
    assert first["knn"] > 1.1 * first["scaled"]
    knn = records["knn"]
    assert knn["status"] == "dropped" and knn["stage"] == "race" and knn["folds"] == 1 and knn["rows"] == len(rest)
    assert knn["rmse"] == pytest.approx(first["knn"]) and "after 1 of 5 folds" in knn["reason"]
    assert chosen == "scaled" and records["scaled"]["folds"] == 5 and set(oof) == {"scaled"}
    np.testing.assert_array_equal(oof["scaled"], out_of_fold_centers(X, Y, config, 5, name="scaled"))


@pytest.mark.slow
def test_below_the_screen_size_the_race_starts_once_its_folds_hold_race_rows():
    """900 rows, folds of 180: with race_rows 300 the race first judges after fold 2 (360 held-out
    rows), then drops knn; with race_rows 100 (fold 1 holds 180) not before fold 2 either; without
    race_rows every candidate runs every fold."""
    X, Y = linear()
    config = TrainConfig(centre="auto", centre_candidates=("scaled", "knn"), centre_race_rows=300, seed=1)
    chosen, records, oof = select_centre(X, Y, config, 5)
    folds = fold_splits(len(X), 5, config.seed)
    seen = np.concatenate([f for _, f in folds[:2]])
    knn = records["knn"]
    assert knn["status"] == "dropped" and knn["stage"] == "race" and knn["folds"] == 2
    assert "after 2 of 5 folds" in knn["reason"] and "screen" not in knn
    whole = out_of_fold_centers(X, Y, config, 5, name="knn")
    assert knn["rmse"] == pytest.approx(centre_errors(Y[seen], whole[seen])["rmse"])
    assert chosen == "scaled" and records["scaled"]["folds"] == 5 and set(oof) == {"scaled"}
    # fold 1 alone holds more than race_rows: the race still waits for fold 2 (RACE_FOLDS)
    assert len(folds[0][1]) >= 100 and RACE_FOLDS == 2
    early = TrainConfig(centre="auto", centre_candidates=("scaled", "knn"), centre_race_rows=100, seed=1)
    _, records_early, _ = select_centre(X, Y, early, 5)
    assert records_early["knn"]["folds"] == 2 and records_early["knn"]["rmse"] == knn["rmse"]
    off = TrainConfig(centre="auto", centre_candidates=("scaled", "knn"), centre_race_rows=None, seed=1)
    _, records_off, oof_off = select_centre(X, Y, off, 5)
    assert set(oof_off) == {"scaled", "knn"} and records_off["knn"]["folds"] == 5
    np.testing.assert_array_equal(oof_off["knn"], whole)


def test_at_or_below_the_screen_size_every_candidate_runs_every_fold_as_with_the_screen_off():
    X, Y = linear(m=300, scale=1000.0)
    on = TrainConfig(centre="auto", centre_candidates=("paper", "scaled", "knn", "stack"), centre_screen_rows=300)
    off = TrainConfig(centre="auto", centre_candidates=("paper", "scaled", "knn", "stack"), centre_screen_rows=None)
    chosen_on, rec_on, oof_on = select_centre(X, Y, on, 5)
    chosen_off, rec_off, oof_off = select_centre(X, Y, off, 5)
    assert chosen_on == chosen_off and set(oof_on) == set(oof_off) == {"paper", "scaled", "knn", "stack"}
    for name in oof_on:
        np.testing.assert_array_equal(oof_on[name], oof_off[name])
        assert rec_on[name]["status"] == "kept" and rec_on[name]["folds"] == 5 and "screen" not in rec_on[name]
        assert rec_on[name]["rmse"] == rec_off[name]["rmse"]


def test_stack_blends_only_candidates_that_completed_every_fold():
    X, Y = linear(scale=1000.0)
    config = TrainConfig(centre="auto", centre_candidates=("paper", "scaled", "stack"), centre_screen_rows=200)
    chosen, records, oof = select_centre(X, Y, config, 5)
    assert records["paper"]["status"] == "dropped" and chosen == "scaled"
    stack = records["stack"]
    assert stack["status"] == "dropped" and "1 did (scaled)" in stack["reason"] and "stack" not in oof


def test_train_records_the_screen_and_refuses_bad_settings_before_fitting():
    X, Y = linear(m=700, scale=1000.0)
    ds = Dataset("linear", X, Y, [f"x{i}" for i in range(8)], ["y1", "y2"], sha256="0" * 64)
    result = train(ds, TrainConfig(centre="auto", centre_candidates=("paper", "scaled", "knn"), methods=("ge",),
                                   centre_screen_rows=200))
    assert result.centre["screen"] == {"rows": 200, "margin": 0.15, "race_margin": 0.1, "race_rows": 500,
                                       "applied": True}
    assert "screened on 200 rows of fold 1" in result.centre["selected_by"]
    assert set(result.centre["cv"]) == {"paper", "scaled", "knn"}
    assert {"preprocess", "centre selection", "centre", "ge", "test"} <= set(result.stages)
    for field, value in (("centre_screen_rows", 10), ("centre_screen_rows", 2.5), ("centre_screen_margin", -0.1),
                         ("centre_race_margin", float("nan")), ("centre_race_rows", 0), ("centre_race_rows", 1.5)):
        with pytest.raises(InputError) as err:
            train(ds, TrainConfig(centre="auto", methods=("ge",), **{field: value}))
        assert err.value.field == field


def _write_csv(path, X, Y):
    lines = [",".join([*(f"x{i}" for i in range(X.shape[1])), "y1", "y2"])]
    lines += [",".join(f"{v:.6g}" for v in [*x, *y]) for x, y in zip(X, Y)]
    path.write_text("\n".join(lines) + "\n")


@pytest.mark.slow
def test_cli_manifest_and_report_list_every_candidate_with_what_it_was_fitted_on(tmp_path, capsys):
    from training.commands.train import main

    X, Y = linear(m=700, scale=1000.0)
    csv = tmp_path / "linear.csv"
    _write_csv(csv, X, Y)
    out = tmp_path / "run"
    assert main(["--csv", str(csv), "--targets", "y1,y2", "--out", str(out), "--quiet", "--centre", "knn",
                 "--centre-screen", "200"]) == 2
    assert "--centre-screen is for --centre auto" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--csv", str(csv), "--targets", "y1,y2", "--out", str(out), "--centre-screen", "10"])
    assert "expected a row count of at least 50 or 'off'; got 10" in capsys.readouterr().err
    assert not out.exists()
    assert main(["--csv", str(csv), "--targets", "y1,y2", "--methods", "ge", "--out", str(out), "--quiet",
                 "--no-rssi", "--centre-candidates", "paper,scaled,knn", "--centre-screen", "200"]) == 0
    manifest = json.loads((out / "bundle" / "manifest.json").read_text())
    cv = manifest["training"]["centre"]["cv"]
    assert set(cv) == {"paper", "scaled", "knn"}
    for record in cv.values():
        assert {"status", "rows", "folds", "stage", "seconds", "rmse"} <= set(record)
        assert (record["status"] == "dropped") == ("reason" in record)
    assert cv["paper"]["status"] == "dropped"
    report = (out / "report.md").read_text()
    assert "## Centre candidates" in report and "| paper | dropped | 200 | 1 |" in report
    assert "## Where the time went" in report and "| centre selection |" in report
    metrics = json.loads((out / "metrics.json").read_text())
    assert {"load", "preprocess", "centre selection", "centre", "ge", "test", "save bundle", "plot"} \
        <= set(metrics["stages"])
    assert "(dropped at the screen)" in capsys.readouterr().out
    off = tmp_path / "off"
    assert main(["--csv", str(csv), "--targets", "y1,y2", "--methods", "ge", "--out", str(off), "--quiet",
                 "--no-rssi", "--centre-candidates", "paper,scaled,knn", "--centre-screen", "off"]) == 0
    manifest = json.loads((off / "bundle" / "manifest.json").read_text())
    assert manifest["training"]["centre"]["screen"]["applied"] is False
    assert all(r["status"] == "kept" and r["folds"] == 5 for r in manifest["training"]["centre"]["cv"].values())


@pytest.mark.slow
def test_the_candidates_of_a_fold_are_fitted_side_by_side_with_the_same_figures():
    """With two workers each fold's candidates (and the screen's) run on two worker threads at once (a barrier
    only two threads inside fits can pass); the records and out-of-fold centres are those of one after the
    other."""
    import threading

    X, Y = linear(m=700)
    meet = threading.Barrier(2, timeout=20)
    threads = []

    class Watched(TrainConfig):
        def make_centre(self, name=None):
            me = threading.current_thread().name
            if me != threading.main_thread().name and me not in threads:
                meet.wait()  # each worker's first fit waits for the other's: side by side, or BrokenBarrierError
            threads.append(me)
            return super().make_centre(name)

    kw = dict(centre="auto", centre_candidates=("scaled", "knn", "paper", "hgb"), centre_screen_rows=300, seed=2)
    one = select_centre(X, Y, Watched(**kw), 4, workers=1)
    assert set(threads) == {threading.main_thread().name}
    threads.clear()
    two = select_centre(X, Y, Watched(**kw), 4, workers=2)
    workers = [t for t in threads if t != threading.main_thread().name]
    assert len(workers) >= 4 and len(set(workers)) >= 2  # the screen's four candidates on worker threads at least
    assert two[0] == one[0]
    strip = lambda records: {n: {k: v for k, v in r.items() if k != "seconds"} for n, r in records.items()}  # noqa: E731
    assert _same(strip(two[1]), strip(one[1]))
    assert set(two[2]) == set(one[2])
    for name in one[2]:
        np.testing.assert_allclose(two[2][name], one[2][name], rtol=1e-9, atol=1e-9)


def _same(a, b) -> bool:
    """Nested records equal, floats to 1e-9 (a library may split a sum over threads differently)."""
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, float):
        return a == pytest.approx(b, rel=1e-9, abs=1e-12)
    return a == b


@pytest.mark.slow
def test_a_dominant_candidate_fits_alone_after_the_others_with_the_same_figures(monkeypatch):
    """A candidate slower than ``DOMINANT`` times the others together goes last, alone; otherwise the
    slowest goes first, in one run (so too when the dominant one took under ``DOMINANT_SECONDS``). ``hgb``
    (1,000 trees) against ``knn`` over four folds, the race off, any time dominant:
    from fold 2 on hgb fits after knn, and each candidate's out-of-fold centres are its own."""
    seconds = lambda **s: {n: {"seconds": v} for n, v in s.items()}  # noqa: E731
    assert _schedule(["a", "b", "c"], seconds(a=1.0, b=9.0, c=2.0)) == [["b", "c", "a"]]
    assert _schedule(["a", "b", "c"], seconds(a=1.0, b=DOMINANT * 3.0 + 0.1, c=2.0)) == [["b", "c", "a"]]  # too short
    big = 10 * DOMINANT_SECONDS
    assert _schedule(["a", "b", "c"], seconds(a=1.0, b=big, c=2.0)) == [["c", "a"], ["b"]]
    assert _schedule(["a", "b", "c"], seconds(a=big, b=big, c=2.0)) == [["a", "b", "c"]]
    assert _schedule(["a"], seconds(a=5.0)) == [["a"]] and _schedule([], {}) == []
    import training.pipeline.centre_selection

    monkeypatch.setattr(training.pipeline.centre_selection, "DOMINANT_SECONDS", 0.0)  # these fits take about a second
    X, Y = linear(m=600)
    kw = dict(centre="auto", centre_candidates=("knn", "hgb"), centre_screen_rows=None, seed=4)
    order = []

    class Watched(TrainConfig):
        def make_centre(self, name=None):
            order.append(name)
            return super().make_centre(name)

    chosen, records, oof = select_centre(X, Y, Watched(**kw), 4, workers=2)
    assert records["hgb"]["seconds"] > DOMINANT * records["knn"]["seconds"]
    assert order[2:] == ["knn", "hgb"] * 3  # fold 1 side by side in either order; then hgb after knn
    for name in ("knn", "hgb"):
        assert records[name]["status"] == "kept" and records[name]["folds"] == 4
        np.testing.assert_allclose(oof[name], out_of_fold_centers(X, Y, TrainConfig(**kw), 4, name=name), rtol=1e-9, atol=1e-9)


@pytest.mark.slow
@pytest.mark.parametrize("screen", [200, 1000])  # 1000: no screen; the race from 500 rows scored (fold 3)
def test_without_a_use_for_out_of_fold_centres_the_last_one_standing_stops_there(screen):
    """``complete=False``: the same choice and the same records for the dropped, but the survivor stops where the
    others fell (its error on the rows scored so far, or the screen's) and no out-of-fold centres come back."""
    X, Y = linear(scale=1000.0)
    config = TrainConfig(centre="auto", centre_candidates=("paper", "scaled", "knn", "stack"), centre_screen_rows=screen,
                         seed=3)
    chosen, full, oof = select_centre(X, Y, config, 5)
    short_chosen, short, short_oof = select_centre(X, Y, config, 5, complete=False)
    assert short_chosen == chosen == "scaled" and short_oof == {}
    others = [n for n in ("paper", "knn") if full[n]["status"] == "dropped"]
    assert others == ["paper", "knn"]
    strip = lambda r: {k: v for k, v in r.items() if k != "seconds"}  # noqa: E731
    for name in others:
        assert strip(short[name]) == strip(full[name])
    fell = max(full[n]["folds"] if full[n]["stage"] == "race" else 0 for n in others)
    record = short["scaled"]
    assert record["status"] == "kept" and "the last one standing" in record["reason"]
    assert "screen_errors" not in record and short["stack"]["status"] == "dropped"
    assert (fell == 0) == (screen == 200)
    if fell == 0:
        assert record["stage"] == "screen" and record["rmse"] == full["scaled"]["screen"]["rmse"]
    else:
        seen = np.concatenate([fold for _, fold in fold_splits(len(X), 5, config.seed)[:fell]])
        assert record["folds"] == fell < 5 and f"after {fell} of 5 folds" in record["reason"]
        assert record["rmse"] == pytest.approx(centre_errors(Y[seen], oof["scaled"][seen])["rmse"], rel=1e-12)


class _Shrunk:
    """A linear fit whose slope shrinks as its training rows grow (``200 / rows`` above 200): best of all on
    a screen's few rows, worse than a 3-NN average with all of them. What the screen cannot see."""

    def fit(self, X, Y):
        from sklearn.linear_model import LinearRegression

        self.lin_, self.mean_, self.shrink_ = LinearRegression().fit(X, Y), Y.mean(axis=0), min(1.0, 200 / len(X))
        return self

    def predict(self, X):
        return self.mean_ + self.shrink_ * (self.lin_.predict(X) - self.mean_)


class _Own(TrainConfig):
    def make_centre(self, name=None):
        from sklearn.neighbors import KNeighborsRegressor

        return _Shrunk() if name == "shrunk" else KNeighborsRegressor(3) if name == "knn3" else super().make_centre(name)


def _units_survey(m=1000, n_units=10, seed=0):
    """Targets linear in 2 features; each row belongs to one of ``n_units`` units (a phone)."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, size=(m, 2))
    Y = 10 * X @ np.array([[1.0, 0.5], [-0.5, 1.0]]) + 0.05 * rng.normal(size=(m, 2))
    return X, Y, rng.integers(0, n_units, size=m)


def _invariant(X, Y, units, config, k, chosen, records, oof):
    """No dropped candidate has a smaller error than the chosen one on the rows it was scored on."""
    folds = fold_splits(len(X), k, config.seed, units)
    for name, record in records.items():
        if record["status"] != "dropped":
            continue
        rows = np.concatenate([folds[j - 1][1] for j in record["scored_folds"]])
        assert centre_errors(Y[rows], oof[chosen][rows], units=units[rows])["rmse"] <= record["rmse"] + 1e-12, name


def test_over_unit_folds_the_screen_judges_every_fold_and_a_candidate_it_wrongly_dropped_is_recalled():
    X, Y, units = _units_survey()
    config = _Own(centre="auto", centre_candidates=("shrunk", "knn3"), centre_screen_rows=100, seed=0)
    chosen, records, oof = select_centre(X, Y, config, 5, units, units=True)
    folds = fold_splits(len(X), 5, config.seed, units)
    # the screen fitted each candidate on 100 rows of each of the 5 unit folds: shrunk led there
    assert records["shrunk"]["screen"]["folds"] == 5 and len(records["shrunk"]["screen"]["per_fold"]) == 5
    assert records["shrunk"]["screen"]["rmse"] < records["knn3"]["screen"]["rmse"] / (1 + config.centre_screen_margin)
    # ... but knn3, dropped there, beat shrunk's all-row fits on those rows: recalled, both ran every fold,
    # and the better of the two on all the rows stands
    assert chosen == "knn3" and records["knn3"]["status"] == "kept" and records["knn3"].get("recalled") is True
    shrunk = records["shrunk"]
    assert shrunk["status"] == "dropped" and shrunk["stage"] == "recall" and shrunk["scored_folds"] == [1, 2, 3, 4, 5]
    assert "knn3 was recalled" in shrunk["reason"]
    whole = out_of_fold_centers(X, Y, config, 5, groups=units, name="knn3")
    np.testing.assert_array_equal(oof["knn3"], whole)
    assert records["knn3"]["rmse"] == pytest.approx(centre_errors(Y, whole, units=units)["rmse"])
    shrunk_oof = out_of_fold_centers(X, Y, config, 5, groups=units, name="shrunk")
    assert shrunk["rmse"] == pytest.approx(centre_errors(Y, shrunk_oof, units=units)["rmse"])
    assert shrunk["rmse"] > records["knn3"]["rmse"]
    _invariant(X, Y, units, config, 5, chosen, records, oof)
    # the one-fold screen of ungrouped folds keeps its old behaviour: knn3 dropped on fold 1, shrunk chosen
    plain, plain_records, _ = select_centre(X, Y, config, 5, units)
    assert plain == "shrunk" and plain_records["knn3"]["scored_folds"] == [1] and folds


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_over_unit_folds_the_chosen_centre_never_trails_a_dropped_one_where_both_were_scored(seed):
    X, Y, units = _units_survey(m=900, seed=seed)
    Y = Y + 3 * np.sin(3 * X[:, :1])  # a bend: the SVRs and knn contend
    config = TrainConfig(centre="auto", centre_candidates=("paper", "scaled", "knn"), centre_screen_rows=150,
                         seed=seed)
    chosen, records, oof = select_centre(X, Y, config, 5, units, units=True)
    assert any(r["status"] == "dropped" for r in records.values())
    for record in records.values():
        assert record["scored_folds"] and set(record["scored_folds"]) <= {1, 2, 3, 4, 5}
        if record["stage"] == "race":  # judged on two folds at least, or on every fold, the unrun ones by the screen
            assert record["folds"] >= RACE_FOLDS or "it cannot win" in record["reason"]
    _invariant(X, Y, units, config, 5, chosen, records, oof)


class _Offset:
    """A linear fit moved by ``offset`` in every target: behind the plain fit by the same share on every fold."""

    fits = 0  # every fit of every instance (the race's refits are counted on it)

    def __init__(self, offset: float):
        self.offset = offset

    def fit(self, X, Y):
        from sklearn.linear_model import LinearRegression

        type(self).fits += 1
        self.lin_ = LinearRegression().fit(X, Y)
        return self

    def predict(self, X):
        return self.lin_.predict(X) + self.offset


class _Linear(TrainConfig):
    def make_centre(self, name=None):
        offsets = {"lin": 0.0, "off": 0.018, "near": 0.002}
        return _Offset(offsets[name]) if name in offsets else super().make_centre(name)


@pytest.mark.parametrize("complete", [True, False])
def test_over_unit_folds_a_candidate_that_cannot_win_is_dropped_inside_the_race_margin(complete):
    """``off`` trails ``lin`` by about 6 % on every fold, inside the 10 % race margin: without the projection it
    ran every fold. Projected from the screen onto the folds still to run, it cannot win, and is dropped."""
    X, Y, units = _units_survey()
    config = _Linear(centre="auto", centre_candidates=("lin", "off"), centre_screen_rows=100, seed=0)
    chosen, records, oof = select_centre(X, Y, config, 5, units, complete=complete, units=True)
    off = records["off"]
    assert chosen == "lin" and off["status"] == "dropped" and off["stage"] == "race" and off["folds"] < 5
    assert "it cannot win" in off["reason"] and off["scored_folds"] == list(range(1, off["folds"] + 1))
    folds = fold_splits(len(X), 5, config.seed, units)
    seen = np.concatenate([f for _, f in folds[:off["folds"]]])
    lin_oof = out_of_fold_centers(X, Y, config, 5, groups=units, name="lin")
    lin_seen = centre_errors(Y[seen], lin_oof[seen], units=units[seen])["rmse"]
    assert lin_seen < off["rmse"] < (1 + config.centre_race_margin) * lin_seen  # behind, but inside the margin
    projected = off["projected"]
    assert projected["against"] == "lin" and projected["high"] >= projected["low"] > projected["against_high"]
    # the projection was right: on every fold with all the rows, off ends behind lin
    off_oof = out_of_fold_centers(X, Y, config, 5, groups=units, name="off")
    assert centre_errors(Y, off_oof)["rmse"] > centre_errors(Y, lin_oof)["rmse"]
    assert centre_errors(Y, off_oof)["rmse"] < (1 + config.centre_race_margin) * centre_errors(Y, lin_oof)["rmse"]
    if complete:
        np.testing.assert_array_equal(oof["lin"], lin_oof)
    else:
        assert records["lin"]["folds"] == off["folds"] and "the last one standing" in records["lin"]["reason"]
    _invariant(X, Y, units, config, 5, chosen, records, {"lin": lin_oof})
    # a near tie (0.2 %) stays within what the ratios seen allow: both run every fold
    tie = _Linear(centre="auto", centre_candidates=("lin", "near"), centre_screen_rows=100, seed=0)
    _, tie_records, _ = select_centre(X, Y, tie, 5, units, complete=complete, units=True)
    assert [r["status"] for r in tie_records.values()] == ["kept", "kept"]
    assert [r["folds"] for r in tie_records.values()] == [5, 5]


def test_a_unit_fold_the_screen_fitted_whole_is_not_fitted_again():
    """With 850 screen rows, every unit fold's training rows (about 800) fit the screen whole: the race takes
    each fold's centres from the screen, and they are the folds' own out-of-fold centres."""
    X, Y, units = _units_survey()
    config = _Linear(centre="auto", centre_candidates=("lin", "near"), centre_screen_rows=850, seed=0)
    folds = fold_splits(len(X), 5, config.seed, units)
    assert all(len(rest) <= 850 for rest, _ in folds) and len(X) > 850
    _Offset.fits = 0
    chosen, records, oof = select_centre(X, Y, config, 5, units, units=True)
    assert _Offset.fits == 2 * 5  # the screen's fits, none in the race
    assert records["lin"]["folds"] == 5 and records["lin"]["stage"] == "cv"
    for name in ("lin", "near"):
        np.testing.assert_array_equal(oof[name], out_of_fold_centers(X, Y, config, 5, groups=units, name=name))


def test_over_unit_folds_a_lazy_learner_is_screened_on_every_training_row_and_not_refitted():
    X, Y, units = _units_survey()
    config = TrainConfig(centre="auto", centre_candidates=("scaled", "knn"), centre_screen_rows=100,
                         centre_screen_margin=100.0, centre_race_margin=100.0, seed=0)  # both run every fold
    chosen, records, oof = select_centre(X, Y, config, 5, units, units=True)
    folds = fold_splits(len(X), 5, config.seed, units)
    assert records["scaled"]["screen"]["rows"] == 100
    assert records["knn"]["screen"]["rows"] == round(np.mean([len(rest) for rest, _ in folds]))
    # knn's screen fits were its folds' own: its out-of-fold centres are those of all the rows, and its
    # screen error is its cross-validated error
    np.testing.assert_array_equal(oof["knn"], out_of_fold_centers(X, Y, config, 5, groups=units, name="knn"))
    assert records["knn"]["rmse"] == pytest.approx(records["knn"]["screen"]["rmse"])
    assert records["scaled"]["rmse"] != pytest.approx(records["scaled"]["screen"]["rmse"])


def test_over_unit_folds_the_screen_drops_a_candidate_far_behind_after_two_folds():
    X, Y = linear(m=1000, scale=1000.0)  # the paper's SVR cannot follow targets of this scale
    units = np.random.default_rng(0).integers(0, 10, size=len(X))
    config = TrainConfig(centre="auto", centre_candidates=("paper", "scaled"), centre_screen_rows=300, seed=0)
    chosen, records, _ = select_centre(X, Y, config, 5, units, units=True)
    folds = fold_splits(len(X), 5, config.seed, units)
    paper = records["paper"]
    assert chosen == "scaled" and paper["status"] == "dropped" and paper["stage"] == "screen"
    assert paper["folds"] == RACE_FOLDS and paper["scored_folds"] == [1, 2] and len(paper["screen"]["per_fold"]) == 2
    assert "the first 2 of 5 unit folds" in paper["reason"]
    # its figure is its error on the two folds' held-out rows, fitted on 300 rows of each
    rng = np.random.default_rng(config.seed)
    pred = {}
    for rest, fold in folds[:2]:
        sub = np.sort(rng.choice(rest, 300, replace=False))
        pred[tuple(fold)] = config.make_centre("paper").fit(X[sub], Y[sub]).predict(X[fold])
    rows = np.concatenate([f for _, f in folds[:2]])
    P = np.concatenate([pred[tuple(f)] for _, f in folds[:2]])
    assert paper["rmse"] == pytest.approx(centre_errors(Y[rows], P, units=units[rows])["rmse"])
    assert records["scaled"]["screen"]["folds"] == 5


class _UnitBias:
    """A linear fit on the first two features moved by ``bias`` in both targets on the rows whose unit (feature 3)
    is in ``on``: its error is ``bias * sqrt(2)`` there and the noise elsewhere, whatever it was fitted on."""

    def __init__(self, on, bias: float, lazy: bool):
        self.on, self.bias, self.lazy = tuple(on), bias, lazy

    def fit(self, X, Y):
        from sklearn.linear_model import LinearRegression

        self.lin_ = LinearRegression().fit(X[:, :2], Y)
        return self

    def predict(self, X):
        return self.lin_.predict(X[:, :2]) + self.bias * np.isin(X[:, 2], self.on)[:, None]


class _Biased(TrainConfig):
    biases: dict = {}

    def make_centre(self, name=None):
        return _UnitBias(*self.biases[name]) if name in self.biases else super().make_centre(name)


def _unit_survey(sizes):
    """``_units_survey``'s targets with each row's unit (``sizes[u]`` rows of unit ``u``) as a third feature."""
    units = np.repeat(np.arange(len(sizes)), sizes)
    X, Y, _ = _units_survey(m=len(units))
    return np.column_stack([X, units]), Y, units


def test_over_unit_folds_each_unit_weighs_the_same():
    """Unit 0 holds 80 % of the rows. ``big`` is off by 1 on each of the four small units, ``small`` by 1.5 on
    the big one: over the rows ``big`` wins (mean square 0.2 * 2 against 0.8 * 1.5^2 * 2), with each unit
    weighing the same ``small`` does (mean RMSE 0.3 sqrt 2 against 0.8 sqrt 2, plus the noise), as the calibration across units weighs them."""
    X, Y, units = _unit_survey([800, 50, 50, 50, 50])
    config = _Biased(centre="auto", centre_candidates=("big", "small"), centre_screen_rows=None, seed=0)
    config.biases = {"big": ((1, 2, 3, 4), 1.0, False), "small": ((0,), 1.5, False)}
    chosen, records, oof = select_centre(X, Y, config, 5, units, units=True)
    assert chosen == "small"
    for name in ("big", "small"):
        e = np.linalg.norm(Y - oof[name], axis=1)
        per_unit = [np.sqrt(np.mean(e[units == u] ** 2)) for u in range(5)]
        assert records[name]["rmse"] == pytest.approx(np.mean(per_unit), rel=1e-12)
    noise = 0.05 * np.sqrt(2)  # the targets' noise, each row's error off the biased units
    assert records["small"]["rmse"] == pytest.approx((1.5 * np.sqrt(2) + 4 * noise) / 5, rel=0.05)
    pooled, pooled_records, _ = select_centre(X, Y, config, 5, units)  # group folds, every row weighing the same
    assert pooled == "big" and pooled_records["big"]["rmse"] == pytest.approx(np.sqrt(0.2 * 2), rel=0.05)


def test_over_unit_folds_a_candidate_behind_on_the_first_folds_but_ahead_on_all_stands():
    """``late`` is off by 1 on the units of folds 1 and 2 and exact elsewhere; ``even`` is off by 0.5 on every
    unit. After two folds ``late`` is twice ``even``'s error, past both margins; on all five it is ahead (0.4
    sqrt 2 against 0.5 sqrt 2). Both lazy (their screen is their fit): neither is dropped before every fold is
    scored, and ``late`` stands, ``even`` dropped at the screen's end."""
    X, Y, units = _unit_survey([200] * 5)
    config = _Biased(centre="auto", centre_candidates=("even", "late"), centre_screen_rows=100, seed=0)
    folds = fold_splits(len(X), 5, config.seed, units)
    first = [int(units[folds[i][1][0]]) for i in (0, 1)]
    config.biases = {"late": (first, 1.0, True), "even": (range(5), 0.5, True)}
    chosen, records, oof = select_centre(X, Y, config, 5, units, units=True)
    assert chosen == "late" and records["late"]["status"] == "kept"
    assert records["late"]["screen"]["per_fold"][0] > 1.9 * records["even"]["screen"]["per_fold"][0]
    even = records["even"]
    assert even["status"] == "dropped" and even["stage"] == "screen" and even["scored_folds"] == [1, 2, 3, 4, 5]
    assert records["late"]["rmse"] == pytest.approx((2 * np.sqrt(2) + 3 * 0.05 * np.sqrt(2)) / 5, rel=0.05)
