"""Fits on the cores that are idle: :func:`side_by_side` and :func:`on_idle_cores`.

Used by the centre's cross-validation (:mod:`training.pipeline.centre_selection`: the candidates of one fold), the served
method's cross-fit (:mod:`training.pipeline.served_volume`: the folds that run whatever the check says) and the pipeline's
fitting stages (:mod:`training.pipeline`).
"""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager, nullcontext


@contextmanager
def on_idle_cores(cores: int | None = None):
    """The compiled libraries' thread pools (BLAS and OpenMP: numpy, scipy, scikit-learn, torch's intra-op
    threads) and torch's own count (:func:`models.nn.threads.torch_threads`, where torch is loaded) limited
    to the idle cores inside the block (``cores``, else :func:`models.nn.threads.idle_cores`); nothing
    changes when every core is idle or when ``LMVE_TORCH_THREADS`` is set (the user fixed the threads). Beside a CPU-bound process a two-thread BLAS
    call waits for its descheduled thread at every barrier."""
    from models.nn.threads import ENV, available_cores, idle_cores

    n = None if os.environ.get(ENV) else (idle_cores() if cores is None else cores)
    if n is None or n >= available_cores():
        yield
        return
    from threadpoolctl import threadpool_limits

    from models.nn.threads import torch_threads

    # torch loaded: its own count too (MKL inside torch is not one of threadpoolctl's pools), set first so
    # that it is restored last, after OpenMP's
    torch_n = torch_threads(max(1, n)) if "torch" in sys.modules else nullcontext()
    with torch_n, threadpool_limits(max(1, n)):
        yield


def side_by_side(work, items, workers: int | None = None) -> list:
    """``[work(i) for i in items]``, on up to ``workers`` threads (default: the idle cores,
    :func:`models.nn.threads.idle_cores`) each limited to one torch and one BLAS/OpenMP thread; in order on
    the caller's thread, its libraries limited to the idle cores (:func:`on_idle_cores`), when one worker is
    all there is.

    For small fits that use a second core poorly: an LMVE step of a few thousand rows runs its dozens of
    small operations about as fast on one thread as on two (:mod:`models.nn.threads`), and torch releases the
    GIL inside each, so two folds side by side take less than their time one after the other; numpy's,
    scikit-learn's and libsvm's compiled loops release it too. ``LMVE_TORCH_THREADS`` set (the user fixed
    the threads) runs them in order on the caller's threads as they are. A fit's result does not depend on
    the thread it ran on (to float rounding where its library splits sums over threads)."""
    from models.nn.threads import ENV, idle_cores

    items = list(items)
    if os.environ.get(ENV):
        return [work(i) for i in items]
    cores = idle_cores() if workers is None else workers
    if min(len(items), cores) <= 1:
        with on_idle_cores(cores if workers is None else None):
            return [work(i) for i in items]
    from concurrent.futures import ThreadPoolExecutor

    from threadpoolctl import threadpool_limits

    from models.nn.threads import torch_threads

    # torch loaded: its fits run on one thread each (not loaded: nothing here uses it)
    torch_one = torch_threads(1) if "torch" in sys.modules else nullcontext()
    with torch_one, threadpool_limits(1), ThreadPoolExecutor(min(len(items), cores)) as pool:
        return list(pool.map(work, items))
