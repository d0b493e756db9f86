"""models/shapes/lmve.py: the LMVE network's fit (determinism, grid, schedule, floor, ensembles, precision,
mini-batches, the mean head) and its numpy forward pass against the torch graph it was trained as."""

from __future__ import annotations

import copy
import re

import numpy as np
import pytest
import torch

from models import geometry, LMVEShape, SplitConformalRegressor
from models.centres import ConstantCentre
from models.exceptions import InputError, NotFittedError
from tests.conftest import heteroscedastic
from tests.models.shapes import FAST_LMVE, coverage_over_random_splits


def assert_same_forward(actual, expected, est, dtype=np.float64) -> None:
    """Two evaluations of ``est``'s networks that differ only in rounding (summation order, precision): each
    matrix within ``gamma * eps * ||expected||_F``, ``eps`` of ``dtype`` and ``gamma`` the sum of the layers'
    fan-ins plus the output's, the worst-case growth of a dot product's rounding (Higham's gamma_n) layer after
    layer. A relative tolerance per entry fails on near-zero entries on a CPU whose kernels round otherwise
    (AVX-512 against AVX2); an error in the computation is many orders above this."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape
    gamma = sum(W.shape[-2] for W, _ in est.layers_) + expected.shape[-1]
    scale = np.linalg.norm(expected.reshape(len(expected), -1), axis=1)
    bound = gamma * np.finfo(dtype).eps * scale
    worst = np.abs(actual - expected).reshape(len(expected), -1).max(axis=1)
    assert (worst <= bound).all(), f"max |difference| / bound = {np.max(worst / bound):.3g} (gamma {gamma})"


def test_lmve_is_deterministic_for_a_seed_on_cpu():
    X, Y = heteroscedastic(300, seed=2)
    kw = dict(max_steps=60, eval_every=20, patience=3, device="cpu", random_state=5)
    a = LMVEShape(**kw).fit(X, Y).predict_shape(X[:20])
    b = LMVEShape(**kw).fit(X, Y).predict_shape(X[:20])
    np.testing.assert_array_equal(a, b)
    c = LMVEShape(**{**kw, "random_state": 6}).fit(X, Y).predict_shape(X[:20])
    assert not np.array_equal(a, c)


def test_lmve_shapes_are_spd_and_grid_is_reported():
    X, Y = heteroscedastic(300, seed=4)
    est = LMVEShape(max_steps=50, eval_every=25, patience=2).fit(X, Y)
    C = est.predict_shape(X)
    assert np.all(np.linalg.eigvalsh(C) >= est.eps * (1 - 1e-6))
    stages = [r["stage"] for r in est.grid_results_]
    assert stages.count("train") == 8 and stages.count("init") == 4  # 4 distinct (lr_init, dropout)
    assert {"init", "train"} <= set(est.history_)
    assert est.config_ is not None


def test_lmve_falls_back_on_an_init_network_when_the_train_phase_is_useless():
    X, Y = heteroscedastic(300, seed=4)
    # a learning rate of 10 wrecks every train-phase network; the init networks still fit NLE
    est = LMVEShape(learning_rates_train=(10.0,), max_steps=100, eval_every=25, patience=2).fit(X, Y)
    assert est.config_.lr_train is None
    chosen = min(est.grid_results_, key=lambda r: r["heldout_volume"])
    assert chosen["stage"] == "init"
    no_fallback = LMVEShape(learning_rates_train=(10.0,), max_steps=100, eval_every=25, patience=2,
                            init_candidates=False).fit(X, Y)
    assert no_fallback.config_.lr_train == 10.0


def test_lmve_chosen_grid_narrows_a_new_fit_to_the_served_configurations():
    X, Y = heteroscedastic(300, seed=4)
    kw = dict(max_steps=50, eval_every=25, patience=2, random_state=1)
    with pytest.raises(NotFittedError, match="LMVEShape is not fitted yet; call fit before it is narrowed"):
        LMVEShape().chosen_grid()
    one = LMVEShape(**kw, n_ensemble=1).fit(X, Y)
    grid = one.chosen_grid()
    c = one.config_
    assert grid["learning_rates_init"] == (c.lr_init,) and grid["dropouts"] == (c.dropout,)
    assert grid["learning_rates_train"] == ((c.lr_train,) if c.lr_train is not None else one.learning_rates_train)
    narrowed = LMVEShape(**kw, n_ensemble=1).set_params(**grid).fit(X, Y)
    assert {(r["lr_init"], r["dropout"]) for r in narrowed.grid_results_} == {(c.lr_init, c.dropout)}
    three = LMVEShape(**kw, n_ensemble=3).fit(X, Y)
    members = [r for r in three.grid_results_ if "member" in r]
    grid = three.chosen_grid()
    assert set(grid["learning_rates_init"]) == {r["lr_init"] for r in members}
    assert set(grid["dropouts"]) == {r["dropout"] for r in members}
    trained = {r["lr_train"] for r in members} - {None}
    assert set(grid["learning_rates_train"]) == (trained or set(three.learning_rates_train))
    # members that are all init-phase networks name no train rate: the train rates stay as they were
    three.grid_results_ = [{**r, "lr_train": None, "stage": "init"} for r in members]
    assert three.chosen_grid()["learning_rates_train"] == three.learning_rates_train


@pytest.mark.parametrize(("m", "expected"), [(300, 100), (1000, 200), (100, 50), (5000, 1000)])
def test_lmve_validation_rows(m, expected):
    assert LMVEShape()._n_validation(m) == expected
    assert LMVEShape(min_validation_rows=0)._n_validation(m) == round(0.2 * m)


def test_lmve_init_steps_caps_the_init_phase_alone():
    X, Y = heteroscedastic(300, seed=4)
    est = LMVEShape(max_steps=100, init_steps=30, eval_every=10, patience=None).fit(X, Y)
    assert est.history_["init"]["steps"] == 30 and est.history_["train"]["steps"] == 100
    assert all(r["best_step_init"] <= 30 for r in est.grid_results_)


def test_lmve_retire_trains_and_reports_per_configuration_stops():
    X, Y = heteroscedastic(300, seed=4)
    est = LMVEShape(max_steps=200, eval_every=10, patience=2, retire=True).fit(X, Y)
    steps = [r["best_step_train"] for r in est.grid_results_ if r["stage"] == "train"]
    assert all(0 <= s <= est.history_["train"]["steps"] for s in steps)
    C = est.predict_shape(X[:10])
    assert np.all(np.isfinite(C))


def test_lmve_clips_queries_onto_the_training_box():
    X, Y = heteroscedastic(300, seed=4)
    est = LMVEShape(max_steps=50, eval_every=25, patience=2).fit(X, Y)
    far = X[:5] + 50.0  # far outside the training range on every feature
    np.testing.assert_allclose(est.predict_shape(far), est.predict_shape(np.clip(far, X.min(0), X.max(0))))
    np.testing.assert_array_equal(est.input_high_, X.max(0))
    inside = est.predict_shape(X[:20])
    raw = LMVEShape(max_steps=50, eval_every=25, patience=2, clip_inputs=False).fit(X, Y)
    np.testing.assert_allclose(raw.predict_shape(X[:20]), inside)  # nothing changes inside the box
    assert not np.allclose(raw.predict_shape(far), est.predict_shape(far))


def test_lmve_stop_on_volume_runs_and_bad_values_are_named():
    X, Y = heteroscedastic(300, seed=4)
    est = LMVEShape(max_steps=50, eval_every=25, patience=2, stop_on="volume").fit(X, Y)
    assert np.all(np.isfinite(est.predict_shape(X[:5])))
    with pytest.raises(InputError, match="stop_on must be 'loss' or 'volume'; got 'bogus'"):
        LMVEShape(stop_on="bogus").fit(X, Y)


@pytest.mark.parametrize(("param", "value", "message"), [
    ("batch_size", 0, "batch_size must be None (automatic) or a positive integer; got 0"),
    ("batch_size", 12.5, "batch_size must be None (automatic) or a positive integer; got 12.5"),
    ("max_steps", -3, "max_steps must be a positive integer; got -3"),
    ("init_steps", 0, "init_steps must be a positive integer or None; got 0"),
])
def test_lmve_bad_schedule_values_are_named_before_any_training(param, value, message):
    X, Y = heteroscedastic(300, seed=4)
    with pytest.raises(InputError, match=re.escape(message)):
        LMVEShape(**{param: value}).fit(X, Y)


def test_lmve_mini_batches_run_and_stay_deterministic():
    X, Y = heteroscedastic(300, seed=4)
    a, b = (LMVEShape(max_steps=50, eval_every=25, patience=2, batch_size=64).fit(X, Y) for _ in range(2))
    assert a.history_["train"]["steps"] >= 25
    np.testing.assert_array_equal(a.predict_shape(X[:20]), b.predict_shape(X[:20]))


def test_lmve_floor_keeps_a_share_of_the_ge_shape():
    from models.shapes.base import second_moment

    X, Y = heteroscedastic(300, seed=4)
    w = 0.2
    est = LMVEShape(max_steps=50, eval_every=25, patience=2, floor_weight=w, random_state=1).fit(X, Y)
    rng = np.random.default_rng(0)
    queries = np.vstack([X[:50], rng.normal(scale=5.0, size=(50, X.shape[1]))])
    C = est.predict_shape(queries)
    # the shapes are built from the fit rows only; their second moment is within a few % of all rows'
    G = est.floor_shape_
    ref = second_moment(Y)
    np.testing.assert_allclose(G, ref, rtol=0.2, atol=0.2 * np.abs(ref).max())
    assert np.linalg.eigvalsh(C - w * G).min() >= -1e-9  # C >= w G: every score <= M_G / w
    R = rng.normal(size=(100, 2)) * 3
    M = geometry.mahalanobis(R, C)
    assert np.all(M <= geometry.mahalanobis(R, G) / w * (1 + 1e-9))
    with pytest.raises(InputError, match=r"floor_weight must lie in \[0, 1\); got 1.5"):
        LMVEShape(floor_weight=1.5).fit(X, Y)


def test_lmve_constant_columns_are_not_inputs_and_get_zero_weights():
    X, Y = heteroscedastic(300, seed=4)
    Xc = np.column_stack([X[:, :1], np.full(len(X), 2.5), X[:, 1:]])  # column 1 is constant
    kw = dict(max_steps=50, eval_every=25, patience=2, random_state=3)
    est = LMVEShape(**kw).fit(Xc, Y)
    assert est.n_input_columns_ == X.shape[1]
    W0 = est.layers_[0][0]  # (members, columns, width)
    assert W0.shape == (est.n_members_, X.shape[1] + 1, 4 * X.shape[1]) and np.all(W0[:, 1] == 0.0)
    # the shape ignores whatever the constant column holds at query time
    moved = Xc[:20].copy()
    moved[:, 1] = -40.0
    np.testing.assert_array_equal(est.predict_shape(Xc[:20]), est.predict_shape(moved))
    # and equals the fit without that column (same seed, same network)
    np.testing.assert_allclose(est.predict_shape(Xc[:20]), LMVEShape(**kw).fit(X, Y).predict_shape(X[:20]),
                               rtol=1e-6, atol=1e-9)
    kept = LMVEShape(**kw, drop_constant=False).fit(Xc, Y)
    assert kept.n_input_columns_ == X.shape[1] + 1 and kept.layers_[0][0].shape[2] == 4 * (X.shape[1] + 1)


@pytest.mark.parametrize("output", ["gram", "cholesky"])
def test_lmve_numpy_forward_equals_the_torch_graph_it_was_trained_as(output):
    from models.shapes._lmve_torch import factor_product

    X, Y = heteroscedastic(300, seed=5)
    est = LMVEShape(max_steps=50, eval_every=25, patience=2, output=output, floor_weight=0.2).fit(X, Y)
    assert est.n_members_ == 3
    Q = X[:40] * 1.5  # some rows outside the training box: clipped first
    n, w, s = Y.shape[1], est.floor_weight_, est.target_scale_
    F = 0.0
    for k in range(est.n_members_):  # each member through torch, then their mean
        h = torch.as_tensor(np.clip(Q, est.input_low_, est.input_high_), dtype=torch.float64)
        for i, (W, b) in enumerate(est.layers_):
            h = torch.nn.functional.linear(h, torch.as_tensor(W[k].T), torch.as_tensor(b[k]))
            h = torch.relu(h) if i < len(est.layers_) - 1 else h
        F = F + factor_product(h.reshape(-1, n, n), output).numpy() / est.n_members_
    expected = (1 - w) * (s**2 * F + est.eps * np.eye(n)) + w * est.floor_shape_
    assert_same_forward(est.predict_shape(Q), expected, est)


def test_lmve_serves_the_mean_shape_of_its_best_held_out_candidates():
    X, Y = heteroscedastic(300, seed=6)
    kw = dict(max_steps=50, eval_every=25, patience=2, random_state=1)
    est = LMVEShape(**kw, n_ensemble=4).fit(X, Y)
    ranked = sorted(est.grid_results_, key=lambda r: r["heldout_volume"])
    assert [r.get("member") for r in ranked[:5]] == [0, 1, 2, 3, None]
    assert est.config_.lr_init == ranked[0]["lr_init"] and est.config_.dropout == ranked[0]["dropout"]
    # the mean of the members' shapes: each member alone is the same fit cut to that network
    single = copy.deepcopy(est)
    parts = []
    for k in range(4):
        single.layers_ = [(W[k:k + 1], b[k:k + 1]) for W, b in est.layers_]
        single._fold()
        parts.append(single.predict_shape(X[:30]))
    assert_same_forward(est.predict_shape(X[:30]), np.mean(parts, axis=0), est)
    # n_ensemble=1 is the paper's single network: the first member
    one = LMVEShape(**kw, n_ensemble=1).fit(X, Y)
    assert one.n_members_ == 1
    assert_same_forward(one.predict_shape(X[:30]), parts[0], one)
    # more members than candidates: every finite candidate
    assert LMVEShape(**kw, n_ensemble=50).fit(X, Y).n_members_ == len(est.grid_results_)
    with pytest.raises(InputError, match="n_ensemble must be 'auto' or a positive integer; got 0"):
        LMVEShape(n_ensemble=0).fit(X, Y)


def test_lmve_auto_ensemble_is_three_networks_on_small_fits_and_one_on_large(monkeypatch):
    from models.shapes import _lmve_torch

    X, Y = heteroscedastic(300, seed=8)
    kw = dict(max_steps=25, eval_every=25, patience=1)
    assert LMVEShape(**kw).fit(X, Y).n_members_ == 3
    monkeypatch.setattr(_lmve_torch, "FULL_BATCH_ROWS", 150)  # 200 fit rows are now a large fit
    large = LMVEShape(**kw).fit(X, Y)
    assert large.n_members_ == 1 and [r.get("member") for r in large.grid_results_].count(0) == 1


def test_lmve_a_full_batch_step_too_costly_makes_a_large_fit_whatever_the_rows(monkeypatch):
    """Large when fit rows x the network's weights exceed FULL_BATCH_MACS (a fingerprint survey's unit
    fold of a few thousand rows): mini-batches, halving and one member, as above FULL_BATCH_ROWS."""
    from models.shapes import _lmve_torch

    X, Y = heteroscedastic(300, seed=8)
    small = _lmve_torch.LMVEFit(LMVEShape(), X, Y, 0.9)
    w = small.widths  # [d, 4d, d, 4]: rows x weights written out
    cost = len(small.X_fit) * (w[0] * w[1] + w[1] * w[2] + w[2] * w[3])
    assert not small.large and small.schedule.batch_size == 300 and cost <= _lmve_torch.FULL_BATCH_MACS
    monkeypatch.setattr(_lmve_torch, "FULL_BATCH_MACS", cost)
    assert not _lmve_torch.LMVEFit(LMVEShape(), X, Y, 0.9).large  # at the bound: still full batch
    monkeypatch.setattr(_lmve_torch, "FULL_BATCH_MACS", cost - 1)
    job = _lmve_torch.LMVEFit(LMVEShape(), X, Y, 0.9)
    assert job.large and job.schedule.batch_size == _lmve_torch.MINIBATCH_ROWS and job.schedule.retire
    assert LMVEShape(max_steps=25, eval_every=25, patience=1).fit(X, Y).n_members_ == 1


def test_lmve_reads_a_single_network_bundle_written_before_ensembles():
    X, Y = heteroscedastic(300, seed=7)
    est = LMVEShape(max_steps=50, eval_every=25, patience=2, n_ensemble=1).fit(X, Y)
    params, arrays = est.to_arrays()
    old = {k: (v[0] if k.startswith(("W_", "b_")) else v) for k, v in arrays.items()}  # (in, out), (out,)
    assert old["W_0"].ndim == 2 and old["b_0"].ndim == 1
    back = LMVEShape.from_arrays(params, old)
    assert back.n_members_ == 1
    np.testing.assert_array_equal(back.predict_shape(X[:20]), est.predict_shape(X[:20]))


def test_lmve_sparse_inputs_take_the_sparse_first_layer_and_answer_as_the_dense_product():
    rng = np.random.default_rng(0)
    m, d = 400, 80  # fingerprints: most columns at the floor (nothing detected), a few heard per row
    X = np.full((m, d), -110.0)
    heard = rng.random((m, d)) < 0.05
    X[heard] = rng.uniform(-95, -40, heard.sum())
    X[0] = -30.0  # every column reaches above the floor somewhere
    Y = rng.normal(size=(m, 2)) * (1 + heard[:, :2])
    est = LMVEShape(max_steps=50, eval_every=25, patience=2).fit(X, Y)
    assert est._floor_out is not None
    dense = copy.deepcopy(est)
    dense._floor_out = None  # the same network through the plain BLAS product
    Q = X[1:60]
    assert_same_forward(est.predict_shape(Q), dense.predict_shape(Q), est)
    assert_same_forward(est.predict_shape(Q[:1]), dense.predict_shape(Q[:1]), est)
    loud = np.full((3, d), -50.0)  # dense rows: the plain product, same answer
    assert_same_forward(est.predict_shape(loud), dense.predict_shape(loud), est)
    # few columns (below SPARSE_MIN_COLUMNS) never take it
    assert LMVEShape(max_steps=50, eval_every=25, patience=2).fit(X[:, :8], Y)._floor_out is None


def _fingerprints(m=400, d=80, seed=0):
    rng = np.random.default_rng(seed)
    X = np.full((m, d), -110.0)  # most columns at the floor (nothing detected), a few heard per row
    heard = rng.random((m, d)) < 0.05
    X[heard] = rng.uniform(-95, -40, heard.sum())
    X[0] = -30.0
    return X, rng.normal(size=(m, 2)) * (1 + heard[:, :2])


def test_lmve_float32_forward_is_the_float64_networks_to_float32_rounding():
    X, Y = _fingerprints()
    kw = dict(max_steps=50, eval_every=25, patience=2)
    est = LMVEShape(**kw, forward_precision="float32").fit(X, Y)
    assert est.forward_precision_ == "float32" and est._floor_out is not None
    assert all(W.dtype == np.float32 and b.dtype == np.float32 for W, b in est.layers_)
    wide = copy.deepcopy(est)  # the same weights (trained in float32: exact in float64) through float64
    wide.layers_ = [(W.astype(np.float64), b.astype(np.float64)) for W, b in est.layers_]
    wide._fold()
    Q = np.vstack([X[1:60], np.full((3, X.shape[1]), -50.0)])  # sparse rows, and dense ones
    C = est.predict_shape(Q)
    assert C.dtype == np.float64
    assert_same_forward(C, wide.predict_shape(Q), est, np.float32)
    assert_same_forward(est.predict_shape(Q[:1]), C[:1], est, np.float32)  # one row: the gathered product
    dense = copy.deepcopy(est)
    dense._floor_out = None
    assert_same_forward(dense.predict_shape(Q), C, est, np.float32)
    # the bundle keeps the precision and the weights: the same shapes to the bit
    params, arrays = est.to_arrays()
    assert params["forward_precision"] == "float32" and arrays["W_1"].dtype == np.float32
    back = LMVEShape.from_arrays(params, arrays)
    assert back.forward_precision_ == "float32"
    np.testing.assert_array_equal(back.predict_shape(Q), C)


def test_lmve_forward_precision_auto_follows_the_networks_size(monkeypatch):
    from models.shapes import lmve

    X, Y = heteroscedastic(300, seed=2)
    kw = dict(max_steps=25, eval_every=25, patience=1, n_ensemble=1)
    small = LMVEShape(**kw).fit(X, Y)
    weights = sum(W[0].size + b[0].size for W, b in small.layers_)
    assert small.forward_precision_ == "float64" and weights <= lmve.FLOAT32_WEIGHTS
    monkeypatch.setattr(lmve, "FLOAT32_WEIGHTS", weights - 1)
    assert LMVEShape(**kw).fit(X, Y).forward_precision_ == "float32"
    assert LMVEShape(**kw, forward_precision="float64").fit(X, Y).forward_precision_ == "float64"
    with pytest.raises(InputError, match="forward_precision must be 'auto', 'float64' or 'float32'"):
        LMVEShape(forward_precision="float16").fit(X, Y)


def test_lmve_bundles_from_before_the_forward_precision_are_float64_and_a_wrong_one_is_refused():
    from models.exceptions import BundleError

    X, Y = heteroscedastic(300, seed=3)
    est = LMVEShape(max_steps=25, eval_every=25, patience=1, forward_precision="float32").fit(X, Y)
    params, arrays = est.to_arrays()
    old = {k: v for k, v in params.items() if k != "forward_precision"}
    back = LMVEShape.from_arrays(old, arrays)
    assert back.forward_precision_ == "float64" and back.layers_[1][0].dtype == np.float64
    with pytest.raises(BundleError, match="forward_precision 'float16' is not float64 or float32"):
        LMVEShape.from_arrays({**params, "forward_precision": "float16"}, arrays)


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["float64", "float32"])
def test_lmve_batches_go_through_the_network_in_slices_on_the_search_threads(precision, monkeypatch):
    from models.centres import search
    from models.shapes import lmve

    X, Y = _fingerprints(m=500, seed=2)
    est = LMVEShape(max_steps=25, eval_every=25, patience=1, forward_precision=precision).fit(X, Y)
    Q = np.vstack([X, X[:37]])  # 537 rows: slices of 269 and 268
    sliced = []

    def spy(fn, items):
        sliced.append([len(i) for i in items])
        return [fn(i) for i in items]

    try:
        search.set_search_threads(1)
        alone = est.predict_shape(Q)
        rows = np.vstack([est.predict_shape(Q[i:i + 1]) for i in range(0, len(Q), 50)])
        search.set_search_threads(2)
        monkeypatch.setattr(search, "map_chunks", spy)
        C = est.predict_shape(Q)
        assert sliced == [[269, 268]]
        est.predict_shape(Q[:lmve.THREAD_ROWS - 1])  # a small batch: on the caller's thread
        assert sliced == [[269, 268]]
        monkeypatch.undo()
        np.testing.assert_array_equal(est.predict_shape(Q), C)  # the pool itself: the same numbers
    finally:
        search.set_search_threads(search.default_search_threads())
    dtype = np.float64 if precision == "float64" else np.float32
    assert_same_forward(C, alone, est, dtype)
    assert_same_forward(C[::50], rows, est, dtype)


def test_a_float32_lmve_is_calibrated_on_the_scores_it_serves():
    """The calibration's scores are the served pass's: recomputed at prediction, they are the same numbers."""
    from models.predictor import SplitConformalRegressor

    X, Y = _fingerprints(seed=1)
    reg = SplitConformalRegressor(LMVEShape(max_steps=25, eval_every=25, patience=1, forward_precision="float32"),
                                  ConstantCentre(), coverage=0.9)
    reg.fit(X[:300], Y[:300]).conformalize(X[300:], Y[300:])
    assert reg.shape_.forward_precision_ == "float32"
    np.testing.assert_array_equal(np.sort(reg.conformity_scores(X[300:], Y[300:])), reg.calibrator_.scores_)


def test_lmve_auto_settings_switch_only_above_the_full_batch_size():
    from models.nn.lockstep import cpu_has_native_bf16
    from models.shapes._lmve_torch import FULL_BATCH_ROWS

    X, Y = heteroscedastic(300, seed=4)
    kw = dict(max_steps=60, eval_every=20, patience=2, random_state=1)
    auto = LMVEShape(**kw).fit(X, Y)
    explicit = LMVEShape(**kw, precision="float32", halve_every=None, retire=False).fit(X, Y)
    np.testing.assert_array_equal(auto.predict_shape(X[:20]), explicit.predict_shape(X[:20]))
    assert auto.history_["train"]["precision"] == "float32"
    assert auto.history_["train"]["network_steps"] == [auto.history_["train"]["steps"]] * 8

    m = int(FULL_BATCH_ROWS / 0.8) + 200  # more fit rows than FULL_BATCH_ROWS after the held-out slice
    Xl, Yl = heteroscedastic(m, seed=5)
    large = LMVEShape(max_steps=200, eval_every=20, patience=50, random_state=1).fit(Xl, Yl)
    h = large.history_["train"]
    assert h["precision"] == ("bfloat16" if cpu_has_native_bf16() else "float32")
    # successive halving every 4 evaluations (80 steps): init 4 -> 2 networks at step 80, 2 -> 1 at 160;
    # the survivor's two train configurations (its dropout, both train rates): 2 -> 1 at step 80
    assert sorted(large.history_["init"]["network_steps"]) == [80, 80, 160, 200]
    assert h["networks"] == 2 and sorted(h["network_steps"]) == [80, 200]
    assert len({(r["lr_init"], r["dropout"]) for r in large.grid_results_ if r["stage"] == "train"}) == 1
    assert np.all(np.isfinite(large.predict_shape(Xl[:50])))


@pytest.fixture(scope="module")
def mean_head_fit():
    """A centre that misses the mean entirely (the training mean), LMVE with and without a mean head."""
    rng = np.random.default_rng(3)
    m = 3000
    X = rng.normal(size=(m, 3))
    mean = np.stack([np.sin(2 * X[:, 0]), X[:, 1] ** 2 - 1], axis=1)
    Y = mean + rng.normal(size=(m, 2)) * (0.15 + 0.2 * np.abs(X[:, 2:3]))
    tr, pool = np.arange(1400), np.arange(1400, m)
    fitted = {head: SplitConformalRegressor(LMVEShape(mean_head=head, random_state=0, device="cpu", **FAST_LMVE),
                                            centre=ConstantCentre(), coverage=0.9).fit(X[tr], Y[tr])
              for head in (False, True)}
    return fitted, X, Y, mean, pool


@pytest.mark.slow
def test_lmve_mean_head_learns_the_mean_the_centre_misses(mean_head_fit):
    """The head's regions are centred much nearer the true mean and are much smaller, at the level."""
    fitted, X, Y, mean, pool = mean_head_fit
    ca, te = pool[:600], pool[600:]
    out = {}
    for head, reg in fitted.items():
        region = reg.conformalize(X[ca], Y[ca]).predict_region(X[te])
        rmse = float(np.sqrt(np.mean(np.sum((region.centers - mean[te]) ** 2, axis=1))))
        out[head] = (rmse, region.volume().mean(), region.contains(Y[te]).mean())
    (rmse0, vol0, cov0), (rmse1, vol1, cov1) = out[False], out[True]
    assert not fitted[False].shape_.moves_centre and fitted[True].shape_.moves_centre
    assert rmse1 < 0.5 * rmse0, out
    assert vol1 < 0.6 * vol0, out
    assert abs(cov1 - 0.9) < 0.03 and abs(cov0 - 0.9) < 0.03, out


def test_lmve_mean_head_keeps_conformal_validity(mean_head_fit):
    """Mean coverage over 200 random calibration/test splits lies in [eta - tol, eta + 1/(m_c+1) + tol],
    and a region holds a point exactly when its score is within the threshold (scores and regions
    share the corrected centre)."""
    fitted, X, Y, _, pool = mean_head_fit
    reg = fitted[True]

    def scores_agree(region, te):
        np.testing.assert_array_equal(region.contains(Y[te]), reg.conformity_scores(X[te], Y[te]) <= reg.alpha_q_)

    mean = coverage_over_random_splits(reg, X, Y, pool, seed=5, check=scores_agree)
    assert 0.9 - 0.01 <= mean <= 0.9 + 1 / 401 + 0.01, mean


def test_lmve_mean_head_starts_at_the_fitted_centre():
    """With a train phase of zero useful steps (init candidates only) the correction is exactly zero:
    the head's output weights start at zero and the init phase does not move them."""
    X, Y = heteroscedastic(400, seed=8)
    est = LMVEShape(mean_head=True, learning_rates_train=(1e-12,), max_steps=50, eval_every=25, patience=1,
                    device="cpu").fit(X, Y)
    assert est.moves_centre
    C, delta = est.predict_parts(X[:50])
    np.testing.assert_allclose(delta, 0.0, atol=1e-6)
    np.testing.assert_array_equal(C, est.predict_shape(X[:50]))
    with pytest.raises(InputError, match="mean_head must be True or False"):
        LMVEShape(mean_head="yes").fit(X, Y)


def test_lmve_held_out_slice_passes_over_groups_that_would_swallow_it():
    """Whole groups until ``n_val`` rows, never one that takes the slice past ``2 n_val`` (a survey's two big
    phones), never every group; when every group is too large, the smallest alone."""
    from models.shapes._lmve_torch import held_out_rows

    sizes = [4800, 4500, 1600, 1400, 1100, 980, 900, 840, 720, 610, 500, 500, 440, 440, 370, 190]
    groups = np.repeat(np.arange(len(sizes)), sizes)
    m = len(groups)
    for seed in range(20):
        held, fit = held_out_rows(m, 2000, seed, groups)
        assert 2000 <= len(held) <= 4000 and len(held) + len(fit) == m
        assert not set(groups[held]) & set(groups[fit])  # whole groups
    equal = np.repeat(np.arange(50), 5)  # a position survey: the slice as before, the first groups reaching n_val
    held, _ = held_out_rows(250, 50, 3, equal)
    assert len(held) == 50
    held, fit = held_out_rows(300, 30, 0, np.repeat([0, 1, 2], 100))
    assert len(held) == 100 and len(np.unique(np.repeat([0, 1, 2], 100)[fit])) == 2
