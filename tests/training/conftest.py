"""Fixtures of the lmve-evaluate, lmve-predict and lmve-recalibrate tests: a model repository of two bundles (the
session's synthetic one, and a floor bundle with a CRS, so errors and sizes are ground metres); tests/e2e serves
it with a real ``lmve-serve``."""

from __future__ import annotations

import shutil

import pytest

from tests.conftest import train_and_save


@pytest.fixture(scope="session")
def walk_repository(bundle_dir, tmp_path_factory):
    """``root/synthetic`` (the session bundle: LMVE primary, all methods) and ``root/floors`` (GE and NLE with
    floor sets; targets declared EPSG:3857 metres), and a floor survey drawn again for walks."""
    from models.geo import TargetCRS
    from training.data.datasets import load_dataset
    from training.pipeline import TrainConfig

    root = tmp_path_factory.mktemp("walk-repository")
    shutil.copytree(bundle_dir, root / "synthetic")
    train_and_save(load_dataset("floors", seed=0), TrainConfig(seed=0, methods=("ge", "nle"), floor_column="floor"),
                   root / "floors", crs=TargetCRS(crs="EPSG:3857", axes="xy", scale=1.0))
    return root, load_dataset("floors", seed=7)
