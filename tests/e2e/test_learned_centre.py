"""``lmve-train --learned-centre`` end to end through a real ``lmve-serve``: LMVE learns to correct a
client's biased estimates, serves regions around the corrected centre, and keeps its coverage."""

from __future__ import annotations

import httpx
import numpy as np
import pytest

from tests.processes import stop
from tests.e2e.servers import KEY, free_port, post, start_server, wait_alive
from training.commands.train import main


def biased_rows(m: int, seed: int):
    """Features, true positions, and a client's estimate with an x-dependent bias plus noise."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, size=(m, 3))
    P = np.column_stack([4 * X[:, 0], 3 * X[:, 1]])
    bias = np.column_stack([1.5 * np.sin(3 * X[:, 0]), -1.2 * X[:, 1] ** 2 + 0.4])
    return X, P, P + bias + 0.25 * rng.normal(size=(m, 2))


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("learned_centre")
    X, P, est = biased_rows(2000, seed=0)
    lines = ["f1,f2,f3,x,y,est_x,est_y"] + [",".join(f"{v:.7g}" for v in [*X[i], *P[i], *est[i]]) for i in range(2000)]
    (root / "data.csv").write_text("\n".join(lines) + "\n")
    assert main(["--csv", str(root / "data.csv"), "--targets", "x,y", "--centre-columns", "est_x,est_y",
                 "--learned-centre", "--methods", "ge,nle,lmve", "--lmve-max-steps", "600", "--out",
                 str(root / "run"), "--quiet", "--groups", "none"]) == 0
    port = free_port()
    proc = start_server(root / "run" / "bundle", port, root / "serve.log")
    base = f"http://127.0.0.1:{port}"
    try:
        wait_alive(base, proc)
        yield base
    finally:
        stop(proc)


@pytest.mark.slow
def test_learned_centre_corrects_the_clients_bias_and_covers(served):
    base = served
    X, P, est = biased_rows(1000, seed=1)  # fresh rows (at most LMVE_MAX_ROWS per request)
    body = {"features": X.tolist(), "centers": est.tolist()}
    lmve = post(base, "/lmve/predict-region", body)
    ge = post(base, "/ge/predict-region", body)
    assert lmve.status_code == 200 and ge.status_code == 200, (lmve.text, ge.text)
    centre_lmve = np.array([g["center"] for g in lmve.json()["regions"]])
    np.testing.assert_allclose(np.array([g["center"] for g in ge.json()["regions"]]), est)  # GE: the client's

    def rmse(C):
        return float(np.sqrt(np.mean(np.sum((C - P) ** 2, axis=1))))

    assert rmse(centre_lmve) < 0.6 * rmse(est), (rmse(centre_lmve), rmse(est))
    inside = post(base, "/lmve/contains", {**body, "points": P.tolist()}).json()["results"]
    # the 90 % guarantee on fresh rows (about 180 calibration rows: the realised coverage varies by ~2 %)
    assert 0.84 <= np.mean([r["inside"] for r in inside]) <= 0.96
    at_centre = post(base, "/lmve/contains", {**body, "points": centre_lmve.tolist()}).json()["results"]
    assert max(r["distance"] for r in at_centre) < 1e-9  # scores are taken about the corrected centre
    volume = {name: np.mean([g["volume"] for g in r.json()["regions"]]) for name, r in (("lmve", lmve), ("ge", ge))}
    assert volume["lmve"] < 0.7 * volume["ge"], volume
    methods = httpx.get(f"{base}/model", headers={"X-API-Key": KEY}).json()["methods"]
    assert methods["lmve"]["learned_centre"] is True and methods["ge"]["learned_centre"] is False
