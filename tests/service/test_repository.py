"""The model repository in one process: discovery, per-model routes, readiness, load and unload, per-model
feedback and metrics. (Two real workers: tests/e2e/test_repository.py.)"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from fastapi.testclient import TestClient

from service.app import create_app
from service.repository import REPOSITORY_MANIFEST, ModelRepository
from service.settings import ServiceSettings
from service.store import READY, UNAVAILABLE, UNLOADED

KEY = {"x-api-key": "k"}
SITES = ("site=0", "site=1", "site=2")


@pytest.fixture()
def repo_client(repository_copy):
    root, rows = repository_copy
    clients = []

    def make(**overrides):
        client = TestClient(create_app(ServiceSettings(model_repository=root, api_key="k", **overrides)))
        client.__enter__()
        clients.append(client)
        return client

    yield make, root, rows
    for c in clients:
        c.__exit__(None, None, None)


def _centre_offset(client, path: str, X, body_extra=None) -> float:
    r = client.post(path, json={"features": X[:5].tolist(), **(body_extra or {})}, headers=KEY)
    assert r.status_code == 200, r.text
    return float(np.mean([reg["center"][0] for reg in r.json()["regions"]]))


# ---------------------------------------------------------------------------- discovery
def test_discovery_skips_hidden_and_recalibrated_dirs_and_names_listed_missing_models(site_repository, tmp_path):
    root, _ = site_repository
    repo = tmp_path / "repo"
    shutil.copytree(root, repo)
    shutil.copytree(repo / "site=0", repo / ".recalibrated" / "site=0.recal-x")
    shutil.copytree(repo / "site=0", repo / "site=0.recal-20260101T000000Z-abc123")
    (repo / "notes").mkdir()  # no bundle: not a model
    (repo / REPOSITORY_MANIFEST).write_text(json.dumps({"models": {"site=3": {}, "site=0": {}}}))
    r = ModelRepository(repo)
    assert sorted(r.stores) == [*SITES, "site=3"]
    r.load_all()
    assert [r.stores[s].state for s in SITES] == [READY] * 3
    assert r.stores["site=3"].state == UNAVAILABLE and "does not exist" in r.stores["site=3"].reason
    assert r.not_ready() == {"site=3": r.stores["site=3"].reason} and not r.ready
    assert r.default is None and "LMVE_DEFAULT_MODEL" in r.no_default_reason()


def test_a_bundle_as_repository_and_a_missing_repository(site_repository, tmp_path):
    root, _ = site_repository
    one = ModelRepository(root / "site=1")  # a bundle given as the repository: a repository of one
    assert list(one.stores) == ["site=1"] and one.default is one.stores["site=1"]
    missing = ModelRepository(tmp_path / "nowhere")
    assert not missing.stores and not missing.ready
    assert "is not a directory" in missing.not_ready()[""]
    single = ModelRepository(bundle=root / "site=2")  # LMVE_BUNDLE: named after its directory
    assert list(single.stores) == ["site=2"]
    with pytest.raises(ValueError, match="not both"):
        ModelRepository(root, bundle=root / "site=2")


def test_settings_refuse_a_bundle_and_a_repository(tmp_path):
    with pytest.raises(ValueError, match="LMVE_BUNDLE .* or LMVE_MODEL_REPOSITORY"):
        ServiceSettings(bundle=tmp_path, model_repository=tmp_path)


# ---------------------------------------------------------------------------- routes
def test_each_model_answers_its_own_regions_by_path_or_by_field(repo_client):
    make, root, rows = repo_client
    c = make()
    listing = c.get("/models", headers=KEY).json()
    assert [m["name"] for m in listing["models"]] == list(SITES)
    assert all(m["state"] == READY and m["bundle_id"] and m["d"] == rows["site=0"][0].shape[1] and m["n"] == 2
               and m["primary_method"] in ("ge", "nle") and m["reason"] is None for m in listing["models"])
    assert listing["ready"] and listing["default"] is None and listing["repository"] == str(root)
    X = rows["site=0"][0]
    offsets = [_centre_offset(c, f"/models/{s}/predict-region", X) for s in SITES]
    # the same readings, three sites 100 m apart: each model answers in its own frame
    assert np.allclose(np.diff(offsets), 100.0, atol=15.0), offsets
    assert _centre_offset(c, "/predict-region", X, {"model": "site=2"}) == pytest.approx(offsets[2])
    assert _centre_offset(c, "/models/site=1/nle/predict-region", X) != _centre_offset(
        c, "/models/site=2/nle/predict-region", X)
    r = c.post("/models/site=1/contains", json={"features": X[:3].tolist(), "points": rows["site=1"][1][:3].tolist()},
               headers=KEY)
    assert r.status_code == 200 and r.json()["model"] == "site=1"
    info = c.get("/models/site=1", headers=KEY).json()
    assert info["name"] == "site=1" and info["version"] == listing["models"][1]["bundle_id"]
    # several models and no default: the plain routes ask for a name
    r = c.post("/predict-region", json={"features": X[:1].tolist()}, headers=KEY)
    assert r.status_code == 422 and r.json()["errors"][0]["field"] == "model"
    assert all(s in r.json()["errors"][0]["expected"] for s in SITES)
    # the path and the body naming different models
    r = c.post("/models/site=1/predict-region", json={"features": X[:1].tolist(), "model": "site=0"}, headers=KEY)
    assert r.status_code == 422 and "'site=1'" in r.json()["detail"]


def test_an_unknown_model_is_a_404_naming_it_everywhere(repo_client):
    make, _, rows = repo_client
    c = make()
    X = rows["site=0"][0][:1].tolist()
    for method, path, body in (("post", "/models/site=9/predict-region", {"features": X}),
                               ("post", "/models/site=9/nle/contains", {"features": X, "points": [[0, 0]]}),
                               ("post", "/predict-region", {"features": X, "model": "site=9"}),
                               ("post", "/models/site=9/feedback", {"features": X, "points": [[0, 0]]}),
                               ("get", "/models/site=9", None),
                               ("post", "/admin/models/site=9/load", None),
                               ("post", "/admin/models/site=9/unload", None)):
        r = c.request(method.upper(), path, json=body, headers=KEY)
        assert r.status_code == 404, (path, r.text)
        assert "'site=9'" in r.json()["detail"] and "site=0" in r.json()["detail"], path
    # no label value for a name no model has
    assert "site=9" not in c.get("/metrics").text


def test_the_default_model_serves_the_plain_routes(repo_client):
    make, _, rows = repo_client
    X = rows["site=0"][0]
    c = make(default_model="site=1")
    assert c.get("/models", headers=KEY).json()["default"] == "site=1"
    assert _centre_offset(c, "/predict-region", X) == pytest.approx(_centre_offset(c, "/models/site=1/predict-region", X))
    assert c.get("/model", headers=KEY).json()["name"] == "site=1"
    assert c.get("/readyz").json()["version"] == c.get("/models/site=1", headers=KEY).json()["version"]
    wrong = make(default_model="site=7")
    r = wrong.get("/readyz")
    assert r.status_code == 503 and "LMVE_DEFAULT_MODEL='site=7'" in r.json()["detail"]
    assert wrong.post("/predict-region", json={"features": X[:1].tolist()}, headers=KEY).status_code == 503
    assert wrong.post("/models/site=0/predict-region", json={"features": X[:1].tolist()}, headers=KEY).status_code == 200


# ---------------------------------------------------------------------------- readiness, load, unload
def test_a_corrupt_model_is_listed_with_its_reason_and_the_others_serve(repo_client):
    make, root, rows = repo_client
    good = root.parent / "good"
    shutil.copytree(root / "site=2", good)
    (root / "site=2" / "ge.npz").write_bytes(b"tampered")
    c = make()
    X = rows["site=0"][0][:2].tolist()
    entry = {m["name"]: m for m in c.get("/models", headers=KEY).json()["models"]}["site=2"]
    assert entry["state"] == UNAVAILABLE and "ge.npz" in entry["reason"] and entry["bundle_id"] is None
    r = c.get("/readyz")
    assert r.status_code == 503 and list(r.json()["models"]) == ["site=2"] and "ge.npz" in r.json()["detail"]
    assert c.post("/models/site=0/predict-region", json={"features": X}, headers=KEY).status_code == 200
    r = c.post("/models/site=2/predict-region", json={"features": X}, headers=KEY)
    assert r.status_code == 503 and "UNAVAILABLE" in r.json()["detail"] and "ge.npz" in r.json()["detail"]
    metrics = c.get("/metrics").text
    assert 'lmve_model_ready{model="site=2"} 0.0' in metrics and 'lmve_model_ready{model="site=0"} 1.0' in metrics
    # loading it again while it is still corrupt: refused, counted, still listed
    assert c.post("/admin/models/site=2/load", headers=KEY).status_code == 422
    assert 'lmve_reloads_total{model="site=2",result="refused"} 1.0' in c.get("/metrics").text
    # repaired on disk and loaded: every model ready
    shutil.rmtree(root / "site=2")
    shutil.copytree(good, root / "site=2")
    r = c.post("/admin/models/site=2/load", headers=KEY)
    assert r.status_code == 200 and r.json()["model"] == "site=2" and r.json()["previous_version"] is None
    assert c.get("/readyz").status_code == 200
    assert set(c.get("/readyz").json()["models"]) == set(SITES)


def test_unload_and_load_one_model_leave_the_others_alone(repo_client):
    make, _, rows = repo_client
    c = make()
    X = rows["site=0"][0][:2].tolist()
    v1 = c.get("/models/site=1", headers=KEY).json()["version"]
    assert c.post("/admin/models/site=1/unload").status_code == 401  # admin routes need the key
    r = c.post("/admin/models/site=1/unload", headers=KEY)
    assert r.status_code == 200 and r.json() == {"name": "site=1", "state": UNLOADED, "bundle_id": None,
                                                 "previous_bundle_id": v1, "reason": r.json()["reason"]}
    listing = {m["name"]: m for m in c.get("/models", headers=KEY).json()["models"]}
    assert listing["site=1"]["state"] == UNLOADED and "unloaded by an operator" in listing["site=1"]["reason"]
    r = c.post("/models/site=1/predict-region", json={"features": X}, headers=KEY)
    assert r.status_code == 503 and "UNLOADED" in r.json()["detail"]
    assert c.post("/models/site=0/predict-region", json={"features": X}, headers=KEY).status_code == 200
    assert c.get("/readyz").status_code == 200  # an operator's unload is not a fault
    metrics = c.get("/metrics").text
    assert 'model="site=1"' not in metrics.split("lmve_model_ready")[1].split("# HELP")[0]
    assert 'lmve_model_info{' in metrics and 'lmve_model_info{' not in "".join(
        line for line in metrics.splitlines() if 'model="site=1"' in line and line.startswith("lmve_model_info"))
    r = c.post("/admin/models/site=1/load", headers=KEY)
    assert r.status_code == 200 and r.json()["version"] == v1
    assert c.post("/models/site=1/predict-region", json={"features": X}, headers=KEY).status_code == 200
    # every model unloaded: not ready
    for s in SITES:
        c.post(f"/admin/models/{s}/unload", headers=KEY)
    r = c.get("/readyz")
    assert r.status_code == 503 and "every model is unloaded" in r.json()["detail"]


def test_a_model_new_on_disk_is_loaded_by_name(repo_client):
    make, root, rows = repo_client
    c = make()
    shutil.copytree(root / "site=0", root / "annex")
    assert c.post("/models/annex/predict-region", json={"features": rows["site=0"][0][:1].tolist()},
                  headers=KEY).status_code == 404
    r = c.post("/admin/models/annex/load", headers=KEY)
    assert r.status_code == 200 and r.json()["model"] == "annex"
    assert [m["name"] for m in c.get("/models", headers=KEY).json()["models"]] == ["annex", *SITES]
    assert c.post("/models/annex/predict-region", json={"features": rows["site=0"][0][:1].tolist()},
                  headers=KEY).status_code == 200


# ---------------------------------------------------------------------------- per-model state
def test_feedback_and_metrics_are_per_model(repo_client):
    make, _, rows = repo_client
    c = make()
    for site, k in (("site=0", 6), ("site=1", 4)):
        X, Y = rows[site]
        r = c.post(f"/models/{site}/feedback", json={"features": X[:k].tolist(), "points": Y[:k].tolist()},
                   headers=KEY)
        assert r.status_code == 200 and r.json()["model"] == site and r.json()["recorded"] == k
        assert r.json()["monitor"]["methods"]["nle"]["rows"] == k  # this model's window only
    X, Y = rows["site=2"]
    r = c.post("/feedback", json={"features": X[:3].tolist(), "points": Y[:3].tolist(), "model": "site=2"},
               headers=KEY)
    assert r.json()["model"] == "site=2"
    c.post("/models/site=0/nle/predict-region", json={"features": X[:2].tolist()}, headers=KEY)
    text = c.get("/metrics").text
    for site, k in (("site=0", 6), ("site=1", 4), ("site=2", 3)):
        assert f'lmve_feedback_rows_total{{method="nle",model="{site}"}} {float(k)}' in text
        assert f'lmve_observed_rows{{method="nle",model="{site}"}} {float(k)}' in text
    assert 'lmve_inference_seconds_count{method="nle",model="site=0"} 1.0' in text
    assert ('lmve_http_requests_total{method="POST",model="site=0",route="/models/{name}/{method}/predict-region",'
            'status="200"} 1.0') in text
    info = c.get("/models/site=1", headers=KEY).json()
    assert info["feedback"]["methods"]["nle"]["rows"] == 4
    # unloading a model drops its feedback series (label values only for loaded models)
    c.post("/admin/models/site=1/unload", headers=KEY)
    assert 'lmve_feedback_rows_total{method="nle",model="site=1"}' not in c.get("/metrics").text


def test_recalibrating_one_model_writes_outside_the_repository_models(repo_client):
    make, root, rows = repo_client
    c = make()
    X, Y = rows["site=1"]
    v0 = c.get("/models/site=0", headers=KEY).json()["version"]
    old = c.get("/models/site=1", headers=KEY).json()["version"]
    r = c.post("/admin/models/site=1/recalibrate", json={"features": X.tolist(), "points": Y.tolist()}, headers=KEY)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["model"] == "site=1" and body["previous_version"] == old and body["version"] != old
    assert str(root / ".recalibrated") in body["path"]
    assert c.get("/models/site=1", headers=KEY).json()["version"] == body["version"]
    assert c.get("/models/site=0", headers=KEY).json()["version"] == v0
    assert sorted(ModelRepository(root).stores) == list(SITES)  # the recalibration is no model of its own
