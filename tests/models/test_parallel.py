"""models/parallel.py: compiled libraries on the idle cores, small fits side by side."""

import threading

import numpy as np
import pytest
from threadpoolctl import threadpool_info

from models.nn.threads import ENV, available_cores
from models.parallel import on_idle_cores, side_by_side

needs_two = pytest.mark.skipif(available_cores() < 2, reason="one core: nothing to limit")


def blas_threads() -> set[int]:
    return {p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"}


@needs_two
def test_on_idle_cores_limits_the_blas_pools_to_the_idle_cores_and_restores_them(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    before = blas_threads()
    assert before and max(before) >= 2  # numpy's BLAS starts on every core
    with on_idle_cores(1):
        assert blas_threads() == {1}
        a = np.random.default_rng(0).normal(size=(300, 300))
        np.testing.assert_allclose(a @ a.T, (a @ a.T).T)  # still computes
    assert blas_threads() == before
    with on_idle_cores(available_cores()):  # every core idle: nothing changes
        assert blas_threads() == before


@needs_two
def test_on_idle_cores_limits_torch_mkl_included_and_restores_it(monkeypatch):
    import torch

    from tests.models.nn.test_threads import mkl_threads

    monkeypatch.delenv(ENV, raising=False)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with on_idle_cores(1):
            assert torch.get_num_threads() == 1
            assert mkl_threads() in (None, 1)  # MKL's count, not only OpenMP's
        assert torch.get_num_threads() == 2 and mkl_threads() in (None, 2)
    finally:
        torch.set_num_threads(before)


@needs_two
def test_on_idle_cores_leaves_threads_the_user_fixed(monkeypatch):
    monkeypatch.setenv(ENV, "2")
    before = blas_threads()
    with on_idle_cores(1):
        assert blas_threads() == before


@needs_two
def test_one_worker_runs_in_order_on_the_callers_thread_within_the_idle_cores(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    seen = side_by_side(lambda i: (i, threading.current_thread().name, blas_threads()), range(3), workers=1)
    assert [s[0] for s in seen] == [0, 1, 2]
    assert {s[1] for s in seen} == {threading.main_thread().name}
    two = side_by_side(lambda i: (threading.current_thread().name, blas_threads()), range(4), workers=2)
    assert threading.main_thread().name not in {t for t, _ in two}
    assert all(b == {1} for _, b in two)  # side by side: one BLAS thread each
