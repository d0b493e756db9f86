"""The MLP centre: trained with torch, served as arrays."""

import numpy as np
import pytest

from models.exceptions import InputError


def test_mlp_centre_learns_a_smooth_map_and_round_trips_without_torch_at_predict():
    from models.centres import MLPCentre

    rng = np.random.default_rng(5)
    X = rng.normal(size=(600, 3))
    Y = np.column_stack([np.sin(2 * X[:, 0]) + X[:, 1] ** 2, 3 * X[:, 2] * X[:, 0]]) + 0.05 * rng.normal(size=(600, 2))
    Xt = rng.normal(size=(200, 3))
    Yt = np.column_stack([np.sin(2 * Xt[:, 0]) + Xt[:, 1] ** 2, 3 * Xt[:, 2] * Xt[:, 0]])
    c = MLPCentre(max_steps=1500, eval_every=50, patience=6, learning_rates=(3e-3, 1e-2), dropouts=(0.0,)).fit(X, Y)
    mlp = np.sqrt(np.mean(np.sum((c.predict(Xt) - Yt) ** 2, axis=1)))
    mean_only = np.sqrt(np.mean(np.sum((Y.mean(axis=0) - Yt) ** 2, axis=1)))
    assert mlp < 0.35 * mean_only  # it learned the map, not the mean
    assert 0 <= c.config_index_ < 2 and np.isfinite(c.held_out_mse_)
    params, arrays = c.to_arrays()
    again = MLPCentre.from_arrays(params, arrays)
    np.testing.assert_array_equal(again.predict(Xt), c.predict(Xt))
    assert again.get_params()["hidden"] == (128, 64)
    # the same seed gives the same network
    np.testing.assert_array_equal(
        MLPCentre(max_steps=200, dropouts=(0.0,), learning_rates=(1e-2,)).fit(X, Y).predict(Xt),
        MLPCentre(max_steps=200, dropouts=(0.0,), learning_rates=(1e-2,)).fit(X, Y).predict(Xt))
    with pytest.raises(InputError, match="held_out must lie in"):
        MLPCentre(held_out=0.7).fit(X, Y)
