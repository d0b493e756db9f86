"""service/routers/admin.py: ``POST /admin/reload`` (the key required; a corrupt bundle refused, the old one kept) and
``POST /admin/recalibrate`` (new calibration from JSON or CSV rows, swapped in; errors keep the old bundle)."""

import csv
import io
import shutil
import time

import numpy as np
import pytest

from models.bundle import load_bundle
from tests.service.conftest import features

KEY = {"x-api-key": "k"}
ROW = [-60.0] * 16


@pytest.fixture()
def served(bundle_dir, tmp_path):
    """A private copy of the bundle (recalibrations are written beside it)."""
    path = tmp_path / "served" / "bundle"
    shutil.copytree(bundle_dir, path)
    return path


def test_recalibrate_from_json_swaps_in_a_verified_child(make_client, served, test_rows, tmp_path):
    X, Y = test_rows
    c = make_client(bundle=served, api_key="k", state_db=tmp_path / "s.sqlite")
    old = c.get("/model", headers=KEY).json()["version"]
    r = c.post("/admin/recalibrate", json={"features": features(X[:40]), "points": Y[:40].tolist()}, headers=KEY)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["previous_version"] == old and body["version"] != old and body["rows"] == 40
    child = load_bundle(body["path"])
    assert child.manifest["training"]["recalibrated"]["parent_bundle_id"] == old
    assert child.manifest["calibration"]["n_calibration"] == 40
    # the served model is the child: its threshold is the 37th smallest of the 40 fresh LMVE scores
    scores = np.sort(load_bundle(served).score_points(X[:40], Y[:40])["lmve"])
    assert body["alpha_q"]["lmve"][1] == pytest.approx(scores[int(np.ceil(41 * 0.9)) - 1])
    info = c.get("/model", headers=KEY).json()
    assert info["version"] == body["version"] and info["methods"]["lmve"]["alpha_q"] == pytest.approx(body["alpha_q"]["lmve"][1])
    # the parent on disk is untouched
    assert load_bundle(served).manifest["bundle_id"] == old


def test_rows_repeating_positions_are_grouped_by_position_unless_groups_is_none(make_client, served, tmp_path):
    """As lmve-recalibrate: 12 positions x 5 readings in a JSON body calibrate over 12 positions (the guarantee
    for readings at new positions); ?groups=none counts the 60 rows."""
    from training.data.synthetic import make_new_positions

    X, Y, _, _ = make_new_positions(12, readings=5, seed=31)
    c = make_client(bundle=served, api_key="k", state_db=tmp_path / "s.sqlite")
    body = {"features": features(X), "points": Y.tolist()}
    r = c.post("/admin/recalibrate", json=body, headers=KEY)
    assert r.status_code == 200, r.text
    assert (r.json()["grouped_by"], r.json()["groups"], r.json()["rows"]) == ("position", 12, 60)
    assert "reading at a new position" in r.json()["guarantee"] and "12 fresh groups, 60 rows" in r.json()["guarantee"]
    assert load_bundle(r.json()["path"]).manifest["calibration"]["rule"] == "group-subsample"
    r = c.post("/admin/recalibrate?groups=none", json=body, headers=KEY)
    assert r.status_code == 200, r.text
    assert (r.json()["grouped_by"], r.json()["groups"], r.json()["rows"]) == ("rows", None, 60)


def test_recalibrate_from_csv_with_groups(make_client, served, test_rows, trained_synthetic, tmp_path):
    X, Y = test_rows
    _, ds = trained_synthetic
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow([*ds.feature_names, *ds.target_names, "day"])
    for i, (x, y) in enumerate(zip(X, Y)):
        w.writerow([*x, *y, f"d{i % 20}"])
    c = make_client(bundle=served, api_key="k", state_db=tmp_path / "s.sqlite")
    r = c.post("/admin/recalibrate?groups=day", content=buf.getvalue(), headers={**KEY, "content-type": "text/csv"})
    assert r.status_code == 200, r.text
    assert r.json()["groups"] == 20 and r.json()["rows"] == len(X)
    assert load_bundle(r.json()["path"]).manifest["calibration"]["rule"] == "group-subsample"


@pytest.mark.parametrize("case", ["too-few", "missing-column", "bad-number", "no-key", "media-type"])
def test_refused_recalibrations_leave_the_old_bundle_serving(make_client, served, test_rows, trained_synthetic,
                                                            tmp_path, case):
    X, Y = test_rows
    _, ds = trained_synthetic
    c = make_client(bundle=served, api_key="k", state_db=tmp_path / "s.sqlite")
    old = c.get("/model", headers=KEY).json()["version"]
    header = [*ds.feature_names, *ds.target_names]
    if case == "too-few":
        r = c.post("/admin/recalibrate", json={"features": features(X[:5]), "points": Y[:5].tolist()}, headers=KEY)
        expect, field = 422, "features"
    elif case in ("missing-column", "bad-number"):
        rows = [header[:-1] if case == "missing-column" else header]
        rows += [[*x, *y][:len(rows[0])] for x, y in zip(X[:30], Y[:30])]
        if case == "bad-number":
            rows[3][2] = "loud"
        text = "\n".join(",".join(map(str, row)) for row in rows)
        r = c.post("/admin/recalibrate", content=text, headers={**KEY, "content-type": "text/csv"})
        expect, field = 422, "points" if case == "missing-column" else ds.feature_names[2]
    elif case == "no-key":
        r = c.post("/admin/recalibrate", json={"features": features(X[:40]), "points": Y[:40].tolist()})
        expect, field = 401, None
    else:
        r = c.post("/admin/recalibrate", content="x", headers={**KEY, "content-type": "application/xml"})
        expect, field = 415, "content-type"
    assert r.status_code == expect, r.text
    if field is not None:
        assert field in [e["field"] for e in r.json()["errors"]]
    assert c.get("/model", headers=KEY).json()["version"] == old
    assert not [p for p in served.parent.iterdir() if ".recal-" in p.name]
    ok = c.post("/predict-region", json={"features": features(X[:2])}, headers=KEY)
    assert ok.status_code == 200 and ok.json()["bundle_id"] == old


def _child_of(served, X, Y, out):
    """A recalibration of ``served`` written to ``out``, as another process of the fleet would."""
    from models.bundle import save_recalibrated
    from models.recalibration import recalibrate

    parent = load_bundle(served)
    return save_recalibrated(parent, recalibrate(parent, X, Y), out)["bundle_id"]


def test_a_recalibration_that_lost_a_race_is_told_and_publishes_nothing(make_client, served, test_rows, tmp_path):
    from service.state import open_state

    X, Y = test_rows
    c = make_client(bundle=served, api_key="k", state_db=tmp_path / "s.sqlite", sync_interval_s=60)
    old = c.get("/model", headers=KEY).json()["version"]
    # another process published its recalibration of the same parent; this one has not followed yet (60 s)
    other = tmp_path / "elsewhere" / "bundle.recal-other"
    winner = _child_of(served, X[40:80], Y[40:80], other)
    state = open_state(f"sqlite:///{tmp_path / 's.sqlite'}")
    state.publish("bundle", other, winner, configured=str(served), expect=old)
    body = {"features": features(X[:40]), "points": Y[:40].tolist()}
    r = c.post("/admin/recalibrate", json=body, headers=KEY)
    assert r.status_code == 409, r.text
    assert winner in r.json()["detail"] and old in r.json()["detail"]
    assert r.json()["errors"][0]["field"] == "model"
    assert state.served("bundle").bundle_id == winner  # the winner stays published
    assert not [p for p in served.parent.iterdir() if ".recal-" in p.name]  # the loser's bundle was removed
    assert c.get("/model", headers=KEY).json()["version"] == winner  # told, and already following the winner
    again = c.post("/admin/recalibrate", json=body, headers=KEY)  # so a resend recalibrates the winner
    assert again.status_code == 200 and again.json()["previous_version"] == winner
    assert state.served("bundle").bundle_id == again.json()["version"]
    state.close()


def test_a_published_bundle_this_worker_cannot_read_is_named_in_models(make_client, served, test_rows, tmp_path):
    from service.state import open_state

    X, Y = test_rows
    c = make_client(bundle=served, api_key="k", state_db=tmp_path / "s.sqlite", sync_interval_s=0.1)
    old = c.get("/model", headers=KEY).json()["version"]
    bad = tmp_path / "store" / "bundle.recal-bad"
    bad_id = _child_of(served, X[:40], Y[:40], bad)
    victim = next(p for p in bad.iterdir() if p.name != "manifest.json")
    victim.write_bytes(victim.read_bytes()[:-7])  # truncated on a flaky shared volume, say
    state = open_state(f"sqlite:///{tmp_path / 's.sqlite'}")
    state.publish("bundle", bad, bad_id, configured=str(served))

    def line():
        return c.get("/models", headers=KEY).json()["models"][0]

    t0 = time.monotonic()
    while line()["published_refused"] is None and time.monotonic() - t0 < 10:
        time.sleep(0.05)
    status = line()
    assert status["state"] == "READY" and status["bundle_id"] == old  # keeps serving the old one
    refused = status["published_refused"]
    assert refused["bundle_id"] == bad_id and refused["path"] == str(bad) and victim.name in refused["reason"]
    ok = c.post("/predict-region", json={"features": features(X[:2])}, headers=KEY)
    assert ok.status_code == 200 and ok.json()["bundle_id"] == old
    good = tmp_path / "store" / "bundle.recal-good"
    good_id = _child_of(served, X[40:80], Y[40:80], good)
    state.publish("bundle", good, good_id, configured=str(served))  # the next publish is followed again
    t0 = time.monotonic()
    while line()["bundle_id"] != good_id and time.monotonic() - t0 < 10:
        time.sleep(0.05)
    assert line()["bundle_id"] == good_id and line()["published_refused"] is None
    state.close()


def test_ragged_points_are_named_before_any_grouping(make_client, served, test_rows, tmp_path):
    """The automatic grouping reads the points only once they are a numeric table: ragged points are a 422
    naming them (found by the fuzzer: a 500 before)."""
    X, _ = test_rows
    c = make_client(bundle=served, api_key="k", state_db=tmp_path / "s.sqlite")
    r = c.post("/admin/recalibrate", json={"features": features(X[:2]), "points": [[1.0, 2.0], [1.0]]}, headers=KEY)
    assert r.status_code == 422 and r.json()["errors"][0]["field"].startswith("points")


def test_reload_is_disabled_without_a_key(client):
    assert client.post("/admin/reload").status_code == 403


def test_reload_good_and_corrupt_bundles(make_client, bundle_dir, tmp_path, trained_synthetic):
    from models.bundle import save_bundle

    client = make_client(api_key="k")
    h = {"X-API-Key": "k"}
    v0 = client.get("/model", headers=h).json()["version"]
    assert client.post("/admin/reload").status_code == 401
    # a good new bundle (another coverage level -> other content hash)
    result, ds = trained_synthetic
    model = result.model
    other = type(model)(**{**model.__dict__, "methods": {k: v for k, v in model.methods.items() if k != "copula"}})
    save_bundle(other, tmp_path / "new", dataset=ds.info)
    r = client.post("/admin/reload", json={"bundle": str(tmp_path / "new")}, headers=h)
    assert r.status_code == 200 and r.json()["previous_version"] == v0
    v1 = r.json()["version"]
    assert v1 != v0 and client.get("/model", headers=h).json()["version"] == v1
    # a corrupt one is refused, the good one keeps serving
    bad = tmp_path / "bad"
    shutil.copytree(bundle_dir, bad)
    (bad / "ge.npz").write_bytes(b"tampered")
    r = client.post("/admin/reload", json={"bundle": str(bad)}, headers=h)
    assert r.status_code == 422 and "ge.npz does not match the manifest" in r.json()["detail"]
    assert client.get("/model", headers=h).json()["version"] == v1
    assert client.post("/predict-region", json={"features": [ROW]}, headers=h).status_code == 200
    assert 'lmve_reloads_total{model="synthetic",result="refused"} 1.0' in client.get("/metrics").text
