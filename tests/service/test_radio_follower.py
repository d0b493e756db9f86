"""The radio watch in the service (``service.radio_follower``): the queries' readings counted into a shared watch, the
model every worker serves under its decision, its report in ``GET /model``, its reset, its life across restarts
and replicas, and a request never waiting for an adaptation."""

import json
import threading
import time

import numpy as np
import pytest

from models.bundle import load_bundle
from models.model import RegionModel
from models.radio import RadioView
from service import inference
from tests.radio_site import LATER, REPLACED, saved_site, walk
from tests.service.conftest import features

KEY = {"x-api-key": "k"}


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The site's bundle (tests/radio_site.py) on disk: its path."""
    return saved_site(tmp_path_factory.mktemp("radio-site"))


def post(client, X, batch=10, headers=None, Y=None):
    """``X`` in requests of ``batch`` rows (to /contains with ``Y``); the answers' rows."""
    out, headers = [], {**KEY, **(headers or {})}
    for i in range(0, len(X), batch):
        if Y is None:
            r = client.post("/predict-region", json={"features": features(X[i:i + batch])}, headers=headers)
            assert r.status_code == 200, r.text
            out += r.json()["regions"]
        else:
            r = client.post("/contains", json={"features": features(X[i:i + batch]),
                                               "points": features(Y[i:i + batch])}, headers=headers)
            assert r.status_code == 200, r.text
            out += r.json()["results"]
    return out


def as_served(model, X, **kw) -> list[dict]:
    """``model``'s answer to ``X`` as the service writes its rows, through JSON."""
    return json.loads(json.dumps(inference.region_rows(model.predict_region(X, **kw), None)))


def follow(client) -> None:
    """The worker's periodic flush, now: the queries counted and the stored decision followed."""
    client.app.state.radio.flush(client.app.state.repository)


def radio(client) -> dict:
    r = client.get("/model", headers=KEY)
    assert r.status_code == 200, r.text
    return r.json()


def test_replaced_beacons_are_followed_and_said(make_client, site, state_url):
    """Four beacons replaced: after 300 queries GET /model names them gone and the new ones, the shift alarm's
    report says so in words, and the answers are the adapted model's, to the bit; coverage is back."""
    c = make_client(bundle=site, api_key="k", state_url=state_url, sync_interval_s=60)
    start = radio(c)["radio"]
    assert start["available"] and start["gone"] == 0 and start["queries_counted"] == 0
    X, Y = walk(60, seed=2, replaced=REPLACED)
    static = np.mean([r["inside"] for r in post(c, X, Y=Y)])
    assert radio(c)["radio"]["gone"] == len(REPLACED) and not radio(c)["radio"]["followed"]  # counted, not yet followed
    follow(c)
    info = radio(c)
    watch = info["radio"]
    names = load_bundle(site).feature_names
    assert watch["queries_counted"] == len(X) and watch["followed"] and watch["mode"] == "adapt"
    assert watch["gone_names"] == [names[j] for j in REPLACED] and watch["new_names"] == [names[j] for j in LATER]
    assert info["shift"]["drift"] == watch["drift"] and "4 of the survey's 12 transmitters" in watch["drift"]
    assert "split-calibrated bundle keeps its stated level" in watch["guarantee"]

    X2, Y2 = walk(80, seed=3, replaced=REPLACED)
    served = post(c, X2, Y=Y2)
    want = load_bundle(site).adapted(RadioView(gone=REPLACED, new=LATER)).assess(X2, Y2)
    np.testing.assert_array_equal([r["p_value"] for r in served], want.p_value)
    assert np.mean([r["inside"] for r in served]) >= 0.82 > static + 0.1


def test_the_watch_survives_a_restart_and_two_replicas_serve_the_same(make_client, site, state_url):
    """A second worker on the same state (a restart, or another replica of the fleet) finds the watch where the
    first left it and answers the same; a reset on either forgets it for both."""
    a = make_client(bundle=site, api_key="k", state_url=state_url, sync_interval_s=60)
    X, _ = walk(60, seed=2, replaced=REPLACED)
    post(a, X)
    follow(a)
    first = radio(a)["radio"]
    b = make_client(bundle=site, api_key="k", state_url=state_url, sync_interval_s=60)
    follow(b)  # its flush reads the stored decision and follows it
    second = radio(b)["radio"]
    assert (second["gone_names"], second["queries_counted"], second["followed"]) == \
        (first["gone_names"], first["queries_counted"], True)
    Q, _ = walk(10, seed=4, replaced=REPLACED)
    assert post(a, Q, batch=50) == post(b, Q, batch=50)

    r = b.post("/admin/radio/reset", headers=KEY)
    assert r.status_code == 200, r.text
    assert r.json()["reset"] and r.json()["radio"]["gone"] == 0 and r.json()["radio"]["queries_counted"] == 0
    assert b.post("/admin/radio/reset", headers=KEY).json()["reset"] is False  # nothing left to forget
    follow(a)  # a's next flush reads the reset
    assert radio(a)["radio"]["gone"] == 0
    assert post(a, Q, batch=50) == as_served(load_bundle(site), Q)
    assert b.post("/admin/radio/reset").status_code in (401, 403)


def test_a_device_offset_is_followed_for_that_device(make_client, site):
    """One phone reading 6 dB high, named by the header: its offset is found and corrected for it alone."""
    c = make_client(bundle=site, api_key="k", sync_interval_s=60)
    X, _ = walk(60, seed=5, offset_db=6.0)
    post(c, X, headers={"X-LMVE-Device": "phone-b"})
    follow(c)
    offsets = radio(c)["radio"]["offsets_db"]
    assert offsets["phone-b"] == pytest.approx(6.0, abs=1.0)
    Q, _ = walk(4, seed=6, offset_db=6.0)
    named = post(c, Q, batch=20, headers={"X-LMVE-Device": "phone-b"})
    body = c.post("/predict-region", json={"features": features(Q), "device": "phone-b"},
                  headers=KEY).json()["regions"]
    assert named == body
    assert named == as_served(load_bundle(site).adapted(RadioView(offsets=offsets)), Q, device="phone-b")
    corrected = np.where(Q < 0, Q - offsets["phone-b"], Q)  # every heard reading, the offset taken off
    np.testing.assert_allclose([r["center"] for r in named], load_bundle(site).predict_center(corrected), atol=1e-9)
    r = c.post("/predict-region", json={"features": features(Q)}, headers={**KEY, "X-LMVE-Device": "x" * 201})
    assert r.status_code == 422 and r.json()["errors"][0]["field"] == "X-LMVE-Device"
    # the Open Inference Protocol names the device in a parameter: the same centres
    infer = {"parameters": {"device": "phone-b"}, "outputs": [{"name": "center"}],
             "inputs": [{"name": "features", "shape": list(Q.shape), "datatype": "FP64", "data": Q.ravel().tolist()}]}
    name = c.get("/model", headers=KEY).json()["name"]
    out = c.post(f"/v2/models/{name}/infer", json=infer, headers=KEY).json()["outputs"][0]
    np.testing.assert_array_equal(np.reshape(out["data"], out["shape"]), [r["center"] for r in named])
    infer["parameters"]["device"] = "x" * 201
    r = c.post(f"/v2/models/{name}/infer", json=infer, headers=KEY)
    assert r.status_code == 400 and "parameter 'device'" in r.json()["error"]


def test_watch_mode_reports_without_following_and_off_does_neither(make_client, site):
    X, _ = walk(60, seed=2, replaced=REPLACED)
    trained = as_served(load_bundle(site), X[:10])
    w = make_client(bundle=site, api_key="k", radio="watch", sync_interval_s=60)
    post(w, X)
    follow(w)
    watch = radio(w)["radio"]
    assert watch["gone"] == len(REPLACED) and not watch["followed"]
    assert post(w, X[:10], batch=10) == trained
    off = make_client(bundle=site, api_key="k", radio="off", sync_interval_s=60)
    post(off, X)
    assert radio(off)["radio"] == {"available": False, "mode": "off", "reason": "LMVE_RADIO=off"}


def test_a_large_request_counts_sixteen_evenly_spaced_rows(make_client, site):
    """Of a 100-row request the watch counts rows 0, 7, ..., 98 (ceil(100 / 16) = 7 apart: 15 rows); a
    16-row request all of its rows."""
    from service.radio_follower import ROWS_PER_REQUEST

    assert ROWS_PER_REQUEST == 16
    c = make_client(bundle=site, api_key="k", radio="watch", sync_interval_s=60)
    X, _ = walk(24, seed=2)
    post(c, X[:100], batch=100)
    assert radio(c)["radio"]["queries_counted"] == len(range(0, 100, 7))
    post(c, X[100:116], batch=16)
    assert radio(c)["radio"]["queries_counted"] == len(range(0, 100, 7)) + 16


def test_a_bundle_without_a_radio_map_says_so(make_client):
    """The synthetic bundle of tests/conftest.py has RSSI features; one from before the radio map has none."""
    c = make_client(api_key="k")
    store = c.app.state.repository.default
    old = store.current
    store.current = type(old)(**{**old.__dict__, "model": _without_map(old.model)})
    report = radio(c)["radio"]
    assert not report["available"] and "retrain with lmve-train" in report["reason"]


def _without_map(model: RegionModel) -> RegionModel:
    import copy

    out = copy.copy(model)
    out.radio_map = None
    return out


def test_a_request_never_waits_for_an_adaptation(make_client, site, monkeypatch):
    """While a flush builds the adapted model (made slow here), requests are answered by the model served
    before; the adapted one serves once built."""
    building, release = threading.Event(), threading.Event()
    adapted = RegionModel.adapted

    def slow(self, view, methods=None):
        if view.gone:
            building.set()
            release.wait(30)
        return adapted(self, view, methods)

    monkeypatch.setattr(RegionModel, "adapted", slow)
    c = make_client(bundle=site, api_key="k", sync_interval_s=60)
    X, _ = walk(60, seed=2, replaced=REPLACED)
    post(c, X)
    radio(c)  # counted: the next flush adapts
    flusher = threading.Thread(target=c.app.state.radio.flush, args=(c.app.state.repository,))
    flusher.start()
    assert building.wait(30)
    t0 = time.perf_counter()
    before = post(c, X[:10], batch=10)  # answered while the adaptation is held
    assert flusher.is_alive() and time.perf_counter() - t0 < 30
    release.set()
    flusher.join(30)
    assert before == as_served(load_bundle(site), X[:10])
    assert post(c, X[:10], batch=10) == as_served(load_bundle(site).adapted(RadioView(gone=REPLACED, new=LATER)),
                                                  X[:10])
