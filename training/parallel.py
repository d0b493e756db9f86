"""Small fits side by side on the idle cores: :func:`side_by_side`.

Used by the centre's cross-validation (:mod:`training.selection`: the candidates of one fold) and the
served method's cross-fit (:mod:`training.primary`: the folds that run whatever the check says).
"""

from __future__ import annotations

import os
import sys
from contextlib import nullcontext


def side_by_side(work, items, workers: int | None = None) -> list:
    """``[work(i) for i in items]``, on up to ``workers`` threads (default: the idle cores,
    :func:`models.nn.threads.idle_cores`) each limited to one torch and one BLAS/OpenMP thread.

    For small fits that use a second core poorly: an LMVE step of a few thousand rows runs its dozens of
    small operations about as fast on one thread as on two (:mod:`models.nn.threads`), and torch releases the
    GIL inside each, so two folds side by side take about 0.6 of their time one after the other (two 1,225-row
    LMVE fits of the 20-feature grouped survey: 7.8 s against 12.5 s on the 2-core dev machine); numpy's,
    scikit-learn's and libsvm's compiled loops release it too. One worker, or ``LMVE_TORCH_THREADS`` set
    (the user fixed the threads), runs them in order on the caller's threads. A fit's result does not depend
    on the thread it ran on (to float rounding where its library splits sums over threads)."""
    from models.nn.threads import ENV, idle_cores

    items = list(items)
    workers = min(len(items), idle_cores() if workers is None else workers)
    if workers <= 1 or os.environ.get(ENV):
        return [work(i) for i in items]
    from concurrent.futures import ThreadPoolExecutor

    from threadpoolctl import threadpool_limits

    from models.nn.threads import torch_threads

    # torch loaded: its fits run on one thread each (not loaded: nothing here uses it)
    torch_one = torch_threads(1) if "torch" in sys.modules else nullcontext()
    with torch_one, threadpool_limits(1), ThreadPoolExecutor(workers) as pool:
        return list(pool.map(work, items))
