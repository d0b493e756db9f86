"""Fixtures of the command tests: a small survey of three buildings as a CSV file."""

from __future__ import annotations

import pandas as pd
import pytest

from training.data.datasets import load_dataset


@pytest.fixture(scope="session")
def survey_csv(tmp_path_factory):
    """Two buildings of 400 readings (the second 100 m east) and a third of 12: too few to train."""
    frames = []
    for k, (building, n) in enumerate((("A", 400), ("B", 400), ("C", 12))):
        ds = load_dataset("synthetic", n_samples=max(n, 100), seed=k)
        df = pd.DataFrame(ds.X[:n], columns=ds.feature_names)
        df["x"], df["y"] = ds.Y[:n, 0] + 100.0 * k, ds.Y[:n, 1]
        df["building"] = building
        frames.append(df)
    path = tmp_path_factory.mktemp("survey") / "survey.csv"
    pd.concat(frames).to_csv(path, index=False)
    return path
