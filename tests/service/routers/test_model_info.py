"""service/routers/model_info.py: ``GET /model``, what a bundle says about itself."""

from __future__ import annotations

import pytest

from tests.service.conftest import features

ROW = [-60.0] * 16


def test_model_metadata(client, bundle_dir):
    from models.bundle import read_manifest

    m = read_manifest(bundle_dir)
    body = client.get("/model").json()
    assert body["version"] == m["bundle_id"] and body["d"] == 16 and body["n"] == 2
    assert body["primary_method"] == "lmve" and body["coverage"] == 0.9  # the fixture forces it (--primary lmve)
    assert body["selection"] == m["selection"] and body["selection"]["rule"] == "forced"
    assert body["selection"]["order"][0] == "lmve" and set(body["selection"]["held_out"]) == set(m["methods"])
    assert body["methods"]["lmve"]["alpha_q"] == pytest.approx(m["methods"]["lmve"]["alpha_q"])
    assert body["metrics"]["ge"]["coverage"] == m["metrics"]["ge"]["coverage"]
    assert body["feature_names"][0] == "beacon_01"
    m_c = m["methods"]["lmve"]["n_calibration"]
    assert body["methods"]["lmve"]["max_coverage"] == pytest.approx(m_c / (m_c + 1))
    # the advertised level is answered; anything above it is refused
    row = body["methods"]["lmve"]["max_coverage"]
    assert client.post("/predict-region", json={"features": [ROW], "coverage": row}).status_code == 200
    assert client.post("/predict-region", json={"features": [ROW], "coverage": row + 1e-6}).status_code == 422
