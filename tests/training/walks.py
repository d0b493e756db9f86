"""Walk files for the lmve-evaluate and lmve-predict tests, written with a bundle's own column names."""

from __future__ import annotations

import numpy as np


def write_walk(path, model, X, Y=None, extra: dict | None = None, sep: str = ","):
    """A CSV (or Parquet, by suffix) of features, targets (when given) and ``extra`` columns, full precision."""
    import pandas as pd

    cols = {name: X[:, j] for j, name in enumerate(model.feature_names)}
    if Y is not None:
        cols.update({name: Y[:, j] for j, name in enumerate(model.target_names)})
    cols.update(extra or {})
    frame = pd.DataFrame(cols)
    if str(path).endswith(".parquet"):
        frame.to_parquet(path, index=False, row_group_size=50)
    else:
        frame.to_csv(path, index=False, sep=sep)
    return path


def drifted(n, seed):
    """Readings after the radio environment drifted (every RSSI 8 dB weaker, 6 dB noisier): the guarantee breaks."""
    from training.data.synthetic import make_queries

    X, Y = make_queries(n, seed=seed)
    rng = np.random.default_rng(seed + 100)
    return X - 8.0 + rng.normal(0, 6.0, size=X.shape), Y
