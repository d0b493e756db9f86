"""training/commands/train_report.py: the test table's intervals, the words on each method's coverage against the target, and
test_regions.png with one point per test position."""

from __future__ import annotations

import numpy as np
import pytest

from training.figures.coverage import coverage_interval
from training.commands.train_report import coverage_words, metrics_table, part_words, plot_test_regions


def metrics_of(**tests) -> dict:
    """Metrics rows whose test coverage is ``coverage_interval`` of the given (inside, groups)."""
    out = {}
    for name, (inside, groups) in tests.items():
        test = coverage_interval(inside, 0.9, groups)
        out[name] = {"coverage": float(np.mean(inside)), "volume": 1.0, "volume_paper": 1.0, "centre_rmse": 0.5,
                     "fit_seconds": 0.1, "coverage_test": test}
    return out


def test_the_table_gives_each_interval_and_the_words_say_where_the_target_lies():
    groups = np.repeat(np.arange(20), 10)
    metrics = metrics_of(
        nle=(np.repeat(np.arange(20) < 16, 10), groups),            # 80 % of 20 positions: chance can do it
        copula=(np.repeat(np.arange(20) < 10, 10), groups),         # 50 %: beyond chance
        ge=(np.repeat(np.arange(20) < 19, 10), groups),             # 95 % of 20: too few to tell
        ball=(np.arange(2000) % 10 != 0, np.repeat(np.arange(400), 5)))  # 90 % of 400 positions: holds
    table = metrics_table(metrics, 0.9)
    rows = {line.split()[0]: line for line in table.splitlines()[2:6]}
    assert "80.0% " in rows["NLE"] and "56.3-94.3%" in rows["NLE"] and rows["NLE"].split()[3] == "inconclusive"
    assert rows["Copula"].split()[3] == "short" and rows["GE"].split()[3] == "inconclusive"
    assert rows["Ball"].split()[3] == "within"
    assert "over the 20 test groups" in table
    words = dict(zip(("nle", "copula", "ge", "ball"), coverage_words(metrics, "positions")))
    assert "80.0 % over 20 test positions, 95 % interval 56.3-94.3 %" in words["nle"]
    assert "**inconclusive**" in words["nle"] and "20 test positions cannot tell" in words["nle"]
    assert f"about {metrics['nle']['coverage_test']['needed']} would" in words["nle"]
    assert "short of the 90.0 % target beyond its interval" in words["copula"]
    assert "inconclusive" in words["ge"] and "no shortfall" not in words["ge"]
    assert "no shortfall (one of more than 5.0 points is ruled out)" in words["ball"]
    # counted over rows, the same 80 % is a shortfall beyond chance
    rows_only = metrics_of(nle=(np.repeat(np.arange(20) < 16, 10), None))
    (line,) = coverage_words(rows_only, "positions")
    assert "over 200 test rows" in line and "beyond its interval" in line
    above = metrics_of(ge=(np.ones(400, bool), None))
    above["ge"]["coverage_test"] = coverage_interval(np.ones(400, bool), 0.98)
    assert "above the 98.0 % target" in coverage_words(above)[0]


def test_with_no_test_part_the_words_say_the_units_were_held_out_in_turn():
    units = np.repeat(np.arange(16), 10)
    metrics = metrics_of(ball=(np.repeat(np.arange(16) < 15, 10), units))
    assert "over the 16 held-out groups" in metrics_table(metrics, 0.9, "held-out")
    (line,) = coverage_words(metrics, "PHONEID units", "held-out")
    assert "over 16 held-out PHONEID units" in line and " test " not in line
    # which words a run gets: its across record says whether a test part measured it
    assert part_words({"across": {"held_out": "each unit scored by its fold's models"}}) == "held-out"
    assert part_words({"across": {"held_out": "test part"}}) == "test"
    assert part_words({}) == "test"


@pytest.mark.slow
def test_the_plot_draws_one_point_per_test_position(trained_synthetic, tmp_path):
    import pandas as pd

    result, ds = trained_synthetic
    test = result.split.test
    X, Y = ds.X[test], ds.Y[test]
    drawn = plot_test_regions(tmp_path / "test_regions.png", result.model, X, Y)
    positions = len(np.unique(Y, axis=0))
    assert positions < len(Y) and (tmp_path / "test_regions.png").stat().st_size > 10_000
    assert set(drawn) == set(result.model.serving_order)
    for name, figures in drawn.items():
        assert figures["points"] == positions and figures["unit"] == "groups" and figures["n"] == positions
        inside = result.model.predict_region(X, method=name).regions.contains(Y)
        shares = pd.DataFrame({"x": Y[:, 0], "y": Y[:, 1], "inside": inside}).groupby(["x", "y"])["inside"].mean()
        assert figures["estimate"] == pytest.approx(shares.mean())
    # rows that never share a position: one point per row
    once = np.unique(Y, axis=0, return_index=True)[1]
    drawn = plot_test_regions(tmp_path / "once.png", result.model, X[once], Y[once])
    assert all(f["points"] == positions and f["unit"] == "rows" for f in drawn.values())


def test_the_centre_line_says_which_fingerprint_configuration_won_and_by_how_much():
    """A real search (six phones 3 dB apart): the line names the configuration, its error against the
    textbook's, and that ``relative``, lowest by less than a standard error, gave way to the readings as they are."""
    from models.centres.fingerprint import tune
    from models.preprocessing import RSSIFloor
    from training.commands.train_report import centre_line
    from training.data.synthetic import make_survey
    from training.pipeline.centre import fingerprint_record

    X, Y, _, device, _, _ = make_survey(n_points=60, readings=10, n_beacons=16, n_devices=6, device_sd_db=3.0, seed=2)
    X = np.where(X <= -95, 100.0, X)
    step = RSSIFloor().fit(X)
    auto = {"representation": "auto", "cutoff_db": "auto", "n_neighbors": "auto", "weights": "auto"}
    fp = fingerprint_record(tune(step.transform(X)[:, step.columns_], Y, device, step.floor_, step.weakest_,
                                 step.reference_, auto))
    c = fp["chosen"]
    line = centre_line({"name": "fingerprint", "fingerprint": fp})
    assert (f"fingerprint configuration (72 searched, each unit held out): dbm, cutoff {c['cutoff_db']:g} dB, "
            f"k={c['n_neighbors']}, {c['weights']} weights, RMSE {fp['error']:.4g} against the textbook's "
            f"{fp['textbook']:.4g} ({100 * (1 - fp['error'] / fp['textbook']):.0f} % lower)") in line
    rule = fp["rule"]
    assert (f"relative had the lowest ({rule['lowest']['error']:.4g}), {rule['difference']:.3g} below on average "
            f"over the 6 units, within one standard error ({rule['standard_error']:.3g})") in line
    assert line.endswith("dbm kept")
