import numpy as np
import pytest
from sklearn.svm import SVR

from models.centre import ConstantCentre, SVRCentre
from models.exceptions import InputError


@pytest.mark.parametrize("gamma", ["scale", 0.3])
def test_numpy_evaluation_matches_sklearn_svr(gamma):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 5))
    Y = np.c_[X[:, 0] + 0.1 * rng.normal(size=300), np.sin(X[:, 1]), X[:, 2] ** 2]
    centre = SVRCentre(gamma=gamma).fit(X, Y)
    Xt = rng.normal(size=(50, 5))
    ref = np.column_stack([SVR(gamma=gamma).fit(X, Y[:, j]).predict(Xt) for j in range(3)])
    np.testing.assert_allclose(centre.predict(Xt), ref, rtol=1e-9, atol=1e-12)
    again = SVRCentre.from_arrays(*centre.to_arrays())
    np.testing.assert_allclose(again.predict(Xt), ref, rtol=1e-9, atol=1e-12)


def test_scaled_targets_map_back():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(200, 3))
    Y = np.c_[1000 + 50 * X[:, 0], 0.01 * X[:, 1]]
    pred = SVRCentre(scale_targets=True).fit(X, Y).predict(X)
    assert np.corrcoef(pred[:, 0], Y[:, 0])[0, 1] > 0.95 and abs(pred[:, 0].mean() - 1000) < 5


def test_centre_fit_errors_name_the_field():
    with pytest.raises(InputError, match="X has 4 rows but Y has 3; they must match") as info:
        SVRCentre().fit(np.zeros((4, 2)), np.ones((3, 2)))
    assert (info.value.field, info.value.expected, info.value.received) == ("Y", "4 rows", "3 rows")
    Y = np.ones((4, 2))
    Y[2, 1] = np.nan
    with pytest.raises(InputError, match=r"Y contains NaN or inf \(first at row 2, column 1\)") as info:
        ConstantCentre().fit(np.zeros((4, 2)), Y)
    assert info.value.field == "Y[2][1]"


def test_per_target_gammas_and_target_scale_match_sklearn():
    """A bundle whose targets' SVRs have different ``gamma`` takes one kernel per target; with
    ``scale_targets`` the target scale and mean are folded into the kernel plan."""
    rng = np.random.default_rng(2)
    X = rng.normal(size=(250, 4))
    Y = np.c_[100 + 20 * np.sin(X[:, 0]), 0.5 * X[:, 1] * X[:, 2]]
    centre = SVRCentre(scale_targets=True).fit(X, Y)
    params, arrays = centre.to_arrays()
    arrays["gamma"] = np.array([0.2, 0.7])
    mixed = SVRCentre.from_arrays(params, arrays)
    Xt = rng.normal(size=(40, 4))
    Z = (Y - centre.y_mean_) / centre.y_scale_
    ref = np.column_stack([SVR(gamma=g).fit(X, Z[:, j]).predict(Xt) for j, g in enumerate(centre.gamma_)])
    ref = ref * centre.y_scale_ + centre.y_mean_
    np.testing.assert_allclose(centre.predict(Xt), ref, rtol=1e-9, atol=1e-9)
    # the per-target path: the kernel sum written out with each target's own gamma
    for j, g in enumerate(arrays["gamma"]):
        sv, a = mixed.support_vectors_[j], mixed.dual_coef_[j]
        K = np.exp(-g * ((Xt[:, None, :] - sv[None]) ** 2).sum(-1))
        expected = (K @ a + mixed.intercept_[j]) * mixed.y_scale_[j] + mixed.y_mean_[j]
        np.testing.assert_allclose(mixed.predict(Xt)[:, j], expected, rtol=1e-9, atol=1e-9)


def test_knn_centre_matches_sklearn_and_round_trips():
    from sklearn.neighbors import KNeighborsRegressor

    from models.centre import KNNCentre

    rng = np.random.default_rng(0)
    X, Y = rng.normal(size=(120, 4)), rng.normal(size=(120, 2))
    Q = np.vstack([rng.normal(size=(30, 4)), X[:5]])  # and exact matches (zero distance)
    c = KNNCentre(n_neighbors=3).fit(X, Y)
    np.testing.assert_allclose(c.predict(Q), KNeighborsRegressor(3, weights="distance").fit(X, Y).predict(Q), rtol=0,
                               atol=1e-12)  # numpy's sums in another order than scikit-learn's
    np.testing.assert_array_equal(c.predict(X[:5]), Y[:5])
    again = KNNCentre.from_arrays(*c.to_arrays())
    np.testing.assert_array_equal(again.predict(Q), c.predict(Q))
    assert KNNCentre(n_neighbors=10).fit(X[:4], Y[:4]).predict(Q).shape == (35, 2)  # k capped at the rows
    with pytest.raises(InputError, match="n_neighbors must be a positive integer; got 0"):
        KNNCentre(n_neighbors=0).fit(X, Y)


@pytest.mark.parametrize("leaves", [7, 31])  # 6 splits per tree: leaf tables; 30: the level walk
def test_hgb_centre_numpy_trees_match_sklearn_and_round_trip(leaves):
    from sklearn.ensemble import HistGradientBoostingRegressor

    from models.centre import HGBCentre

    rng = np.random.default_rng(3)
    X = rng.normal(size=(400, 5))
    Y = np.column_stack([np.sin(2 * X[:, 0]) + X[:, 1] ** 2, X[:, 2] * X[:, 3] + 0.1 * rng.normal(size=400)])
    Q = np.vstack([rng.normal(size=(60, 5)), X[:10], rng.normal(scale=5, size=(10, 5))])
    c = HGBCentre(max_iter=60, max_leaf_nodes=leaves).fit(X, Y)
    for j in range(2):
        ref = HistGradientBoostingRegressor(max_iter=60, max_leaf_nodes=leaves, min_samples_leaf=3,
                                            early_stopping="auto", random_state=0).fit(X, Y[:, j]).predict(Q)
        np.testing.assert_allclose(c.predict(Q)[:, j], ref, rtol=1e-10, atol=1e-10)
    assert all((t is None) == (leaves > HGBCentre.TABLE_BITS + 1) for t in c.tables_)
    again = HGBCentre.from_arrays(*c.to_arrays())
    np.testing.assert_array_equal(again.predict(Q), c.predict(Q))
    assert c.predict(Q[:1]).shape == (1, 2)


def test_mlp_centre_learns_a_smooth_map_and_round_trips_without_torch_at_predict():
    from models.centre import MLPCentre

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


def test_hgb_centre_plan_pads_targets_and_sends_rows_at_a_threshold_left():
    """Targets stopped early at different numbers of trees (padding trees worth 0), rows whose features sit
    exactly at split thresholds (``x <= t`` goes left), batches binned by broadcast comparison and by
    binary search, in several blocks: scikit-learn's predictions throughout."""
    from sklearn.ensemble import HistGradientBoostingRegressor

    from models.centre import HGBCentre

    rng = np.random.default_rng(8)
    X = rng.normal(size=(500, 4))
    Y = np.column_stack([np.sin(3 * X[:, 0]) + X[:, 1], 0.2 * X[:, 2] + rng.normal(size=500)])
    c = HGBCentre(max_iter=300, early_stopping=True).fit(X, Y)
    counts = [len(t["roots"]) for t in c.trees_]
    assert counts[0] != counts[1] and c.plan_["n_trees"] == max(counts)
    Q = rng.normal(size=(3 * HGBCentre.BLOCK_ROWS + 5, 4))
    thresholds = c.trees_[0]["threshold"][~c.trees_[0]["leaf"]]
    features = c.trees_[0]["feature"][~c.trees_[0]["leaf"]]
    Q[np.arange(40), features[:40]] = thresholds[:40]  # a feature exactly at one of its thresholds
    for j in range(2):
        ref = HistGradientBoostingRegressor(max_iter=300, max_leaf_nodes=7, min_samples_leaf=3, early_stopping=True,
                                            random_state=0).fit(X, Y[:, j])
        for rows in (Q[:3], Q):  # broadcast bins; binary search, four blocks
            np.testing.assert_allclose(c.predict(rows)[:, j], ref.predict(rows), rtol=1e-12, atol=1e-12)
