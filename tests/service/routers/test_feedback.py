"""``POST /feedback``: observed coverage, counters, the adaptive level, state kept across restarts."""

import numpy as np
import pytest

from tests.service.conftest import features

KEY = {"x-api-key": "k"}


def _counter(text: str, name: str, method: str) -> float:
    for line in text.splitlines():
        if line.startswith(f'{name}{{method="{method}",model="synthetic"}}'):
            return float(line.split()[-1])
    return 0.0


@pytest.mark.slow
def test_feedback_records_what_contains_says(make_client, test_rows, state_url):
    X, Y = test_rows
    c = make_client(api_key="k", state_url=state_url)
    r = c.post("/feedback", json={"features": features(X), "points": Y.tolist(), "site": "hall"}, headers=KEY)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["recorded"] == len(X)
    expect = c.post("/contains", json={"features": features(X), "points": Y.tolist()}, headers=KEY).json()
    assert body["methods"]["lmve"]["inside"] == [x["inside"] for x in expect["results"]]
    assert body["methods"]["lmve"]["p_value"] == pytest.approx([x["p_value"] for x in expect["results"]])
    observed = np.mean(body["methods"]["lmve"]["inside"])
    summary = c.get("/model", headers=KEY).json()["feedback"]["methods"]["lmve"]
    assert summary["rows"] == len(X) and summary["observed_coverage"] == pytest.approx(observed)
    assert summary["margin"] == pytest.approx(2.326 * np.sqrt(0.9 * 0.1 / len(X)))
    text = c.get("/metrics").text
    assert _counter(text, "lmve_feedback_rows_total", "lmve") == len(X)
    assert _counter(text, "lmve_feedback_inside_total", "lmve") == sum(body["methods"]["lmve"]["inside"])
    assert _counter(text, "lmve_observed_coverage", "lmve") == pytest.approx(observed)
    assert _counter(text, "lmve_coverage_target", "lmve") == 0.9


@pytest.mark.slow
@pytest.mark.parametrize("bad, field", [
    ({"points": "short"}, "points[0]"),
    ({"points": "nan"}, "points"),
    ({"features": "wide"}, "features[0]"),
    ({"points": "fewer"}, "points"),
])
def test_bad_feedback_is_refused_naming_the_field_and_records_nothing(make_client, test_rows, state_url, bad, field):
    X, Y = test_rows[0][:5], test_rows[1][:5]
    c = make_client(api_key="k", state_url=state_url)
    ok = c.post("/feedback", json={"features": features(X), "points": Y.tolist()}, headers=KEY)
    assert ok.status_code == 200
    body = {"features": features(X), "points": Y.tolist()}
    if bad.get("points") == "short":
        body["points"][0] = [1.0]
    if bad.get("points") == "nan":
        body["points"][2][1] = float("nan")
    if bad.get("points") == "fewer":
        body["points"] = body["points"][:3]
    if bad.get("features") == "wide":
        body["features"][0] = body["features"][0] + [1.0]
    r = c.post("/feedback", content=_json(body), headers={**KEY, "content-type": "application/json"})
    assert r.status_code == 422, r.text
    assert field in [e["field"] for e in r.json()["errors"]] or field in r.json()["detail"]
    assert _counter(c.get("/metrics").text, "lmve_feedback_rows_total", "lmve") == 5


def _json(body) -> bytes:
    import json

    return json.dumps(body, allow_nan=True).encode()


@pytest.mark.slow
def test_state_survives_a_restart(make_client, test_rows, state_url):
    X, Y = test_rows
    first = make_client(api_key="k", state_url=state_url)
    first.post("/feedback", json={"features": features(X[:20]), "points": Y[:20].tolist()}, headers=KEY)
    first.__exit__(None, None, None)
    again = make_client(api_key="k", state_url=state_url)
    again.post("/feedback", json={"features": features(X[20:30]), "points": Y[20:30].tolist()}, headers=KEY)
    assert again.get("/model", headers=KEY).json()["feedback"]["methods"]["lmve"]["rows"] == 30
    assert _counter(again.get("/metrics").text, "lmve_feedback_rows_total", "lmve") == 30


@pytest.mark.slow
def test_adaptive_mode_moves_the_served_level_and_reports_it(make_client, test_rows, state_url):
    X, Y = test_rows
    c = make_client(api_key="k", state_url=state_url, adaptive="aci", adaptive_gamma=0.05)
    before = c.post("/predict-region", json={"features": features(X[:1])}, headers=KEY).json()
    assert before["adaptive"] and before["effective_coverage"] == pytest.approx(0.9)
    far = (Y[:10] + 1e3).tolist()  # every point far outside: each miss raises the level by gamma * 0.9
    r = c.post("/feedback", json={"features": features(X[:10]), "points": far}, headers=KEY).json()
    assert not any(r["methods"]["lmve"]["inside_served"])
    level = min(0.9 + 10 * 0.05 * 0.9, c.get("/model", headers=KEY).json()["methods"]["lmve"]["max_coverage"])
    after = c.post("/predict-region", json={"features": features(X[:1])}, headers=KEY).json()
    assert after["effective_coverage"] == pytest.approx(level) and after["coverage"] == 0.9
    assert after["regions"][0]["volume"] > before["regions"][0]["volume"]
    assert r["monitor"]["methods"]["lmve"]["effective_coverage"] == pytest.approx(level)
    # a level the request names is served as asked
    asked = c.post("/predict-region", json={"features": features(X[:1]), "coverage": 0.8}, headers=KEY).json()
    assert not asked["adaptive"] and asked["effective_coverage"] == 0.8
    assert "lmve_effective_coverage" in c.get("/metrics").text


def test_adaptive_off_serves_the_bundle_level(make_client, test_rows):
    X, Y = test_rows
    c = make_client(api_key="k")
    c.post("/feedback", json={"features": features(X[:10]), "points": (Y[:10] + 1e3).tolist()}, headers=KEY)
    r = c.post("/predict-region", json={"features": features(X[:1])}, headers=KEY).json()
    assert not r["adaptive"] and r["effective_coverage"] == 0.9


def test_the_service_exports_every_metric_the_rules_use(make_client, test_rows):
    import re
    from pathlib import Path

    import yaml

    rules = Path(__file__).resolve().parents[3] / "deploy" / "prometheus" / "lmve-alerts.yml"
    X, Y = test_rows
    c = make_client(api_key="k")
    c.post("/feedback", json={"features": X[:5].tolist(), "points": Y[:5].tolist()}, headers={"x-api-key": "k"})
    text = c.get("/metrics").text
    exprs = " ".join(r["expr"] for g in yaml.safe_load(rules.read_text())["groups"]
                     for r in g["rules"])
    for name in set(re.findall(r"lmve_[a-z_]+", exprs)):
        assert re.search(rf"^{name}\{{(method|model)=", text, flags=re.M), name


@pytest.mark.slow
def test_quantile_mode_moves_the_threshold_and_reports_its_level(make_client, test_rows, state_url):
    X, Y = test_rows
    c = make_client(api_key="k", state_url=state_url, adaptive="quantile", adaptive_lr=0.05)
    before = c.post("/predict-region", json={"features": features(X[:1])}, headers=KEY).json()
    assert before["adaptive"] and before["effective_coverage"] == 0.9
    far = (Y[:20] + 50.0).tolist()
    r = c.post("/feedback", json={"features": features(X[:20]), "points": far}, headers=KEY).json()
    assert not r["methods"]["lmve"]["inside_served"][0]  # outside the calibrated region; then q grows
    info = r["monitor"]["methods"]["lmve"]
    alpha_q = c.get("/model", headers=KEY).json()["methods"]["lmve"]["alpha_q"]
    assert info["threshold"] > alpha_q  # every miss raised it by lr x the largest score seen x 0.9
    after = c.post("/predict-region", json={"features": features(X[:1])}, headers=KEY).json()
    ratio = after["regions"][0]["volume"] / before["regions"][0]["volume"]
    assert ratio == pytest.approx(info["threshold"] / alpha_q, rel=1e-9)  # area scales with alpha (n = 2)
    assert after["effective_coverage"] == pytest.approx(info["effective_coverage"]) and after["effective_coverage"] > 0.9
    inside = c.post("/contains", json={"features": features(X[:20]), "points": Y[:20].tolist()}, headers=KEY).json()
    assert inside["adaptive"] and inside["effective_coverage"] == after["effective_coverage"]
