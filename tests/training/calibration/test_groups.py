"""Grouped calibration end to end: the guarantee at new groups (statistically), the grouped
protocol of lmve-train (automatic grouping, --groups errors), and what the bundle records."""

from __future__ import annotations

import json

import numpy as np
import pytest

from models.bundle import load_bundle
from models.centres import SVRCentre
from models.calibration.conformal import SplitConformalCalibrator
from models.shapes import GaussianEllipsoid
from training.commands.train import main
from training.data.synthetic import make_survey, make_visits


@pytest.fixture(scope="module")
def survey_scores():
    """GE scores of every reading of a 300-point survey, shapes and centre fitted on 60 other points."""
    X, Y, point, _, _, _ = make_survey(n_points=360, readings=8, seed=5)
    train = point < 60
    centre = SVRCentre(scale_targets=True).fit(X[train], Y[train])
    R = Y - centre.predict(X)
    ge = GaussianEllipsoid().fit(X[train], R[train])
    scores = ge.conformity_scores(X, R)
    return scores[~train], point[~train], scores[train]


def per_group_coverage(inside: np.ndarray, groups: np.ndarray) -> float:
    """Mean over groups of each group's coverage: a random new group, then a random reading of it."""
    _, codes = np.unique(groups, return_inverse=True)
    return float(np.mean(np.bincount(codes, weights=inside) / np.bincount(codes)))


def test_exact_group_rule_covers_new_groups_over_200_random_group_splits(survey_scores):
    scores, point, _ = survey_scores
    eta, rng = 0.9, np.random.default_rng(0)
    ids = np.unique(point)
    coverage = {"group-subsample": [], "group-pooled": []}
    for split in range(200):
        cal_ids = rng.choice(ids, size=100, replace=False)
        cal = np.isin(point, cal_ids)
        for rule, cov in coverage.items():
            c = SplitConformalCalibrator(rule, random_state=split).fit(scores[cal], point[cal])
            cov.append(per_group_coverage(scores[~cal] <= c.quantile(eta), point[~cal]))
    assert np.mean(coverage["group-subsample"]) >= eta - 0.01, np.mean(coverage["group-subsample"])
    # the pooled rule is reported, not guaranteed: it stays close here
    assert abs(np.mean(coverage["group-pooled"]) - eta) < 0.03


def test_calibrating_at_surveyed_points_does_not_cover_new_points(survey_scores):
    """Why the grouped protocol exists: scores of the training points' own readings are too small."""
    scores, point, train_scores = survey_scores
    threshold = SplitConformalCalibrator().fit(train_scores).quantile(0.9)
    assert per_group_coverage(scores <= threshold, point) < 0.85


def write_survey_csv(path, n_points=120, sites=2):
    X, Y, point, device, names, _ = make_survey(n_points=n_points, readings=6, seed=2)
    site = np.where(point % sites == 0, "north", "south")
    header = ",".join([*names, "x", "y", "site", "device"])
    rows = [",".join([*map(str, X[i]), str(Y[i, 0]), str(Y[i, 1]), site[i], f"phone-{device[i]}"])
            for i in range(len(Y))]
    path.write_text(header + "\n" + "\n".join(rows) + "\n")
    return path


BEACONS = ",".join(f"beacon_{i:02d}" for i in range(1, 17))


def train_csv(csv, out, *extra) -> int:
    """lmve-train on ``csv`` with held-out calibration positions (the split mode these tests are about; a survey
    this small would cross-fit under auto: tests/training/calibration/test_cross_fit.py)."""
    return main(["--csv", str(csv), "--targets", "x,y", "--out", str(out), "--quiet", "--methods", "ge,nle",
                 "--calibration", "split", *extra])


@pytest.mark.slow
def test_positions_that_repeat_are_grouped_automatically(tmp_path, capsys):
    csv = write_survey_csv(tmp_path / "survey.csv")
    out = tmp_path / "run"
    assert train_csv(csv, out, "--features", BEACONS) == 0
    printed = capsys.readouterr().out
    assert "grouped by position (120 positions)" in printed and "--groups none" in printed
    assert "for a reading at a position not in the survey" in printed
    m = load_bundle(out / "bundle").manifest
    cal = m["calibration"]
    assert cal["rule"] == "group-subsample" and cal["grouping"]["by"] == "position" and cal["grouping"]["automatic"]
    assert cal["n_calibration"] == cal["n_groups"] >= 9 and cal["n_rows"] == 6 * cal["n_groups"]
    assert m["training"]["cross_fit"] == 5
    report = (out / "report.md").read_text()
    assert "position not in the survey" in report
    # the test coverage is counted over the test positions, each method's interval and verdict in the report
    n_test = m["training"]["rows"]["test"] // 6
    for name, figures in json.loads((out / "metrics.json").read_text())["metrics"].items():
        test = figures["coverage_test"]
        assert test["unit"] == "groups" and test["n"] == n_test
        assert test["verdict"] in ("within", "short", "above", "inconclusive")
        assert f"**{name.upper()}**: {100 * test['estimate']:.1f} % over {n_test} test positions" in report
    # --groups none: the paper's row protocol
    assert train_csv(csv, tmp_path / "rows", "--features", BEACONS, "--groups", "none") == 0
    cal = load_bundle(tmp_path / "rows" / "bundle").manifest["calibration"]
    assert cal["rule"] == "rows" and cal["grouping"] is None
    # the pooled rule: every calibration reading, each position weighted equally
    assert train_csv(csv, tmp_path / "pooled", "--features", BEACONS, "--group-rule", "pooled") == 0
    model = load_bundle(tmp_path / "pooled" / "bundle")
    cal = model.manifest["calibration"]
    assert cal["rule"] == "group-pooled" and cal["n_rows"] == 6 * cal["n_calibration"]
    assert "asymptotically" in cal["guarantee"]
    assert model.methods["ge"].calibrator_.weights_.sum() == pytest.approx(1.0)


@pytest.mark.slow
def test_group_columns_of_any_type_are_never_features(tmp_path):
    csv = write_survey_csv(tmp_path / "survey.csv")
    out = tmp_path / "run"
    # default features: every column but the targets and the group columns that is a reading; 'site' and
    # 'device' are text: left out (and said so), kept with each row
    assert train_csv(csv, out, "--groups", "x,y") == 0
    m = load_bundle(out / "bundle").manifest
    assert m["feature_names"] == BEACONS.split(",") and set(m["dataset"]["left_out"]) == {"site", "device"}
    assert train_csv(csv, out, "--groups", "x,y,site,device") == 0  # grouped by all four; beacons are the rest
    m = load_bundle(out / "bundle").manifest
    assert m["feature_names"] == BEACONS.split(",") and m["calibration"]["grouping"]["by"] == "x, y, site, device"


@pytest.mark.parametrize(("groups", "message"), [
    ("room", "group column(s) ['room'] not found"),
    ("site", "gives 2 groups"),
])
def test_bad_groups_are_named_and_write_nothing(tmp_path, capsys, groups, message):
    csv = write_survey_csv(tmp_path / "survey.csv", sites=1 if groups == "site" else 2)
    out = tmp_path / "run"
    assert train_csv(csv, out, "--groups", groups, "--features", BEACONS) == 2
    err = capsys.readouterr().err
    assert message in err or ("gives 1 group" in err and groups == "site"), err
    assert not out.exists()


@pytest.mark.slow
def test_a_survey_of_40_positions_moves_positions_into_calibration(tmp_path, capsys):
    csv = write_survey_csv(tmp_path / "survey.csv", n_points=40)
    out = tmp_path / "run"
    assert train_csv(csv, out, "--features", BEACONS) == 0
    printed = capsys.readouterr().out
    assert "left 4 of the 40 groups for calibration, which attain at most 0.8" in printed
    m = load_bundle(out / "bundle").manifest
    adj = m["calibration"]["split_adjustment"]
    assert m["calibration"]["n_calibration"] == adj["groups"]["calibration"] == 9
    assert adj["groups_before"]["calibration"] == 4 and adj["moved_from_train"] + adj["moved_from_test"] == 5
    assert adj["train_rows"] == m["training"]["rows"]["train"] == adj["train_rows_before"] - 6 * adj["moved_from_train"]
    assert "few groups:" in (out / "report.md").read_text()


def write_visits_csv(path, n_subjects: int, visits=(4, 12)):
    X, Y, subject, names, targets = make_visits(n_subjects, *visits, seed=3)
    header = ",".join([*names, *targets, "subject"])
    rows = [",".join([*map(str, X[i]), *map(str, Y[i]), f"s{subject[i]:02d}#"]) for i in range(len(Y))]
    path.write_text(header + "\n" + "\n".join(rows) + "\n")
    return path


@pytest.mark.slow
def test_a_study_of_28_subjects_trains_at_90_with_its_guarantee_stated(tmp_path, capsys):
    csv = write_visits_csv(tmp_path / "visits.csv", 28)
    out = tmp_path / "run"
    assert main(["--csv", str(csv), "--targets", "measure_a,measure_b", "--groups", "subject", "--out", str(out),
                 "--quiet", "--methods", "ge,nle", "--calibration", "split"]) == 0
    printed = capsys.readouterr().out
    assert "few groups:" in printed and "so that its 9 groups attain 0.9" in printed
    model = load_bundle(out / "bundle")
    cal = model.manifest["calibration"]
    assert cal["guarantee"].startswith("P >= 0.9 for a row from a subject group not in the training data")
    assert cal["n_calibration"] == 9 and model.max_coverage() == pytest.approx(0.9)
    assert model.methods["ge"].alpha_q_ < np.inf
    assert model.manifest["training"]["cross_fit"] == 5


@pytest.mark.slow
@pytest.mark.parametrize(("subjects", "highest"), [(5, "2/3 = 0.6667"), (11, "8/9 = 0.8889")])
def test_too_few_groups_are_refused_naming_the_highest_level(tmp_path, capsys, subjects, highest):
    csv = write_visits_csv(tmp_path / "visits.csv", subjects, visits=(15, 20))
    out = tmp_path / "run"
    assert main(["--csv", str(csv), "--targets", "measure_a,measure_b", "--groups", "subject", "--out", str(out),
                 "--quiet", "--methods", "ge,nle", "--calibration", "split"]) == 2
    err = capsys.readouterr().err
    assert f"the rows form {subjects} groups; coverage 0.9 needs 9 calibration groups" in err
    assert f"The highest level {subjects} groups attain is {highest}" in err
    assert not out.exists()
    # and at that level, it trains
    level = highest.split("= ")[1]
    assert main(["--csv", str(csv), "--targets", "measure_a,measure_b", "--groups", "subject", "--out", str(out),
                 "--quiet", "--methods", "ge,nle", "--calibration", "split", "--coverage", str(float(level) - 1e-4)]) == 0
    if subjects == 5:  # 2 training subjects: folds too small for NLE; the test part alone chooses, and says so
        sel = load_bundle(out / "bundle").selection
        assert sel["folds"] == 0 and sel["rows"] == "test part"
        assert "cross-fit of the train part could not run (NearestNeighbourEllipsoid needs" in sel["cross_fit_skipped"]
        assert "could not run" in capsys.readouterr().out


@pytest.mark.slow
def test_the_served_model_states_its_grouping_and_guarantee(tmp_path):
    from fastapi.testclient import TestClient

    from service.app import create_app
    from service.settings import ServiceSettings

    csv = write_survey_csv(tmp_path / "survey.csv")
    assert train_csv(csv, tmp_path / "run", "--features", BEACONS) == 0
    with TestClient(create_app(ServiceSettings(bundle=tmp_path / "run" / "bundle"))) as client:
        body = client.get("/model").json()
    cal = body["calibration"]
    assert cal["rule"] == "group-subsample" and cal["grouping"]["by"] == "position"
    assert "position not in the survey" in body["guarantee"]["words"]
    m = cal["n_calibration"]
    assert body["guarantee"]["n_units"] == m and body["guarantee"]["units"] == "positions"
    assert body["guarantee"]["form"] == "exact" and body["guarantee"]["bound"] == 0.9
    assert body["methods"]["ge"]["n_calibration"] == m
    assert body["methods"]["ge"]["max_coverage"] == pytest.approx(m / (m + 1))
