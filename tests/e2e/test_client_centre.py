"""Bring your own estimate: ``lmve-train --centre-columns`` end to end through a real ``lmve-serve``."""

from __future__ import annotations

import httpx
import numpy as np
import pytest

from tests.processes import stop
from tests.e2e.servers import KEY, free_port, post, start_server, wait_alive
from training.commands.train import main


def client_csv(path, m: int = 800, seed: int = 0):
    """Features, true position and a client's estimate whose error grows with |x|."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, size=(m, 3))
    P = np.column_stack([5 * X[:, 0], 3 * X[:, 1] + X[:, 2]])
    est = P + rng.normal(size=(m, 2)) * (0.2 + np.abs(X[:, :1]))
    lines = ["f1,f2,f3,x,y,est_x,est_y"]
    lines += [",".join(f"{v:.6g}" for v in [*X[i], *P[i], *est[i]]) for i in range(m)]
    path.write_text("\n".join(lines) + "\n")
    return X, P, est


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("client_centre")
    X, P, est = client_csv(root / "data.csv")
    assert main(["--csv", str(root / "data.csv"), "--targets", "x,y", "--centre-columns", "est_x,est_y",
                 "--methods", "ge,nle", "--out", str(root / "run"), "--quiet", "--groups", "none"]) == 0
    port = free_port()
    proc = start_server(root / "run" / "bundle", port, root / "serve.log")
    base = f"http://127.0.0.1:{port}"
    try:
        wait_alive(base, proc)
        yield base, X, P, est, root
    finally:
        stop(proc)


@pytest.mark.slow
def test_regions_are_centred_on_the_clients_estimate_and_cover(served):
    base, X, P, est, root = served
    rows = slice(0, 200)
    r = post(base, "/predict-region", {"features": X[rows].tolist(), "centers": est[rows].tolist()})
    assert r.status_code == 200, r.text
    centres = np.array([g["center"] for g in r.json()["regions"]])
    np.testing.assert_allclose(centres, est[rows])
    c = post(base, "/contains", {"features": X[rows].tolist(), "points": P[rows].tolist(),
                                 "centers": est[rows].tolist()})
    assert c.status_code == 200
    inside = np.array([x["inside"] for x in c.json()["results"]])
    assert 0.8 <= inside.mean() <= 0.99  # 90 % regions on rows the bundle mostly saw in training
    info = httpx.get(f"{base}/model", headers={"X-API-Key": KEY}).json()
    assert info["requires_centers"] is True
    assert info["centre"]["type"] == "ClientCentre" and info["centre"]["columns"] == ["est_x", "est_y"]


@pytest.mark.parametrize(("centers", "message"), [
    (None, "send `centers`"),
    ([[0.0, float("nan")]], "centers"),
    ([[0.0, 1.0, 2.0]], "centers"),
    ([[0.0, 1.0], [1.0, 2.0]], "centers"),
])
def test_missing_or_bad_centers_are_refused_by_name(served, centers, message):
    base, X, P, est, root = served
    body = {"features": X[:1].tolist()}
    if centers is not None:
        body["centers"] = centers
    r = post(base, "/predict-region", body)
    assert r.status_code == 422, r.text
    problem = r.json()
    assert message in problem["detail"] and problem["errors"][0]["field"].startswith("centers")


def test_a_bundle_with_its_own_centre_refuses_centers(bundle_dir):
    from models.bundle import load_bundle
    from models.exceptions import InputError

    model = load_bundle(bundle_dir)
    X = np.zeros((1, model.n_features))
    with pytest.raises(InputError, match="this bundle has its own centre") as exc:
        model.predict_region(X, centers=[[0.0, 0.0]])
    assert exc.value.field == "centers"


def test_missing_centre_column_writes_nothing(tmp_path, capsys):
    client_csv(tmp_path / "data.csv", m=200)
    out = tmp_path / "run"
    assert main(["--csv", str(tmp_path / "data.csv"), "--targets", "x,y", "--centre-columns", "est_x,est_q",
                 "--out", str(out), "--quiet"]) == 2
    assert "centre column(s) ['est_q'] not found" in capsys.readouterr().err
    assert main(["--csv", str(tmp_path / "data.csv"), "--targets", "x,y", "--centre-columns", "est_x",
                 "--out", str(out), "--quiet"]) == 2
    assert "one estimate column per target (2: x, y); got 1" in capsys.readouterr().err
    assert not out.exists()
