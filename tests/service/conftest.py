import numpy as np
import pytest
from fastapi.testclient import TestClient

from service.app import create_app
from service.settings import ServiceSettings


@pytest.fixture()
def make_client(bundle_dir):
    clients = []

    def _make(**overrides):
        settings = ServiceSettings(**{"bundle": bundle_dir, **overrides})
        client = TestClient(create_app(settings))
        client.__enter__()
        clients.append(client)
        return client

    yield _make
    for c in clients:
        c.__exit__(None, None, None)


@pytest.fixture()
def client(make_client):
    return make_client()


@pytest.fixture(scope="session")
def test_rows(trained_synthetic):
    result, ds = trained_synthetic
    idx = result.split.test
    return ds.X[idx], ds.Y[idx]


def features(X):
    return np.asarray(X).tolist()


@pytest.fixture(scope="session")
def site_repository(tmp_path_factory):
    """A model repository of three sites, ``site=0`` to ``site=2``: the synthetic survey moved by 100 m
    per site (so each model's centres tell it apart), GE and NLE only (fast). Returns the root and each
    site's test rows ``(X, Y)``. Tests that change it work on a copy (:func:`repository_copy`)."""
    from dataclasses import replace

    from models.bundle import save_bundle
    from training.data.datasets import load_dataset
    from training.pipeline import TrainConfig, train

    root = tmp_path_factory.mktemp("repository")
    rows = {}
    for k in range(3):
        ds = load_dataset("synthetic", n_samples=400, seed=k)
        ds = replace(ds, Y=ds.Y + 100.0 * k)
        result = train(ds, TrainConfig(seed=0, methods=("ge", "nle"), use_groups=False))  # rows, as the tests send
        save_bundle(result.model, root / f"site={k}", dataset=ds.info)
        rows[f"site={k}"] = (ds.X[result.split.test], ds.Y[result.split.test])
    return root, rows


@pytest.fixture()
def repository_copy(site_repository, tmp_path):
    """A private copy of :func:`site_repository` (the test may corrupt, add or recalibrate models)."""
    import shutil

    root, rows = site_repository
    shutil.copytree(root, tmp_path / "repo")
    return tmp_path / "repo", rows


@pytest.fixture(scope="session")
def pg_cluster():
    """One throwaway PostgreSQL cluster for the session (tests.postgres); each test takes its own database."""
    from tests.postgres import Cluster, bindir

    if bindir() is None:
        pytest.skip("PostgreSQL's server is not installed (.ci/run installs Debian's postgresql)")
    cluster = Cluster().start()
    yield cluster
    cluster.destroy()


BACKENDS = ("sqlite", "postgresql")


@pytest.fixture(params=BACKENDS)
def state_url(request, tmp_path):
    """A fresh state on each backend: a SQLite file, or a new database on the session's PostgreSQL cluster."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/state.sqlite"
    return request.getfixturevalue("pg_cluster").create_database()
