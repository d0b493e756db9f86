"""Shared fixtures: small data generators with known structure."""

from __future__ import annotations

import os

import numpy as np
import pytest

# gRPC (LMVE_GRPC_PORT, 8081 by default) stays off in every app and server a test starts, unless the test
# gives it a free port of its own: two servers on one fixed port would otherwise refuse to start
os.environ["LMVE_GRPC_PORT"] = "0"


def heteroscedastic(m: int, d: int = 3, seed: int = 0):
    """y = (x0, x1) + noise whose size grows with |x1| and whose orientation turns with x0."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(m, d))
    theta = X[:, 0]
    s1, s2 = 0.2 + np.abs(X[:, 1]), np.full(m, 0.1)
    E = rng.normal(size=(m, 2)) * np.stack([s1, s2], axis=1)
    c, s = np.cos(theta), np.sin(theta)
    noise = np.stack([c * E[:, 0] - s * E[:, 1], s * E[:, 0] + c * E[:, 1]], axis=1)
    return X, X[:, :2] + noise


def joint_gaussian(m: int, d: int = 4, n: int = 2, seed: int = 0):
    """x ~ N(0, I), y = A x + e with e ~ N(0, Sigma): E[y|x] = A x, Cov[y|x] = Sigma."""
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(n, d))
    L = np.array([[1.0, 0.0], [0.8, 0.5]]) if n == 2 else np.tril(rng.normal(size=(n, n))) + 2 * np.eye(n)
    Sigma = L @ L.T
    X = rng.normal(size=(m, d))
    Y = X @ A.T + rng.normal(size=(m, n)) @ L.T
    return X, Y, Sigma


@pytest.fixture(scope="session")
def hetero_data():
    return heteroscedastic(2400, seed=1)


FAST_TRAIN_LMVE = {"max_steps": 80, "eval_every": 20, "patience": 2}


def data_dir():
    from training.data.location import TrainingSettings

    return TrainingSettings().data_dir


needs_data = pytest.mark.skipif(data_dir() is None, reason="paper datasets not found (set LMVE_DATA_DIR)")


@pytest.fixture(scope="session")
def trained_synthetic():
    """A small synthetic model with all four methods (fast LMVE budget), and its dataset. LMVE is
    forced primary (``--primary lmve``): the route tests exercise its answers and its fallbacks;
    tests/training/pipeline/test_served.py covers ``auto``."""
    from training.data.datasets import load_dataset
    from training.pipeline import TrainConfig, train

    ds = load_dataset("synthetic", n_samples=800, seed=0)
    # the row protocol (no grouping by position): one LMVE fit, the route tests' rows
    result = train(ds, TrainConfig(seed=0, method_params={"lmve": FAST_TRAIN_LMVE}, primary="lmve", use_groups=False))
    return result, ds


def train_and_save(ds, config, path, crs=None):
    """``train(ds, config)`` saved as a bundle at ``path`` (its targets in ``crs``, a
    :class:`models.geo.TargetCRS`, when given); the :class:`~training.pipeline.run.TrainResult`."""
    from models.bundle import save_bundle
    from training.pipeline import train

    result = train(ds, config)
    if crs is not None:
        result.model.crs = crs
    save_bundle(result.model, path, dataset=ds.info)
    return result


@pytest.fixture(scope="session")
def bundle_dir(trained_synthetic, tmp_path_factory):
    from models.bundle import save_bundle

    result, ds = trained_synthetic
    path = tmp_path_factory.mktemp("bundles") / "synthetic"
    save_bundle(result.model, path, dataset=ds.info, metrics=result.metrics)
    return path


def pytest_configure(config):
    """SIGTERM and SIGHUP interrupt the run as Ctrl-C does, so that it stops what it started (tests.processes)."""
    from tests import processes

    processes.interrupt_on_termination()


def pytest_unconfigure(config):
    from tests import processes

    processes.stop_all()


#: where the survey fixtures' floor lies in UTM zone 30N (EPSG:32630): near Castello de la Plana
UTM_ORIGIN = np.array([750000.0, 4430000.0])


@pytest.fixture(scope="session")
def survey_bundle(tmp_path_factory):
    """A site survey's bundle as ``lmve-train`` writes one: ``make_survey`` (40 positions, 5 readings each,
    8 beacons) grouped by position, GE and NLE, its targets in UTM zone 30N (the floor moved by
    :data:`UTM_ORIGIN`). Returns ``(path, result, dataset)``."""
    from dataclasses import replace

    from models.geo import TargetCRS
    from training.data.datasets import Dataset, group_by_position
    from training.data.synthetic import make_survey
    from training.pipeline import TrainConfig, train

    X, Y, _, _, fn, tn = make_survey(n_points=40, readings=5, n_beacons=8, seed=3)
    ds = group_by_position(Dataset("survey", X, Y + UTM_ORIGIN, fn, tn, "-"), auto=True)
    result = train(ds, TrainConfig(seed=0, methods=("ge", "nle"), crs=TargetCRS("EPSG:32630"), progress=False))
    path = tmp_path_factory.mktemp("survey-bundle") / "site"
    result.save(path)
    return path, result, replace(ds)
