"""torch's threads per fit: one on small steps, the idle cores on large ones, a fixed count from the
environment, the count restored after a phase, and the guard that drops a slowed phase to one thread."""

import re
import sys
import time

import numpy as np
import pytest
import torch

from models.exceptions import InputError
from models.nn import threads
from models.nn.threads import SMALL_STEP_MACS, ContentionGuard, available_cores, fit_threads, idle_cores, torch_threads
from tests.processes import spawn, stop


def test_small_steps_run_on_one_thread_and_large_ones_on_at_most_the_callers_count(monkeypatch):
    monkeypatch.delenv(threads.ENV, raising=False)
    assert fit_threads(SMALL_STEP_MACS - 1, most=8) == 1
    assert fit_threads(10 * SMALL_STEP_MACS, most=1) == 1
    monkeypatch.setattr(threads, "idle_cores", lambda: 3)
    assert fit_threads(10 * SMALL_STEP_MACS, most=8) == 3
    assert fit_threads(10 * SMALL_STEP_MACS, most=2) == 2


def test_the_environment_fixes_the_count_and_a_bad_value_is_named(monkeypatch):
    monkeypatch.setenv(threads.ENV, "3")
    assert fit_threads(1.0, most=1) == 3
    monkeypatch.setenv(threads.ENV, "zero")
    with pytest.raises(InputError, match="LMVE_TORCH_THREADS must be a positive integer; got 'zero'") as info:
        fit_threads(1.0)
    assert info.value.field == threads.ENV


def test_torch_count_is_restored_after_the_block():
    before = torch.get_num_threads()
    with torch_threads(1) as n:
        assert n == 1 and torch.get_num_threads() == 1
        torch.set_num_threads(1)
    assert torch.get_num_threads() == before
    with pytest.raises(RuntimeError):
        with torch_threads(1):
            raise RuntimeError("inside")
    assert torch.get_num_threads() == before


def mkl_threads() -> int | None:
    """MKL's count inside torch (``None``: torch built without MKL)."""
    m = re.search(r"mkl_get_max_threads\(\) : (\d+)", torch.__config__.parallel_info())
    return int(m.group(1)) if m else None


def test_the_count_reaches_mkl_where_openmp_already_reads_it():
    """threadpoolctl lowers OpenMP's count, which ``torch.get_num_threads`` reads, but not MKL's inside torch:
    the block sets torch's count anyway, so MKL's batched products run on ``n`` threads too."""
    from threadpoolctl import threadpool_limits

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        if mkl_threads() is None:
            pytest.skip("torch without MKL")
        with threadpool_limits(1):
            assert torch.get_num_threads() == 1 and mkl_threads() == 2  # the trap
            with torch_threads(1):
                assert mkl_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_idle_cores_sees_busy_processes():
    """With a CPU-bound process on every available core, one core is reported (never zero); alone, at
    least one and at most the available cores."""
    cores = available_cores()
    assert 1 <= idle_cores() <= cores
    busy = [spawn([sys.executable, "-c", "while True: pass"]) for _ in range(cores)]
    try:
        time.sleep(0.3)
        assert idle_cores(0.2) == 1
    finally:
        for p in busy:
            stop(p)


def test_guard_drops_a_slowed_phase_to_one_thread(monkeypatch):
    monkeypatch.delenv(threads.ENV, raising=False)
    before = torch.get_num_threads()
    with torch_threads(2):
        guard = ContentionGuard(2)
        guard.resume(0)
        time.sleep(0.01)
        guard.steps_done(10)  # 1 ms a step
        guard.resume(10)
        time.sleep(0.012)
        guard.steps_done(20)  # about as fast: nothing changes
        assert guard.threads == 2 and torch.get_num_threads() == 2
        guard.resume(20)
        time.sleep(0.05)
        guard.steps_done(30)  # 5 ms a step: contention
        assert guard.threads == 1 and guard.demoted_at == 30 and torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    assert not ContentionGuard(1).active


def test_lmve_records_the_threads_of_each_phase():
    from models.shapes.lmve import LMVEShape

    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 3))
    Y = rng.normal(size=(200, 2))
    before = torch.get_num_threads()
    est = LMVEShape(max_steps=50, eval_every=25, patience=1).fit(X, Y)
    assert est.history_["init"]["threads"] == 1 and est.history_["train"]["threads"] == 1  # small steps
    assert torch.get_num_threads() == before
