"""The floor part of a floor bundle (training.pipeline.floors, models.floors) on a synthetic multi-floor survey:
the joint guarantee over random splits (rows, and new groups), and the Bonferroni baseline it beats."""

from __future__ import annotations

import numpy as np
import pytest

from models.centres import KNNCentre
from models.centres.stack import fold_splits
from models.floors import FloorLabels
from models.predictor import SplitConformalRegressor
from models.shapes import GaussianEllipsoid
from training.pipeline.floors import bonferroni, bonferroni_sets, conformalize_floors, fit_floors, floor_metrics
from training.data.synthetic import make_floor_survey

ETA = 0.9
#: calibration units per split: (m + 1) eta = 98.1, so k = 99 and the expected coverage k / (m + 1) = 0.9083
#: sits inside [eta, eta + 2 / (m + 1)] with about 4 Monte Carlo standard errors (200 splits) on each side
M = 108


@pytest.fixture(scope="module")
def survey():
    X, Y, floor, point, _, _ = make_floor_survey(n_points=100, readings=10, seed=3)
    labels, codes = FloorLabels.of(["floor"], floor)
    return (X - X.mean(0)) / X.std(0), Y, codes, labels, point


def one_split(survey, tr, ca, te, seed, groups=None):
    """Fit centre, GE and floors on ``tr``, calibrate on ``ca`` (rows, or one row per group), answer ``te``:
    the joint and the Bonferroni figures."""
    Xs, Y, codes, labels, point = survey
    rule = "rows" if groups is None else "group-subsample"
    centre = KNNCentre(n_neighbors=5).fit(Xs[tr], Y[tr])
    C = centre.predict(Xs)
    for rest, fold in fold_splits(len(tr), 5, seed, None if groups is None else groups[tr]):
        C[tr[fold]] = KNNCentre(n_neighbors=5).fit(Xs[tr[rest]], Y[tr[rest]]).predict(Xs[tr[fold]])
    reg = SplitConformalRegressor(GaussianEllipsoid(), centre=centre, coverage=ETA, prefit_centre=True,
                                  calibration=rule, random_state=seed)
    g_ca = None if groups is None else groups[ca]
    reg.fit(Xs[tr], Y[tr], centers=C[tr]).conformalize(Xs[ca], Y[ca], centers=C[ca], groups=g_ca)
    floors = fit_floors(Xs[tr], codes[tr], labels, "knn", groups=None if groups is None else groups[tr], seed=seed)
    conformalize_floors(floors, {"ge": reg}, Xs[tr], Y[tr] - C[tr], Xs[ca], Y[ca] - C[ca], codes[ca], rule, g_ca,
                        seed)
    P = floors.proba(Xs[te])
    answer, alpha = floors.answer(P, "ge", ETA)
    M_te = reg.shape_.conformity_scores(Xs[te], Y[te] - C[te])
    area = reg.shape_.region(Xs[te], C[te], alpha, ETA).volume("lebesgue")
    joint = floor_metrics(answer.member, P, codes[te], M_te <= alpha, area)
    q_floor, q_ellipse = bonferroni(floors, reg, floors.proba(Xs[ca]), codes[ca], ETA, g_ca, seed)
    area_b = reg.shape_.region(Xs[te], C[te], q_ellipse, ETA).volume("lebesgue")
    bonf = floor_metrics(bonferroni_sets(P, q_floor), P, codes[te], M_te <= q_ellipse, area_b)
    if groups is not None:  # a new group, then a reading of it: each test group weighs the same
        _, inv = np.unique(groups[te], return_inverse=True)
        for figures, inside in ((joint, answer.member[np.arange(len(te)), codes[te]] & (M_te <= alpha)),
                                (bonf, bonferroni_sets(P, q_floor)[np.arange(len(te)), codes[te]] & (M_te <= q_ellipse))):
            figures["joint_coverage"] = float(np.mean(np.bincount(inv, weights=inside) / np.bincount(inv)))
    return joint, bonf


def summary(results):
    return {k: float(np.mean([r[k] for r in results])) for k in results[0]}


@pytest.mark.slow
def test_joint_coverage_over_200_random_row_splits_and_bonferroni_is_larger(survey):
    rng = np.random.default_rng(0)
    joint, bonf = [], []
    for seed in range(200):
        p = rng.permutation(len(survey[1]))
        j, b = one_split(survey, p[:700], p[700:700 + M], p[700 + M:], seed)
        joint.append(j)
        bonf.append(b)
    j, b = summary(joint), summary(bonf)
    assert ETA <= j["joint_coverage"] <= ETA + 2 / (M + 1), j
    assert b["joint_coverage"] >= ETA  # the union bound holds, loosely
    # the same splits: Bonferroni's ellipses are larger, its floor sets no smaller, so its regions are larger
    assert b["area_mean"] > 1.1 * j["area_mean"], (j, b)
    assert b["set_size_mean"] >= j["set_size_mean"] - 0.01, (j, b)
    assert b["region_mean"] > 1.1 * j["region_mean"], (j, b)
    assert j["set_size_mean"] > 1.0 and j["floor_hit_rate"] < 0.99  # floors are uncertain enough to matter


@pytest.mark.slow
def test_joint_coverage_at_new_groups_over_200_random_group_splits(survey):
    """Grouped calibration (one random reading per calibration point): the joint guarantee for a reading at
    a new point."""
    point = survey[4]
    ids = np.unique(point)
    rng = np.random.default_rng(1)
    joint = []
    for seed in range(200):
        order = rng.permutation(ids)
        tr, ca, te = (np.flatnonzero(np.isin(point, part)) for part in (order[:120], order[120:120 + M],
                                                                         order[120 + M:]))
        joint.append(one_split(survey, tr, ca, te, seed, groups=point)[0])
    j = summary(joint)
    assert ETA <= j["joint_coverage"] <= ETA + 2 / (M + 1), j


@pytest.fixture(scope="module")
def floor_bundle(tmp_path_factory):
    from training.commands.train import main

    out = tmp_path_factory.mktemp("floors")
    assert main(["--dataset", "floors", "--floor-column", "floor", "--methods", "ge,nle", "--groups", "none",
                 "--out", str(out), "--quiet"]) == 0
    return out / "bundle"


@pytest.mark.slow
def test_lmve_train_writes_a_floor_bundle_that_answers_floor_sets(floor_bundle, capsys):
    from models.bundle import load_bundle
    from training.data.datasets import load_dataset

    model = load_bundle(floor_bundle)
    floors = model.manifest["floors"]
    assert floors["file"] == "floors.npz" and floors["columns"] == ["floor"]
    assert floors["selection"]["chosen"] in ("knn", "logistic") and set(floors["selection"]["cv"]) == {"knn", "logistic"}
    assert set(floors["methods"]) == {"ge", "nle"} and "true floor in `floors`" in floors["guarantee"]
    # each candidate at the best point of its grid; the chosen one refitted with those parameters
    knn = floors["selection"]["cv"]["knn"]
    assert set(knn["grid"]) == {"n_neighbors=5", "n_neighbors=10", "n_neighbors=20"}
    assert knn["brier"] == min(knn["grid"].values()) == knn["grid"][f"n_neighbors={knn['params']['n_neighbors']}"]
    chosen = floors["selection"]["chosen"]
    assert floors["selection"]["params"] == floors["selection"]["cv"][chosen]["params"]
    assert floors["classifier"]["params"].items() >= floors["selection"]["params"].items()
    assert "jointly with the floor" in model.manifest["calibration"]["guarantee"]
    for figures in floors["metrics"].values():
        assert 0.8 <= figures["joint_coverage"] <= 1.0 and figures["set_size_mean"] >= 1.0
    ds = load_dataset("floors", seed=7)  # another draw of the same building: new readings
    answer = model.predict_region(ds.X)
    rows = answer.floors.rows()
    assert all(r and r[0]["probability"] >= r[-1]["probability"] for r in rows)
    assert {f["floor"] for r in rows for f in r} <= {0, 1, 2}
    # the ellipse is the joint one: its threshold is G_M^-1(t_q), not the position calibration's own
    t, alpha = model.floors.threshold(answer.method, model.coverage)
    assert answer.regions.alpha_q == alpha != model.methods[answer.method].alpha_q_
    assess = model.assess(ds.X, ds.Y, floors=ds.meta["floor"])
    np.testing.assert_array_equal(assess.floor_inside, answer.floors.member[np.arange(len(ds.Y)), ds.meta["floor"]])
    np.testing.assert_array_equal(assess.inside, assess.floor_inside & answer.regions.contains(ds.Y))
    alone = model.assess(ds.X, ds.Y)  # no floors: the point against the same ellipse
    assert alone.floor_inside is None
    np.testing.assert_array_equal(alone.inside, answer.regions.contains(ds.Y))


def test_floor_flags_are_checked_before_any_fit(tmp_path, capsys):
    from training.commands.train import main

    base = ["--dataset", "floors", "--methods", "ge", "--out", str(tmp_path / "x"), "--quiet"]
    assert main([*base, "--floor-column", "FLOOR"]) != 0
    assert "--floor-column FLOOR: the data has no such per-row column; its label columns are floor" in \
        capsys.readouterr().err
    assert main([*base, "--building-column", "floor"]) != 0
    assert "name the floors with --floor-column" in capsys.readouterr().err
    assert main([*base, "--floor-column", "floor", "--calibrate-across", "floor"]) != 0
    assert "do not combine yet" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()
