"""The clustered search: the brute force's rows and float32 distances, ties included, on any fingerprints."""

import numpy as np
import pytest

from models.centres import KNNCentre, clusters, search
from models.centres.clusters import ClusterIndex
from models.centres.search import ExactIndex, FingerprintIndex, _smallest, kth_smallest, sparse_offset


@pytest.fixture(autouse=True)
def small_clusters(monkeypatch):
    """A few hundred rows in dozens of clusters: every bound is exercised on data a test can afford."""
    monkeypatch.setattr(clusters, "ROWS_PER_CLUSTER", 8)


def continuous(rng, m, d):
    """Standardised-looking rows: each column at its floor but for a few continuous readings."""
    floor = rng.normal(size=d)
    X = np.tile(floor, (m, 1))
    hit = rng.random((m, d)) < 0.08
    X[hit] += rng.uniform(0.5, 3.0, size=hit.sum())
    return X


def surveyed(rng, m, d):
    """Survey-like integer readings on a few values, each fingerprint repeated four times: heavy ties."""
    hit = rng.random((m // 4, d)) < 0.06
    base = np.where(hit, rng.integers(-90, -60, size=hit.shape) // 10 * 10, -110.0)
    return np.repeat(base, 4, axis=0)[rng.permutation(m)]


def silent(rng, m, d):
    """Continuous rows, 40 of which hear nothing (all tied for every query), one column nobody hears."""
    X = continuous(rng, m, d)
    floor = X.min(axis=0)
    X[:40] = floor
    X[:, 5] = floor[5]
    return X


def dense(rng, m, d):
    """Every column heard by every row (stored as CSR all the same)."""
    return rng.normal(size=(m, d))


def queries(rng, X):
    """New rows, reference rows (distance 0), a query hearing nothing, one below the floor somewhere, one
    hearing a column no reference row hears."""
    floor = X.min(axis=0)
    pick = X[rng.choice(len(X), 30)]
    Q = np.vstack([pick + rng.normal(scale=0.3, size=pick.shape) * (pick != floor), X[:10], floor, floor - 0.5,
                   floor])
    Q[-1, 5] += 2.0
    return Q


def brute(index, Q, k):
    """The chunked search's float32 distances and, per query, its rows at most the k-th (ascending) and its k
    nearest in (distance, row) order."""
    D = index._distances(Q)
    within = [np.flatnonzero(row <= kth) for row, kth in zip(D, kth_smallest(D, k)[:, 0])]
    order = [np.lexsort((np.arange(len(row)), row))[:k] for row in D]
    return D, within, order


@pytest.mark.parametrize("kind", [continuous, surveyed, silent, dense])
@pytest.mark.parametrize("k", [1, 3, 8, 17, 40])
def test_the_clusters_find_the_brute_forces_rows_and_distances(kind, k):
    """Rows and float32 distances equal to the last bit; with ties every row at the k-th distance (ascending),
    without them the k nearest by (distance, row index)."""
    rng = np.random.default_rng(k)
    X = kind(rng, 480, 70)
    Q = queries(rng, X)
    index = FingerprintIndex(X, X.min(axis=0))
    found = ClusterIndex.build(index.rows, index.norms)
    assert found.n_clusters == 60
    D, within, order = brute(index, Q, k)
    ptr, rows, dist = found.search(index._query(Q), k, ties=True)
    for i in range(len(Q)):
        got = rows[ptr[i]:ptr[i + 1]]
        np.testing.assert_array_equal(got, within[i], err_msg=f"query {i}")
        np.testing.assert_array_equal(dist[ptr[i]:ptr[i + 1]], D[i, got])
    ptr, rows, dist = found.search(index._query(Q), k, ties=False)
    np.testing.assert_array_equal(np.diff(ptr), k)
    np.testing.assert_array_equal(rows.reshape(-1, k), np.array(order))
    np.testing.assert_array_equal(dist.reshape(-1, k), np.take_along_axis(D, np.array(order), axis=1))
    if kind is surveyed and k < 4:  # a reference row as the query: its four copies tie at distance 0
        assert any(len(w) > k for w in within)


def test_ties_at_the_kth_distance_are_all_found_for_a_query_hearing_nothing():
    """A query that hears nothing is equally near every reference row that hears nothing."""
    rng = np.random.default_rng(0)
    X = silent(rng, 480, 70)
    index = FingerprintIndex(X, X.min(axis=0))
    ptr, rows, _ = ClusterIndex.build(index.rows, index.norms).search(index._query(X[:1] * 0 + X.min(axis=0)), 3, True)
    np.testing.assert_array_equal(rows, np.arange(40))


@pytest.fixture
def clustered(monkeypatch):
    """FingerprintIndex searching through its clusters from a few hundred rows on, built at the first search."""
    monkeypatch.setattr(search, "CLUSTER_ROWS", 100)
    monkeypatch.setattr(search, "CLUSTER_AFTER", 0)


@pytest.mark.parametrize("k", [1, 3, 16, 17, 32, 33])
def test_a_fingerprint_index_answers_as_its_chunked_search(clustered, k, monkeypatch):
    """kneighbors (its order: nearest first up to ARGMIN_K, ascending rows beyond) and neighbourhoods equal the
    chunked brute force, for k up to CLUSTER_K through the clusters and beyond it by the brute force, on
    several threads and chunks."""
    monkeypatch.setattr(clusters, "CHUNK", 7)
    monkeypatch.setattr(search, "WHOLE_COLUMNS", 0)  # the chunked search's order for many rows
    rng = np.random.default_rng(k)
    X = surveyed(rng, 600, 90)
    Q = queries(rng, X)
    assert sparse_offset(X) is not None
    index = FingerprintIndex(X, sparse_offset(X))
    assert index._pruned(Q, k, ties=True) is not None or k > search.CLUSTER_K
    np.testing.assert_array_equal(index.kneighbors(Q, k), ExactIndex.kneighbors(index, Q, k))
    got, want = index.neighbourhoods(Q, k), ExactIndex.neighbourhoods(index, Q, k)
    assert len(got) == len(want) and all(np.array_equal(a, b) for a, b in zip(got, want))


def test_the_clusters_are_built_once_searches_would_pay_for_them_or_when_prepared(clustered, monkeypatch):
    """Before CLUSTER_AFTER queries a reference row, the brute force (or the heard columns) searches; then the
    clusters are built; prepare() builds them at once. The answer does not change."""
    monkeypatch.setattr(search, "CLUSTER_AFTER", 0.3)  # 180 queries for 600 rows
    rng = np.random.default_rng(1)
    X = continuous(rng, 600, 90)
    Q = queries(rng, X)
    index = FingerprintIndex(X, sparse_offset(X))
    for _ in range(3):  # 3 x 51 = 153 queries: not yet
        before = index.kneighbors(Q, 5), index.neighbourhoods(Q[:search.HEARD_ROWS], 5)
    assert index._cluster_index is None and index._queries == 3 * (len(Q) + search.HEARD_ROWS)
    index.kneighbors(Q, 5)
    assert isinstance(index._cluster_index, ClusterIndex)
    index = FingerprintIndex(X, sparse_offset(X))
    index.prepare()
    assert isinstance(index._cluster_index, ClusterIndex)
    after = index.kneighbors(Q, 5), index.neighbourhoods(Q[:search.HEARD_ROWS], 5)
    np.testing.assert_array_equal(before[0], after[0])
    np.testing.assert_array_equal(np.asarray(before[1]), np.asarray(after[1]))


def test_rows_whose_blocks_exceed_the_budget_are_searched_by_the_brute_force(clustered, monkeypatch):
    monkeypatch.setattr(clusters, "BLOCK_BYTES", 1000)
    rng = np.random.default_rng(2)
    X = continuous(rng, 600, 90)
    Q = queries(rng, X)
    index = FingerprintIndex(X, sparse_offset(X))
    assert ClusterIndex.build(index.rows, index.norms) is None
    np.testing.assert_array_equal(index.kneighbors(Q, 3), ExactIndex.kneighbors(index, Q, 3))
    assert index._cluster_index is False


def test_a_knn_centre_predicts_the_same_centres_to_the_last_bit(clustered, monkeypatch):
    """The clusters change how fast a centre comes, not one bit of it (every tied row averaged)."""
    rng = np.random.default_rng(3)
    X = surveyed(rng, 600, 90)
    Y = rng.normal(size=(600, 2)) * 10
    Q = queries(rng, X)
    centre = KNNCentre(n_neighbors=4).fit(X, Y)
    got = centre.predict(Q)
    assert isinstance(centre.model_._cluster_index, ClusterIndex)
    monkeypatch.setattr(search, "CLUSTER_ROWS", 10**9)  # the same index, searched by the brute force
    np.testing.assert_array_equal(got, centre.predict(Q))


def test_prepare_builds_the_index_a_fingerprint_centre_will_search(clustered):
    """What a server calls when it loads a bundle: the clusters (and their compiled loop) before the first
    request, through the fingerprint centre and the kNN centre it wraps; a dense centre has nothing to build."""
    from models.centres import FingerprintCentre

    rng = np.random.default_rng(4)
    X = continuous(rng, 600, 90)
    Y = rng.normal(size=(600, 2))
    centre = FingerprintCentre(representation="dbm", cutoff_db=0.0, n_neighbors=3, weights="distance").fit(X, Y)
    index = centre.knn_.model_
    assert isinstance(index, FingerprintIndex) and index._cluster_index is None
    centre.prepare()
    assert isinstance(index._cluster_index, ClusterIndex)
    dense = KNNCentre().fit(rng.normal(size=(600, 8)), Y)
    dense.prepare()  # a DenseIndex: nothing to build, nothing raised
    assert not hasattr(dense.model_, "_cluster_index")
