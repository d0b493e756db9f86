"""The gradient-boosted centre's numpy trees against scikit-learn, and its prediction plan."""

import numpy as np
import pytest



@pytest.mark.slow
@pytest.mark.parametrize("leaves", [7, 31])  # 6 splits per tree: leaf tables; 30: the level walk
def test_hgb_centre_numpy_trees_match_sklearn_and_round_trip(leaves):
    from sklearn.ensemble import HistGradientBoostingRegressor

    from models.centres import HGBCentre

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


@pytest.mark.slow
def test_hgb_centre_plan_pads_targets_and_sends_rows_at_a_threshold_left():
    """Targets stopped early at different numbers of trees (padding trees worth 0), rows whose features sit
    exactly at split thresholds (``x <= t`` goes left), batches binned by broadcast comparison and by
    binary search, in several blocks: scikit-learn's predictions throughout."""
    from sklearn.ensemble import HistGradientBoostingRegressor

    from models.centres import HGBCentre

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


def test_hgb_centre_fits_its_targets_side_by_side_on_two_idle_cores_with_the_same_trees(monkeypatch):
    """From ``SIDE_BY_SIDE_CELLS`` input cells and two idle cores, the two targets' boosters fit on two worker
    threads at once (a barrier only two fits running together pass); below, or on one idle core, one after
    the other on the caller's thread. Same trees."""
    import threading

    import models.centres.hgb as hgb
    import models.nn.threads as threads
    from models.centres import HGBCentre

    monkeypatch.delenv(threads.ENV, raising=False)
    rng = np.random.default_rng(5)
    X = rng.normal(size=(300, 4))
    Y = np.column_stack([np.sin(X[:, 0]) + X[:, 1], X[:, 2] * X[:, 3]])
    seen, meet = [], threading.Barrier(2, timeout=30)

    class Watched(HGBCentre):
        def _fit_target(self, X, y, threads, columns):
            seen.append(threading.current_thread().name)
            if threading.current_thread() is not threading.main_thread():
                meet.wait()
            return super()._fit_target(X, y, threads, columns)

    small = Watched(max_iter=40).fit(X, Y)  # 1,200 cells: one after the other whatever the cores
    assert seen == [threading.main_thread().name] * 2
    seen.clear()
    monkeypatch.setattr(hgb, "SIDE_BY_SIDE_CELLS", X.size)
    monkeypatch.setattr(threads, "idle_cores", lambda *a: 2)
    two = Watched(max_iter=40).fit(X, Y)
    assert len(seen) == 2 and len(set(seen)) == 2 and threading.main_thread().name not in seen
    seen.clear()
    monkeypatch.setattr(threads, "idle_cores", lambda *a: 1)
    one = Watched(max_iter=40).fit(X, Y)
    assert seen == [threading.main_thread().name] * 2
    np.testing.assert_array_equal(two.predict(X), one.predict(X))
    np.testing.assert_array_equal(small.predict(X), one.predict(X))


@pytest.mark.slow
def test_hgb_centre_leaves_constant_columns_out_of_the_fit_with_the_same_trees(monkeypatch):
    """Constant columns (among them the first and the last) are left out of the boosters' input, the trees'
    split features still name the caller's columns, and the predictions are scikit-learn's on every column;
    all columns constant: one column kept, trees without splits."""
    from sklearn.ensemble import HistGradientBoostingRegressor

    from models.centres import HGBCentre

    rng = np.random.default_rng(11)
    X = np.full((300, 7), -110.0)
    X[:, [1, 3, 4]] = rng.normal(size=(300, 3))
    X[:, 5] = 2.5
    Y = np.column_stack([np.sin(2 * X[:, 3]) + X[:, 1], X[:, 4] ** 2])
    widths = []

    class Watched(HGBCentre):
        def _fit_target(self, X, y, threads, columns):
            widths.append(X.shape[1])
            return super()._fit_target(X, y, threads, columns)

    c = Watched(max_iter=50).fit(X, Y)
    assert widths == [3, 3]
    splits = np.concatenate([t["feature"][~t["leaf"]] for t in c.trees_])
    assert set(splits.tolist()) == {1, 3, 4}
    Q = X[:40] + rng.normal(scale=0.5, size=(40, 7))  # constant columns moved too: never read
    for j in range(2):
        ref = HistGradientBoostingRegressor(max_iter=50, max_leaf_nodes=7, min_samples_leaf=3,
                                            random_state=0).fit(X, Y[:, j]).predict(Q)
        np.testing.assert_allclose(c.predict(Q)[:, j], ref, rtol=1e-10, atol=1e-10)
    widths.clear()
    flat = Watched(max_iter=5).fit(np.ones((20, 3)), Y[:20])
    assert widths == [1, 1] and all(t["leaf"].all() for t in flat.trees_)
    np.testing.assert_allclose(flat.predict(np.zeros((2, 3))), np.tile(Y[:20].mean(axis=0), (2, 1)))
