"""benchmarks.serving: which issue's target each result row is held to, and the table it writes."""

import json
from types import SimpleNamespace

import numpy as np

from benchmarks import serving


def row(bundle, route, scenario, value, **extra):
    return {"bundle": bundle, "centre": "KNNCentre", "route": route, "scenario": scenario, "value": value, **extra}


def test_issue_74_targets_replace_issue_32s_where_both_set_one():
    assert serving.target_of(row("default", "/predict-region", "single_over_noop", 0.5)) == (0.6, "min", 113)
    assert serving.target_of(row("default", "/contains", "contains_over_noop", 0.5)) == (0.55, "min", 74)
    assert serving.target_of(row("default", "/nle/predict-region", "single_over_noop", 0.5)) == (0.4, "min", 32)
    assert serving.target_of(row("default", "/predict-region", "rows_per_s_1024", 1)) == (100_000.0, "min", 32)
    assert serving.target_of(row("synthetic-knn", "/contains", "contains_over_noop", 0.5)) == (0.5, "min", 32)
    assert serving.target_of(row("synthetic-knn", "/predict-region", "rows_per_s_1024", 1)) is None
    # the repository's default route: issue 32's (issue 74 names the plain bundle's)
    assert serving.target_of(row("default (repository of 3)", "/predict-region", "single_over_noop", 0.5)) \
        == (0.5, "min", 32)


def test_the_fingerprint_bundle_is_held_to_issue_74s_targets_only():
    assert serving.target_of(row("uji-knn", "/predict-region", "single_over_noop", 0.3)) == (0.4, "min", 74)
    assert serving.target_of(row("uji-knn", "/predict-region", "rows_per_s_1024", 1)) == (40_000.0, "min", 74)
    assert serving.target_of(row("uji-knn", "/predict-region", "p99_256_ms", 1)) == (15.0, "max", 74)
    assert serving.target_of(row("uji-knn", "/contains", "contains_over_noop", 0.3)) is None
    assert serving.target_of(row("uji-knn", "/nle/predict-region", "single_over_noop", 0.3)) is None


def test_issue_113_holds_both_uji_bundles_over_binary_and_grpc():
    for name in ("uji-knn", "uji-fingerprint"):
        assert serving.target_of(row(name, "/v2/models/{name}/infer", "rows_per_s_1024_binary", 1)) \
            == (40_000.0, "min", 113)
        assert serving.target_of(row(name, "ModelInfer", "rows_per_s_1024_grpc", 1)) == (40_000.0, "min", 113)
    assert serving.target_of(row("default", "ModelInfer", "grpc_single_over_rest", 1)) == (1.0, "min", 113)
    assert serving.target_of(row("uji-fingerprint", "/predict-region", "rows_per_s_1024", 1)) is None


def test_the_table_marks_each_target_and_shows_the_no_ops_floor(tmp_path, monkeypatch):
    monkeypatch.setattr(serving, "OUT", tmp_path)
    rows = [row("uji-knn", "/predict-region", "p99_256_ms", 16.0, noop=9.5),
            row("uji-knn", "/predict-region", "rows_per_s_1024", 41_000, noop=30_000),
            row("default", "/predict-region", "single_over_noop", 0.56, rounds=[0.56], rps=[1], noop_rps=[2]),
            row("synthetic-knn", "/predict-region", "rows_per_s_1024", 9, noop=10)]
    serving.write(rows, "python -m benchmarks.serving", SimpleNamespace(rounds=1, seconds=2, latency_seconds=5))
    lines = (tmp_path / "serving.md").read_text().splitlines()
    assert "| uji-knn | KNNCentre | `/predict-region` | p99_256_ms | 16 | 9.5 | < 15 (74) | **no** |" in lines
    assert "| uji-knn | KNNCentre | `/predict-region` | rows_per_s_1024 | 41000 | 30000 | >= 40000 (74) | yes |" in lines
    assert "| default | KNNCentre | `/predict-region` | single_over_noop | 0.56 | - | >= 0.6 (113) | **no** |" in lines
    assert "| synthetic-knn | KNNCentre | `/predict-region` | rows_per_s_1024 | 9 | 10 | - | - |" in lines
    assert json.loads((tmp_path / "serving.json").read_text())["rows"] == rows


def test_the_radio_rows_are_held_to_issue_129s_targets():
    assert serving.target_of(row("uji-knn", "/predict-region", "radio_over_off", 0.9)) == (0.95, "min", 129)
    # the adapted model is another model: its speed is reported beside, held to nothing
    assert serving.target_of(row("default", "/predict-region", "radio_adapt_over_off", 0.9)) is None
    # an adaptation in flight keeps the bundle's own 256-row p99 budget
    assert serving.target_of(row("uji-knn", "/predict-region", "radio_adapting_p99_ms", 9)) == (15.0, "max", 129)
    assert serving.target_of(row("default", "/predict-region", "radio_adapting_p99_ms", 9)) == (50.0, "max", 129)


def test_the_drifted_body_loses_every_other_heard_transmitter(tmp_path):
    from models.bundle import load_bundle
    from models.radio import heard_mask
    from tests.radio_site import saved_site, walk

    site = saved_site(tmp_path)
    X, _ = walk(20, seed=3)
    base = load_bundle(site).radio_baseline
    before, after = heard_mask(X, base.rssi, base.unheard), heard_mask(serving.drifted_rows(site, X), base.rssi,
                                                                        base.unheard)
    heard = np.flatnonzero(before.any(axis=0))
    assert not (after & ~before).any()  # nothing heard that was not
    kept = np.flatnonzero(after.any(axis=0))
    assert len(kept) == len(heard) - (len(heard) + 1) // 2 and set(kept) < set(heard)
    np.testing.assert_array_equal(after[:, kept], before[:, kept])  # the kept ones as they were
