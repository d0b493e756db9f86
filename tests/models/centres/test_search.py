"""Exact neighbour search in numpy: sparse fingerprints and dense rows, against scikit-learn's answers."""

from copy import deepcopy

import numpy as np
import pytest

from models.centres import search
from models.centres import KNNCentre
from models.centres.search import (SEARCH_VERSION, SPARSE_MIN_COLUMNS, DenseIndex, ExactIndex, FingerprintIndex, _smallest,
                                   distance_weighted_mean, kth_smallest, search_input, shared_distances,
                                   sparse_offset)
from models.shapes.nle import NearestNeighbourEllipsoid


def fingerprints(m: int, d: int, seed: int = 0, detected: float = 0.04):
    """Standardised-looking fingerprints: each column at its own floor value except a few readings
    (continuous, so no two rows tie), and positions."""
    rng = np.random.default_rng(seed)
    floor = rng.normal(size=d)
    X = np.tile(floor, (m, 1))
    hit = rng.random((m, d)) < detected
    X[hit] += rng.uniform(0.5, 3.0, size=hit.sum())
    return X, rng.normal(size=(m, 2)) * 10


def test_sparse_search_is_chosen_for_sparse_wide_rows_only():
    X, _ = fingerprints(500, 100)
    np.testing.assert_array_equal(sparse_offset(X), X.min(axis=0))
    assert sparse_offset(X[:, : SPARSE_MIN_COLUMNS - 1]) is None  # too few columns: dense BLAS
    assert sparse_offset(np.random.default_rng(0).normal(size=(500, 100))) is None  # dense values
    assert search_input(X, None) is X
    S = search_input(X, X.min(axis=0))
    assert S.shape == X.shape and S.nnz == np.count_nonzero(X != X.min(axis=0))


@pytest.fixture(scope="module")
def data():
    X, Y = fingerprints(1500, 120, seed=1)
    Q, _ = fingerprints(200, 120, seed=2)
    return X, Y, Q


def test_knn_centre_sparse_equals_dense_and_round_trips(data):
    X, Y, Q = data
    sparse = KNNCentre().fit(X, Y)
    assert sparse.sparse_offset_ is not None
    dense = KNNCentre()._index(X, Y, None)
    np.testing.assert_allclose(sparse.predict(Q), dense.predict(Q), rtol=0, atol=1e-9)
    again = KNNCentre.from_arrays(*sparse.to_arrays())
    np.testing.assert_array_equal(again.sparse_offset_, sparse.sparse_offset_)
    np.testing.assert_array_equal(again.predict(Q), sparse.predict(Q))
    params, arrays = sparse.to_arrays()
    arrays.pop("sparse_offset")  # a bundle from before the sparse search: searched dense, as calibrated
    assert KNNCentre.from_arrays(params, arrays).sparse_offset_ is None


def test_nle_sparse_neighbours_equal_dense_and_round_trip(data):
    X, Y, Q = data
    sparse = NearestNeighbourEllipsoid().fit(X, Y)
    assert sparse.sparse_offset_ is not None
    dense = NearestNeighbourEllipsoid.from_arrays(*sparse.to_arrays())
    dense._build_index(None)
    np.testing.assert_allclose(sparse.predict_shape(Q), dense.predict_shape(Q), rtol=1e-12, atol=1e-12)
    again = NearestNeighbourEllipsoid.from_arrays(*sparse.to_arrays())
    np.testing.assert_array_equal(again.predict_shape(Q), sparse.predict_shape(Q))


def assert_nearest(X, Q, idx):
    """``idx`` (N, k) holds k nearest rows of X for each row of Q: their float64 squared distances are
    the k smallest (rows tied at the k-th distance, such as rows with nothing detected, may be any)."""
    d = ((Q[:, None, :] - X[None]) ** 2).sum(axis=2)
    k = idx.shape[1]
    assert all(len(set(r)) == k for r in idx)
    np.testing.assert_allclose(np.sort(np.take_along_axis(d, idx, axis=1), axis=1), np.sort(d, axis=1)[:, :k],
                               rtol=1e-6)


@pytest.fixture(params=["whole rows", "argmin and cut"])
def paths(request, monkeypatch):
    """Version 3 searches few reference rows whole; the argmin and sampled-cut paths (for many rows) are
    exercised on the same small data by lowering that bound to 0."""
    if request.param != "whole rows":
        monkeypatch.setattr(search, "WHOLE_COLUMNS", 0)
    return request.param


@pytest.mark.slow
@pytest.mark.parametrize("k", [1, 3, 16, 17, 200, 1499, 1500, 2000])
def test_fingerprint_index_finds_the_exact_neighbours_batch_independently(data, k, paths):
    """Every k (one partition of whole rows; repeated argmin up to 16, the sampled cut above; all rows at
    k >= m): the float64 nearest sets, and a query's neighbours do not depend on the batch it comes in."""
    X, _, Q = data
    index = FingerprintIndex(X, sparse_offset(X))
    idx = index.kneighbors(Q, k)
    assert idx.shape == (len(Q), min(k, len(X)))
    assert_nearest(X, Q, idx)
    alone = np.vstack([index.kneighbors(Q[i:i + 1], k) for i in range(0, 70, 7)])
    np.testing.assert_array_equal(alone, idx[0:70:7])


def test_smallest_falls_back_to_the_whole_row_when_its_sampled_cut_is_too_low(paths):
    """A row whose strided sample holds its smallest values leaves fewer than k below the cut."""
    m, k = 400, 20
    step = max(1, m // (4 * k))
    row = np.arange(m, dtype=np.float32) + 1000.0
    row[::step] = np.arange(row[::step].size, dtype=np.float32)  # the sample: the smallest values
    D = np.vstack([row, np.random.default_rng(0).permutation(row)])  # distinct values: one answer
    want = [set(np.argsort(r)[:k]) for r in D]
    for version in (2, 3):
        searched = D.copy()
        assert [set(r) for r in _smallest(searched, k, version)] == want
        np.testing.assert_array_equal(searched, D)  # left as found, on every path (distances may be shared)
    assert [set(r) for r in _smallest(searched, 3)] == [set(np.argsort(r)[:3]) for r in D]
    np.testing.assert_array_equal(searched, D)


@pytest.mark.parametrize("k", [2, 16, 17, 40, 299])
def test_version_3_takes_the_lowest_rows_among_those_tied_at_the_kth_distance(k, paths):
    """Heavy ties (few distinct values, as repeated survey fingerprints give): the k smallest, ties at the
    k-th broken by lowest column, i.e. the first k of a stable sort, on the argmin path, the sampled cut
    and the rows whose cut leaves fewer than k."""
    rng = np.random.default_rng(k)
    D = rng.integers(0, 6, size=(9, 300)).astype(np.float32)
    D[0] = 1.0  # one value throughout
    D[1] = 14.5  # its sample (every (m // k)-th) holds its smallest values: for k = 17 fewer than k
    D[1, ::300 // k] = np.arange(len(D[1, ::300 // k]))  # fall under the cut, and it is searched whole
    want = np.sort(np.argsort(D, axis=1, kind="stable")[:, :k], axis=1)
    np.testing.assert_array_equal(np.sort(_smallest(D.copy(), k, 3), axis=1), want)


def test_threads_do_not_change_the_neighbours(data, monkeypatch):
    """Chunks searched on one thread or several: the same answer, in the same order."""
    X, _, Q = data
    index = FingerprintIndex(X, sparse_offset(X))
    assert len(Q) > 2 * search.CHUNK_ROWS
    parallel = index.kneighbors(Q, 20), index.neighbourhoods(Q, 3)
    monkeypatch.setattr(search, "SEARCH_THREADS", 1)
    serial = index.kneighbors(Q, 20), index.neighbourhoods(Q, 3)
    np.testing.assert_array_equal(parallel[0], serial[0])
    assert all(np.array_equal(a, b) for a, b in zip(parallel[1], serial[1]))


def test_centre_and_nle_share_one_index_and_a_scope_computes_distances_once(data, monkeypatch):
    """A kNN centre and NLE fitted on the same rows hold one index, also after loading from arrays and a
    deep copy. Within ``shared_distances`` the second search of the same query array computes no
    distances (another array, or a scope over its byte budget, computes them again); answers are the
    same as without the scope."""
    X, Y, Q = data
    centre, nle = KNNCentre().fit(X, Y), NearestNeighbourEllipsoid().fit(X, Y)
    assert centre.model_ is nle._index
    loaded = NearestNeighbourEllipsoid.from_arrays(*nle.to_arrays())
    assert loaded._index is centre.model_ and deepcopy(loaded)._index is centre.model_
    assert FingerprintIndex.of(X[1:], sparse_offset(X)) is not centre.model_
    computed = []
    real = FingerprintIndex._distances
    monkeypatch.setattr(FingerprintIndex, "_distances", lambda self, q: computed.append(len(q)) or real(self, q))
    want = centre.predict(Q), nle.predict_shape(Q)
    assert sum(computed) == 2 * len(Q)
    computed.clear()
    with shared_distances():
        got = centre.predict(Q), nle.predict_shape(Q)
        assert sum(computed) == len(Q)
        nle.predict_shape(Q.copy())
        assert sum(computed) == 2 * len(Q)
    for a, b in zip(want, got):
        np.testing.assert_array_equal(a, b)
    computed.clear()
    monkeypatch.setattr(search, "SHARED_BYTES", 4 * len(Q) * len(X) - 1)
    with shared_distances():
        centre.predict(Q), nle.predict_shape(Q)
    assert sum(computed) == 2 * len(Q)


def test_distance_weighted_mean_is_scikit_learns_rule():
    """Weights 1/distance, exact matches taking all the weight, and the uniform mean; any number of
    neighbours a row (ragged lists) as in an array."""
    from sklearn.neighbors import KNeighborsRegressor

    X, Y = fingerprints(400, 80, seed=4)
    Q = np.vstack([fingerprints(50, 80, seed=5)[0], X[:5]])  # the last five are reference rows
    idx = FingerprintIndex(X, sparse_offset(X)).kneighbors(Q, 4)
    for weights in ("distance", "uniform"):
        # scikit-learn's own distance to an exact match is a rounding error, not 0 (1.9: about 1e-7), which
        # leaves its neighbours a sliver of the weight: it is the reference on the rows that match none
        want = KNeighborsRegressor(n_neighbors=4, weights=weights).fit(X, Y).predict(Q[:50])
        np.testing.assert_allclose(distance_weighted_mean(Q[:50], X, Y, idx[:50], weights), want, rtol=0, atol=1e-9)
        ragged = [row[:1 + i % 4] for i, row in enumerate(idx[:50])]
        want = [KNeighborsRegressor(n_neighbors=len(r), weights=weights).fit(X[r], Y[r]).predict(Q[i:i + 1])[0]
                for i, r in enumerate(ragged)]
        np.testing.assert_allclose(distance_weighted_mean(Q[:50], X, Y, ragged, weights), want, rtol=0, atol=1e-9)
    np.testing.assert_array_equal(distance_weighted_mean(Q[-5:], X, Y, idx[-5:], "distance"), Y[:5])


def test_distance_weighted_mean_of_a_row_does_not_depend_on_its_batch():
    """A row's mean alone, at every place in a batch and at any memory alignment is the same to the last bit,
    and visiting only the columns that differ from the not-heard value changes no bit."""
    from models.centres.search import differing

    F, P = fingerprints(360, 77, seed=8)  # 77 columns: rows start at every alignment
    X, Y, Q = F[:300], P[:300], F[300:].copy()
    Q[:3] = X[:3]  # exact matches
    Q[3] = X.min(axis=0)  # hears nothing
    Q[4, 0] = 5.0  # a column its neighbours did not hear
    idx = FingerprintIndex(X, sparse_offset(X)).kneighbors(Q, 5)
    batch = distance_weighted_mean(Q, X, Y, idx, "distance")
    alone = np.vstack([distance_weighted_mean(Q[i:i + 1], X, Y, idx[i:i + 1], "distance") for i in range(len(Q))])
    np.testing.assert_array_equal(alone, batch)
    shifted = np.empty(Q.size + 1)[1:].reshape(Q.shape)  # float64 rows off their 16-byte alignment
    shifted[:] = Q[::-1]
    np.testing.assert_array_equal(distance_weighted_mean(shifted, X, Y, idx[::-1], "distance"), batch[::-1])
    reference = differing(X, X.min(axis=0))
    assert reference[2].size < 0.1 * X.size
    np.testing.assert_array_equal(distance_weighted_mean(Q, X, Y, idx, "distance", reference), batch)
    np.testing.assert_array_equal(batch[:3], Y[:3])
    centre = KNNCentre(n_neighbors=5).fit(X, Y)
    np.testing.assert_array_equal(np.vstack([centre.predict(Q[i:i + 1]) for i in range(len(Q))]), centre.predict(Q))


def test_knn_centre_averages_every_row_tied_at_the_kth_distance():
    """A fingerprint with nothing detected is equally near every reference row with nothing detected:
    the centre averages all of them (whatever their order), not the first three; untied rows keep k."""
    X, Y = fingerprints(600, 80, seed=6)
    floor = X.min(axis=0)
    X[:40] = floor  # at least 40 reference rows with nothing detected, at scattered positions
    empty = (X == floor).all(axis=1)
    centre = KNNCentre().fit(X, Y)
    assert isinstance(centre.model_, FingerprintIndex)
    np.testing.assert_allclose(centre.predict(floor[None]), Y[empty].mean(axis=0)[None], rtol=0, atol=1e-12)
    order = np.random.default_rng(0).permutation(len(X))
    np.testing.assert_allclose(KNNCentre().fit(X[order], Y[order]).predict(floor[None]), centre.predict(floor[None]),
                               rtol=0, atol=1e-12)
    Q, _ = fingerprints(30, 80, seed=7)
    assert all(len(h) == 3 for h in centre.model_.neighbourhoods(Q, 3))


def test_bundles_record_their_search_version(data):
    """New fits store version 3; version 2 loads as version 2; arrays without a version (bundles from
    before) search as version 1, with scikit-learn on CSR as they were calibrated; the searches agree up
    to ties and rounding."""
    X, Y, Q = data
    centre, nle = KNNCentre().fit(X, Y), NearestNeighbourEllipsoid().fit(X, Y)
    for est in (centre, nle):
        params, arrays = est.to_arrays()
        assert int(arrays["sparse_search"]) == SEARCH_VERSION == 3
        arrays["sparse_search"] = np.array(2)
        v2 = type(est).from_arrays(params, arrays)
        assert v2.sparse_search_ == 2 and (v2.model_ if est is centre else v2._index).version == 2
        arrays.pop("sparse_search")
        legacy = type(est).from_arrays(params, arrays)
        assert legacy.sparse_search_ == 1 and legacy.to_arrays()[1]["sparse_search"] == 1
    legacy_centre = KNNCentre.from_arrays(centre.get_params(), {"X": X, "Y": Y, "sparse_offset": X.min(axis=0)})
    assert not isinstance(legacy_centre.model_, FingerprintIndex)
    np.testing.assert_allclose(legacy_centre.predict(Q), centre.predict(Q), rtol=0, atol=1e-9)


def test_a_forked_child_searches_with_its_own_threads(data):
    """After the parent's pool has run, a forked child (which has none of its threads) still searches,
    with the parent's answer, instead of waiting forever on the parent's pool."""
    import os
    import time

    X, _, Q = data
    index = FingerprintIndex(X, sparse_offset(X))
    want = index.kneighbors(Q, 20)  # the parent's pool now exists
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os._exit(0 if np.array_equal(index.kneighbors(Q, 20), want) else 1)
    deadline = time.monotonic() + 60
    while (done := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    if done[0] == 0:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        pytest.fail("the forked child's search did not finish in 60 s")
    assert os.waitstatus_to_exitcode(done[1]) == 0


def test_a_fingerprint_bundle_searches_once_per_request_before_and_after_saving(tmp_path, monkeypatch):
    """A bundle trained with the kNN centre and NLE on sparse fingerprints: its centre and NLE hold one
    index (also once loaded from disk), and a /predict-region-sized call computes each query's distances
    once; the loaded bundle answers as the trained one."""
    from models.bundle import load_bundle, save_bundle
    from training.data.datasets import Dataset
    from training.pipeline import TrainConfig, train

    X, Y = fingerprints(800, 80, seed=8)
    ds = Dataset(name="fingerprints", X=X, Y=Y, feature_names=[f"ap{i}" for i in range(80)],
                 target_names=["x", "y"], sha256="0" * 64)
    model = train(ds, TrainConfig(seed=0, methods=("ge", "nle"), centre="knn", use_groups=False)).model
    save_bundle(model, tmp_path / "bundle")
    loaded = load_bundle(tmp_path / "bundle")
    Q, _ = fingerprints(150, 80, seed=9)
    computed = []
    real = FingerprintIndex._distances
    monkeypatch.setattr(FingerprintIndex, "_distances", lambda self, q: computed.append(len(q)) or real(self, q))
    for m in (model, loaded):
        assert m.centre.sparse_search_ == SEARCH_VERSION and m.centre.model_ is m.methods["nle"].shape_._index
        computed.clear()
        answer = m.predict_region(Q, method="nle")
        assert sum(computed) == len(Q)
    computed.clear()
    loaded.assess(Q, Y[:150], method="nle")
    assert sum(computed) == len(Q)
    np.testing.assert_array_equal(answer.regions.shapes, model.predict_region(Q, method="nle").regions.shapes)


# ---------------------------------------------------------------------------------------------- dense rows
def dense_rows(m: int, d: int, seed: int):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(m, d)), rng.normal(size=(m, 2)) * 5


@pytest.mark.parametrize("k", [1, 3, 16, 17, 70, 599, 600, 700])
def test_dense_index_finds_scikit_learns_neighbours(k):
    """On continuous rows (no ties) the numpy search returns the neighbours scikit-learn's exact search
    returns, for every k (argmin, the sampled cut, all rows), one row at a time or in chunks."""
    from sklearn.neighbors import NearestNeighbors

    X, _ = dense_rows(600, 16, seed=11)
    Q, _ = dense_rows(150, 16, seed=12)
    index = DenseIndex(X)
    idx = index.kneighbors(Q, k)
    if k >= len(X):
        np.testing.assert_array_equal(idx, np.tile(np.arange(len(X)), (len(Q), 1)))
        return
    want = NearestNeighbors(n_neighbors=k, algorithm="brute").fit(X).kneighbors(Q, return_distance=False)
    np.testing.assert_array_equal(np.sort(idx, axis=1), np.sort(want, axis=1))
    alone = np.vstack([index.kneighbors(Q[i:i + 1], k) for i in range(0, 150, 13)])
    np.testing.assert_array_equal(alone, idx[::13])


def test_dense_index_takes_tied_rows_by_row_index_and_neighbourhoods_include_them():
    """Repeated reference rows tie exactly: kneighbors takes the lowest-indexed (the first k of a stable
    sort of the exact distances), neighbourhoods every tied row, whatever the rows' order."""
    X, Y = dense_rows(300, 6, seed=13)
    X[100:140] = X[5]  # 41 copies of one row
    Q = np.vstack([X[5] + 1e-3, dense_rows(20, 6, seed=14)[0]])
    exact = ((Q[:, None, :] - X[None]) ** 2).sum(axis=2)
    for k in (3, 20, 30):
        want = np.argsort(exact, axis=1, kind="stable")[:, :k]
        np.testing.assert_array_equal(np.sort(DenseIndex(X).kneighbors(Q, k), axis=1), np.sort(want, axis=1))
    near = DenseIndex(X).neighbourhoods(Q, 3)
    np.testing.assert_array_equal(near[0], np.r_[5, 100:140])
    assert all(len(h) == 3 for h in near[1:])
    centre = KNNCentre().fit(X, Y)
    np.testing.assert_allclose(centre.predict(Q[:1]), Y[np.r_[5, 100:140]].mean(axis=0)[None], rtol=0, atol=1e-12)
    order = np.random.default_rng(1).permutation(len(X))
    np.testing.assert_allclose(KNNCentre().fit(X[order], Y[order]).predict(Q), centre.predict(Q), rtol=0,
                               atol=1e-12)


def test_dense_knn_centre_equals_scikit_learn_and_round_trips():
    """A dense fit searches with numpy (search version 3, stored as ``dense_search``) and answers as
    ``KNeighborsRegressor`` does on rows without ties; the stored arrays load to the same answers;
    arrays without ``dense_search`` (bundles from before) keep scikit-learn's search, as calibrated."""
    from sklearn.neighbors import KNeighborsRegressor

    X, Y = dense_rows(800, 16, seed=15)
    Q, _ = dense_rows(300, 16, seed=16)
    centre = KNNCentre().fit(X, Y)
    assert isinstance(centre.model_, DenseIndex) and centre.sparse_offset_ is None
    for weights in ("distance", "uniform"):
        want = KNeighborsRegressor(n_neighbors=3, weights=weights).fit(X, Y).predict(Q)
        np.testing.assert_allclose(KNNCentre(weights=weights).fit(X, Y).predict(Q), want, rtol=0, atol=1e-9)
    params, arrays = centre.to_arrays()
    assert int(arrays["dense_search"]) == SEARCH_VERSION and "sparse_offset" not in arrays
    again = KNNCentre.from_arrays(params, arrays)
    assert again.model_ is centre.model_  # one index for the same rows
    np.testing.assert_array_equal(again.predict(Q), centre.predict(Q))
    arrays.pop("dense_search")
    legacy = KNNCentre.from_arrays(params, arrays)
    assert not isinstance(legacy.model_, DenseIndex) and "dense_search" not in legacy.to_arrays()[1]
    np.testing.assert_allclose(legacy.predict(Q), centre.predict(Q), rtol=0, atol=1e-9)


def test_dense_nle_equals_its_definition_and_shares_the_centres_distances(monkeypatch):
    """NLE on dense rows: the local moment over scikit-learn's k nearest rows, a row alone the same bits as
    in a batch; loaded from its arrays, the same; a kNN centre on
    the same rows shares the index, so a request computes its distances once while they fit in
    ``DenseIndex.share_bytes``, and twice beyond."""
    from sklearn.neighbors import NearestNeighbors

    X, R = dense_rows(1000, 16, seed=17)
    Q, _ = dense_rows(400, 16, seed=18)
    nle = NearestNeighbourEllipsoid().fit(X, R)  # k = 50
    assert isinstance(nle._index, DenseIndex)
    idx = NearestNeighbors(n_neighbors=50, algorithm="brute").fit(X).kneighbors(Q, return_distance=False)
    local = np.einsum("nki,nkj->nij", R[idx], R[idx]) / 50
    want = 0.95 * local + 0.05 * nle.global_shape_
    whole = nle.predict_shape(Q)
    np.testing.assert_allclose(whole, want, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(np.vstack([nle.predict_shape(Q[i:i + 1]) for i in range(10)]), whole[:10])
    again = NearestNeighbourEllipsoid.from_arrays(*nle.to_arrays())
    assert again.sparse_search_ == SEARCH_VERSION
    np.testing.assert_array_equal(again.predict_shape(Q), nle.predict_shape(Q))
    centre = KNNCentre().fit(X, R)
    assert centre.model_ is nle._index
    computed = []
    real = DenseIndex._distances
    monkeypatch.setattr(DenseIndex, "_distances", lambda self, q: computed.append(len(q)) or real(self, q))
    small = DenseIndex.share_bytes // (8 * len(X))  # the most query rows whose distances are kept
    assert 10 < small < len(Q)
    for rows, searched in ((Q[:small], small), (Q[:small + 1], 2 * (small + 1))):
        computed.clear()
        with shared_distances():
            centre.predict(rows), nle.predict_shape(rows)
        assert sum(computed) == searched


def test_a_search_outside_a_scope_keeps_no_chunk_of_distances_beyond_its_own():
    """Searching N queries against m rows holds a few chunks' distances at a time, never the (N, m) whole:
    at training scale (20,000 x 16,000 float32) the whole is 1.3 GB."""
    import tracemalloc

    X, _ = fingerprints(3000, 300, seed=4)
    index = FingerprintIndex(X, sparse_offset(X))
    whole = index.itemsize * X.shape[0] * index.n_rows
    tracemalloc.start()
    try:
        index.neighbourhoods(X, 3)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert whole > 30e6 and peak < whole / 4


@pytest.mark.parametrize("k", [1, 2, 3, 8, 9, 40])
def test_kth_smallest_equals_the_partition_with_repeats_and_leaves_the_distances_as_they_were(k, monkeypatch):
    """The k-th smallest of each row, repeats counted, by argmin passes (k <= 8, 16 rows or more, or rows longer
    than WHOLE_COLUMNS) or the partition; a row whose smallest values repeat, or whose tail is infinite, gets the
    partition's value; D is restored."""
    rng = np.random.default_rng(k)
    D = rng.integers(0, 6, size=(50, 60)).astype(np.float64)  # many repeats
    D[3, :] = np.inf
    D[4, k // 2:] = np.inf  # fewer finite values than k on some rows
    before = D.copy()
    np.testing.assert_array_equal(kth_smallest(D, k), np.partition(before, k - 1, axis=1)[:, k - 1:k])
    np.testing.assert_array_equal(D, before)
    np.testing.assert_array_equal(kth_smallest(D[:3], k), np.partition(before[:3], k - 1, axis=1)[:, k - 1:k])
    monkeypatch.setattr(search, "WHOLE_COLUMNS", 10)  # a few long rows: the argmin passes
    for rows in (D[3:5], D[:1]):
        np.testing.assert_array_equal(kth_smallest(rows, k), np.partition(rows.copy(), k - 1, axis=1)[:, k - 1:k])
    np.testing.assert_array_equal(D, before)


# ---------------------------------------------------------------------------------- a few queries: heard columns
def exact_search(index, Q, k):
    """The chunked version-3 search (one sparse product per chunk of queries), whatever the batch size."""
    return ExactIndex.kneighbors(index, Q, k), ExactIndex.neighbourhoods(index, Q, k)


def assert_same_search(index, Q, k):
    """Each query of ``Q`` searched alone (through the columns it hears) finds the rows and ties of the
    chunked search: ``kneighbors`` the same rows in the same order (NLE sums over them), ``neighbourhoods``
    the same ascending rows."""
    want_k, want_n = exact_search(index, Q, k)
    for i in range(len(Q)):
        assert index._by_heard(Q[i:i + 1], k)
        got_k, got_n = index.kneighbors(Q[i:i + 1], k), index.neighbourhoods(Q[i:i + 1], k)
        np.testing.assert_array_equal(got_k[0], want_k[i], err_msg=f"kneighbors of query {i}")  # in its order
        np.testing.assert_array_equal(got_n[0], want_n[i], err_msg=f"neighbourhoods of query {i}")


def with_silent_rows(X, Q):
    """Reference rows and queries that hear nothing (every column at its floor), queries weaker than the
    floor somewhere, one hearing a column no reference row hears, and reference rows as queries."""
    floor = X.min(axis=0)
    X = X.copy()
    X[:30] = floor  # 30 reference rows hearing nothing: tied with one another for every query
    silent_col = np.argmin((X != floor).sum(axis=0))
    X[:, silent_col] = floor[silent_col]
    Q = np.vstack([Q, floor, floor, X[40:45], X[0]])
    Q[3, :5] = floor[:5] - 1.0  # readings below the floor: a negative offset
    Q[4, silent_col] = floor[silent_col] + 2.0  # a column no reference row hears
    return X, Q


@pytest.mark.parametrize("k", [1, 3, 8, 9, 16, 17, 200])
def test_a_query_searched_through_its_heard_columns_finds_the_chunked_searchs_rows_and_ties(data, k, paths):
    """Random fingerprints with silent rows (ties at the k-th distance among 30 rows), weaker-than-floor
    readings, an unheard column and reference rows as queries (distance 0): the same neighbours and ties as
    the chunked search that calibration ran, for every k on both selection paths (argmin passes, partition)."""
    X, Q = with_silent_rows(data[0], data[2][:25])
    assert_same_search(FingerprintIndex(X, sparse_offset(X)), Q, k)


@pytest.mark.parametrize("k", [1, 3, 10])
def test_heard_columns_keep_the_ties_of_repeated_integer_fingerprints(k, paths):
    """Survey-like integer readings on few values, each fingerprint repeated: many rows tie exactly at the
    k-th distance, and kneighbors takes the lowest of them, as the chunked search does."""
    rng = np.random.default_rng(k)
    X = np.full((600, 90), -110.0)
    hit = rng.random((150, 90)) < 0.08
    base = np.where(hit, rng.integers(-90, -60, size=hit.shape) // 10 * 10, -110.0)
    X[:] = np.repeat(base, 4, axis=0)[rng.permutation(600)]
    Q = np.vstack([base[:20], X[:5], np.full((1, 90), -110.0)])
    index = FingerprintIndex(X, sparse_offset(X))
    assert_same_search(index, Q, k)
    assert any(len(n) > k for n in ExactIndex.neighbourhoods(index, Q, k))  # ties were exercised


def test_heard_columns_settle_rows_within_float32_rounding_of_the_kth_by_their_exact_distances(monkeypatch, paths):
    """Adversarial near-ties: reference rows whose float32 distances to a query differ by an ulp or two, and
    columns of very different scales (the error bound's worst case). The approximate distances cannot order
    them; the rows between the bounds get the exact arithmetic, and the answer is the chunked search's."""
    rng = np.random.default_rng(3)
    m, d = 400, 70
    X = np.zeros((m, d))
    X[:, :3] = rng.uniform(0, 1, size=(m, 3))
    X[:, 3] = rng.uniform(0, 1e3, size=m) * (rng.random(m) < 0.05)  # a loud column on a few rows
    q = np.zeros(d)
    q[:3] = 0.5
    base = X[7, :3].copy()
    for j, i in enumerate(range(100, 140)):  # 40 rows at the same distance up to float32 rounding
        X[i, :3] = base + np.float32(1e-7) * (j % 3) * np.array([1.0, -1.0, 0.0])
        X[i, 3] = 0.0
    X[7, 3] = 0.0
    index = FingerprintIndex(X, sparse_offset(X))
    calls = []
    real = FingerprintIndex._exact
    monkeypatch.setattr(FingerprintIndex, "_exact", lambda self, rows, qq: calls.append(len(rows)) or real(self, rows, qq))
    Q = np.vstack([q, X[100], X[7]])
    for k in (1, 3, 20, 41):
        assert_same_search(index, Q, k)
    assert calls and max(calls) >= 20  # the near-ties went through the exact distances


def test_heard_columns_are_used_for_few_queries_and_version_3_only(data, monkeypatch):
    """Up to HEARD_ROWS queries, k below the rows, version 3 and the dense columns within COLUMNS_BYTES;
    otherwise the chunked search, with the same answer."""
    X, _, Q = data
    index = FingerprintIndex(X, sparse_offset(X))
    assert index._by_heard(Q[:search.HEARD_ROWS], 3) and not index._by_heard(Q[:search.HEARD_ROWS + 1], 3)
    assert not index._by_heard(Q[:1], len(X)) and not index._by_heard(Q[:0], 3)
    assert not FingerprintIndex(X, sparse_offset(X), version=2)._by_heard(Q[:1], 3)
    heard = index.kneighbors(Q[:3], 5)
    monkeypatch.setattr(search, "COLUMNS_BYTES", 0)
    assert not index._by_heard(Q[:1], 3)
    np.testing.assert_array_equal(np.sort(index.kneighbors(Q[:3], 5), axis=1), np.sort(heard, axis=1))


def test_a_scope_computes_a_few_queries_approximate_distances_once(data, monkeypatch):
    """The kNN centre and NLE of one request, a few rows: one product over the heard columns per query in a
    shared_distances scope, two without."""
    X, Y, Q = data
    centre, nle = KNNCentre().fit(X, Y), NearestNeighbourEllipsoid().fit(X, Y)
    products = []
    columns = centre.model_._dense_columns()
    monkeypatch.setattr(FingerprintIndex, "_dense_columns", lambda self: products.append(1) or columns)
    few = Q[:3]
    want = centre.predict(few), nle.predict_shape(few)
    assert len(products) == 2
    products.clear()
    with shared_distances():
        got = centre.predict(few), nle.predict_shape(few)
    assert len(products) == 1
    for a, b in zip(want, got):
        np.testing.assert_array_equal(a, b)


def test_in_parts_splits_a_batch_across_the_threads_and_nests_without_waiting_on_itself(monkeypatch):
    """A row-wise function over a batch in contiguous parts on the search's threads equals it over the whole
    batch; a part that calls in_parts or map_chunks again runs there (a pool of two never waits on itself)."""
    monkeypatch.setattr(search, "SEARCH_THREADS", 2)
    monkeypatch.setattr(search, "PART_ROWS", 8)
    X = np.random.default_rng(0).normal(size=(37, 4))
    seen = []

    def rowwise(part):
        seen.append((len(part), search._inside.__dict__.get("yes", False)))
        inner = search.in_parts(lambda p: p * 2.0, part)  # nested: inline on the part's thread
        return inner + np.stack(search.map_chunks(lambda row: row.sum(), list(part)))[:, None]

    monkeypatch.setattr(search, "CHUNK_ROWS", 4)  # parts of whole chunks: 20 and 17 rows
    np.testing.assert_array_equal(search.in_parts(rowwise, X), X * 2.0 + X.sum(axis=1, keepdims=True))
    assert sorted(seen) == [(17, True), (20, True)]
    seen.clear()
    search.in_parts(rowwise, X[:15])  # fewer than two parts of PART_ROWS: the calling thread
    assert seen == [(15, False)]
