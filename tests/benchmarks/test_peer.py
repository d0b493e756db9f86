"""The peer (MAPIE 1.6's multivariate standardised residuals): regions read off its covariance and
conformal threshold, and the benchmark's mapie-mvsr method on the same split as ours."""

import json

import numpy as np
import pandas as pd
import pytest

from models.calibration.conformal import conformal_quantile
from tests.conftest import heteroscedastic, needs_data
from benchmarks.bench import main
from benchmarks.harness.peer import PEER, MapieMVSR

pytest.importorskip("mapie.experimental")


@pytest.fixture(scope="module")
def peer_fit():
    X, Y = heteroscedastic(1600, seed=3)
    Y = Y * np.array([3.0, 0.5]) + np.array([10.0, -2.0])  # targets far from standard: exercises the scaling
    return MapieMVSR(coverage=0.9, seed=0, num_epochs=15).fit(X[:800], Y[:800]), X, Y


def test_peer_region_is_its_score_level_set(peer_fit):
    """A point is inside the peer's region exactly when MAPIE's score is within the conformal threshold,
    and the threshold is the finite-sample quantile of the calibration scores."""
    peer, X, Y = peer_fit
    peer.conformalize(X[800:1200], Y[800:1200])
    q = peer.q_
    assert q == conformal_quantile(peer.scores_, 0.9)
    region = peer.predict_region(X[1200:])
    scores = peer.conformalize(X[1200:], Y[1200:]).scores_  # the test rows' own scores (MAPIE's, float32)
    clear = np.abs(scores / q - 1) > 1e-5  # away from the boundary by more than float32 rounding
    np.testing.assert_array_equal(region.contains(Y[1200:])[clear], (scores <= q)[clear])
    assert clear.mean() > 0.98
    assert region.shapes.shape == (400, 2, 2) and np.all(np.linalg.eigvalsh(region.shapes) > 0)


def test_peer_coverage_over_random_calibration_splits(peer_fit):
    """Split-conformal validity of the peer's regions: mean coverage over 100 random calibration/test
    splits of the held-out rows within [eta - tol, eta + 1/(m+1) + tol]."""
    peer, X, Y = peer_fit
    rng = np.random.default_rng(1)
    cov = []
    for _ in range(100):
        p = 800 + rng.permutation(800)
        ca, te = p[:300], p[300:]
        cov.append(peer.conformalize(X[ca], Y[ca]).predict_region(X[te]).contains(Y[te]).mean())
    assert 0.9 - 0.01 <= np.mean(cov) <= 0.9 + 1 / 301 + 0.01, np.mean(cov)


@pytest.mark.slow
@needs_data
def test_bench_adds_the_peer_to_cached_splits_without_refitting_ours(tmp_path):
    out, cache = tmp_path / "out", tmp_path / "cache"
    args = ["--datasets", "enb", "--seeds", "0", "--lmve-max-steps", "40", "--quiet", "--jobs", "1",
            "--cache", str(cache), "--out", str(out)]
    assert main([*args, "--methods", "ge,lmve"]) == 0
    entry = cache / "paper" / "enb" / "seed_000.json"
    before = json.loads(entry.read_text())
    assert main([*args, "--methods", f"ge,lmve,{PEER}", "--peer-epochs", "5"]) == 0
    after = json.loads(entry.read_text())
    assert after["metrics"]["lmve"] == before["metrics"]["lmve"]  # ours were read, not refitted
    peer = after["metrics"][PEER]
    assert 0 < peer["coverage"] <= 1 and peer["volume_paper"] > 0 and peer["n_test"] == 77
    table = pd.read_csv(out / "table1.csv")
    assert set(table.method) == {"ge", "lmve", PEER}
    assert f"| enb | {PEER} | 1 |" in (out / "table1.md").read_text()
    stamp = entry.stat().st_mtime_ns
    assert main([*args, "--methods", f"ge,lmve,{PEER}"]) == 0
    assert entry.stat().st_mtime_ns == stamp  # now complete: nothing runs
