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
