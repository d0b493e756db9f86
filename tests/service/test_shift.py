"""The shift alarm in the service (``service.shift``): each answer's typicality, the per-model test over the
served queries, its report in ``GET /model``, ``/metrics``, its life across restarts and recalibrations."""

import shutil
from pathlib import Path

import numpy as np
import pytest

from models.bundle import load_bundle
from service import shift as shift_module
from tests.service.conftest import features

KEY = {"x-api-key": "k"}
FIXTURE = Path(__file__).resolve().parent.parent / "fixtures"


@pytest.fixture()
def served(bundle_dir, tmp_path):
    """A private copy of the bundle (recalibrations are written beside it)."""
    path = tmp_path / "served" / "bundle"
    shutil.copytree(bundle_dir, path)
    return path


def shifted(X: np.ndarray) -> np.ndarray:
    """The rows moved by three of their standard deviations on every feature (a phone reading 3 sigma high)."""
    return X + 3.0 * X.std(axis=0)


def post_rows(client, X, batch: int = 50, route: str = "/predict-region") -> None:
    for start in range(0, len(X), batch):
        r = client.post(route, json={"features": features(X[start:start + batch])}, headers=KEY)
        assert r.status_code == 200, r.text


def shift_report(client) -> dict:
    r = client.get("/model", headers=KEY)
    assert r.status_code == 200, r.text
    return r.json()["shift"]


def test_each_answer_carries_its_rows_typicality_p_value(client, bundle_dir, test_rows):
    """/predict-region, /contains and GeoJSON give each row the conservative conformal p-value of its typicality
    score among the calibration rows' (computed here from the bundle, to the bit); unlike rows get small ones."""
    X, Y = test_rows
    model = load_bundle(bundle_dir)
    scores = model.typicality.scores(model.standardise(X[:20]))
    cal = model.typicality.calibration_
    want = [(np.sum(cal >= s) + 1) / (len(cal) + 1) for s in scores]  # (#{c >= s} + 1) / (n + 1), written out
    regions = client.post("/predict-region", json={"features": features(X[:20])}).json()["regions"]
    np.testing.assert_allclose([r["typicality"] for r in regions], want, rtol=1e-15)
    results = client.post("/contains", json={"features": features(X[:20]), "points": features(Y[:20])}).json()
    np.testing.assert_allclose([r["typicality"] for r in results["results"]], want, rtol=1e-15)
    geo = client.post("/predict-region", json={"features": features(X[:20]), "format": "geojson"}).json()
    np.testing.assert_allclose([f["properties"]["typicality"] for f in geo["features"]], want, rtol=1e-15)
    far = client.post("/predict-region", json={"features": features(shifted(X[:20]))}).json()["regions"]
    assert max(r["typicality"] for r in far) == pytest.approx(1.0 / (len(cal) + 1))  # beyond every calibration row
    assert all(0.0 < r["typicality"] <= 1.0 for r in regions)


@pytest.mark.slow
def test_exchangeable_queries_stay_quiet_and_shifted_ones_raise_the_alarm(make_client, test_rows, state_url):
    """Held-out survey rows: every query tested, no alarm (false alarms <= delta = 0.001); then rows 3 sigma
    off: the alarm within 40 queries, its evidence at 1/delta, in GET /model and the metrics."""
    X, _ = test_rows
    c = make_client(api_key="k", state_url=state_url, shift_delta=0.001)
    start = shift_report(c)
    assert (start["available"], start["evidence"], start["alarm"], start["queries"], start["delta"]) == \
        (True, 1.0, False, 0, 0.001)
    post_rows(c, X)
    quiet = shift_report(c)
    assert quiet["queries"] == len(X) and not quiet["alarm"] and quiet["evidence"] < 1000.0, quiet
    post_rows(c, shifted(X), batch=10)
    loud = shift_report(c)
    assert loud["alarm"] and loud["evidence"] >= 1000.0 and loud["queries"] == 2 * len(X), loud
    assert len(X) < loud["alarm_at"] <= len(X) + 40
    metrics = c.get("/metrics").text
    model = c.get("/model", headers=KEY).json()["name"]
    assert f'lmve_shift_alarm{{model="{model}"}} 1.0' in metrics
    assert f'lmve_shift_threshold{{model="{model}"}} 1000.0' in metrics
    assert f'lmve_shift_queries{{model="{model}"}} {float(2 * len(X))}' in metrics


@pytest.mark.slow
def test_the_evidence_survives_a_restart_and_a_recalibration_starts_a_new_test(make_client, served, test_rows,
                                                                              state_url):
    """A worker started again on the same state reports the same test; /admin/recalibrate ends it (a new
    bundle, a new test at evidence 1), and the new test counts only the queries after it."""
    X, Y = test_rows
    first = make_client(bundle=served, api_key="k", state_url=state_url)
    post_rows(first, shifted(X[:80]), batch=20)
    before = shift_report(first)
    assert before["alarm"] and before["queries"] == 80
    again = make_client(bundle=served, api_key="k", state_url=state_url)
    after = shift_report(again)
    assert (after["evidence"], after["queries"], after["alarm_at"]) == \
        (before["evidence"], before["queries"], before["alarm_at"])
    r = again.post("/admin/recalibrate", json={"features": features(X[:40]), "points": Y[:40].tolist()}, headers=KEY)
    assert r.status_code == 200, r.text
    fresh = shift_report(again)
    assert (fresh["evidence"], fresh["alarm"], fresh["queries"]) == (1.0, False, 0)
    post_rows(again, X[40:60])
    assert shift_report(again)["queries"] == 20


def test_a_worker_tests_at_most_max_pending_queries_between_flushes(make_client, test_rows, monkeypatch):
    """Beyond MAX_PENDING queries of one model between two flushes, answers go on (with their typicality) and
    the rest are not tested."""
    monkeypatch.setattr(shift_module, "MAX_PENDING", 25)
    X, _ = test_rows
    c = make_client(api_key="k", sync_interval_s=60)
    post_rows(c, X[:40], batch=10)
    assert shift_report(c)["queries"] == 25
    post_rows(c, X[:10], batch=10)
    assert shift_report(c)["queries"] == 35


def test_the_alarm_never_blocks_an_answer_while_the_state_is_locked(make_client, test_rows, tmp_path):
    """Another process holds the state file's write lock past the worker's busy timeout: the region routes answer
    200 with their typicality and the flush skips its queries (logged, not raised); once the lock is gone the
    test goes on from where it was."""
    import sqlite3

    X, _ = test_rows
    path = tmp_path / "state.sqlite"
    c = make_client(api_key="k", state_url=f"sqlite:///{path}", sync_interval_s=60)
    post_rows(c, X[:20])
    assert shift_report(c)["queries"] == 20
    c.app.state.service_state._db.execute("PRAGMA busy_timeout=100")  # wait 0.1 s for the lock, not 30
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    try:
        r = c.post("/predict-region", json={"features": features(X[:5])}, headers=KEY)
        assert r.status_code == 200 and all(0.0 < g["typicality"] <= 1.0 for g in r.json()["regions"])
        c.app.state.shift.flush(c.app.state.repository)
    finally:
        other.execute("ROLLBACK")
        other.close()
    post_rows(c, X[20:30])
    assert shift_report(c)["queries"] == 30


def test_a_bundle_without_the_typicality_step_says_so(make_client):
    """A bundle trained before the step (tests/fixtures/bundle_v2): typicality null in every answer, the shift
    report unavailable with the reason, V2 leaves the output out by default and refuses it by name."""
    c = make_client(bundle=FIXTURE / "bundle_v2", api_key="k")
    model = load_bundle(FIXTURE / "bundle_v2")
    X = np.zeros((3, model.n_features))
    regions = c.post("/predict-region", json={"features": features(X)}, headers=KEY).json()["regions"]
    assert [r["typicality"] for r in regions] == [None] * 3
    report = shift_report(c)
    assert not report["available"] and "no typicality step" in report["reason"] and report["queries"] == 0
    name = c.get("/model", headers=KEY).json()["name"]
    tensor = {"name": "features", "datatype": "FP64", "shape": list(X.shape), "data": X.ravel().tolist()}
    body = c.post(f"/v2/models/{name}/infer", json={"inputs": [tensor]}, headers=KEY).json()
    assert [o["name"] for o in body["outputs"]] == ["center", "shape", "volume"]
    r = c.post(f"/v2/models/{name}/infer", json={"inputs": [tensor], "outputs": [{"name": "typicality"}]},
               headers=KEY)
    assert r.status_code == 400 and "output 'typicality' is not available" in r.json()["error"]
    assert "lmve_shift_evidence{" not in c.get("/metrics").text
