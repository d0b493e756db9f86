"""How many threads a torch fit uses: one on small steps, the idle cores on large ones.

torch's CPU operators split each tensor operation over their intra-op threads and wait for all of them at
the end of the operation, so a thread descheduled by another busy process stalls nearly every operation of
a step made of tiny ones. So:

* a step below ``SMALL_STEP_MACS`` multiply-adds runs on one thread;
* a larger step runs on the cores found idle when its phase starts (:func:`idle_cores`: the idle share
  of ``/proc/stat`` over ``SAMPLE_SECONDS``), at most the threads torch was given (a caller's
  ``torch.set_num_threads`` caps it) and at least one.

A busy process that starts during a phase is caught by :class:`ContentionGuard`: when the phase's steps
run more than ``SLOWDOWN`` times slower than its fastest so far, the rest of the phase runs on one
thread. ``LMVE_TORCH_THREADS=N`` fixes the count for every fit (no guard). The setting is scoped
(:func:`torch_threads`): torch's count is restored when the phase ends. ``docs/benchmarks/design.md``
has the measurements behind the threshold."""

from __future__ import annotations

import os
import time
from contextlib import contextmanager

#: below this many multiply-adds per optimiser step (configurations x batch rows x the layers'
#: weights), a fit runs on one thread
SMALL_STEP_MACS = 10_000_000
#: how long :func:`idle_cores` watches the machine
SAMPLE_SECONDS = 0.05
#: the environment variable that fixes the count
ENV = "LMVE_TORCH_THREADS"
#: a phase on several threads whose steps take this many times its fastest steps goes on on one thread
SLOWDOWN = 2.0


def _cpu_times() -> tuple[int, int] | None:
    """``(idle, total)`` jiffies of all CPUs from ``/proc/stat``; ``None`` where it cannot be read."""
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    if len(fields) < 5:
        return None
    return fields[3] + fields[4], sum(fields[:8])  # idle + iowait; user .. steal


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def idle_cores(seconds: float = SAMPLE_SECONDS) -> int:
    """The cores no process used over the next ``seconds`` (rounded down, at least one), or every available
    core where ``/proc/stat`` cannot be read."""
    cores = available_cores()
    first = _cpu_times()
    if first is None:
        return cores
    time.sleep(seconds)
    second = _cpu_times()
    if second is None or second[1] <= first[1]:
        return cores
    share = (second[0] - first[0]) / (second[1] - first[1])
    return max(1, min(cores, int(share * cores + 0.25)))


def fit_threads(macs_per_step: float, most: int | None = None) -> int:
    """The intra-op threads for a phase whose optimiser step costs ``macs_per_step`` multiply-adds (module
    docstring); ``most`` defaults to torch's current count."""
    fixed = os.environ.get(ENV)
    if fixed:
        try:
            n = int(fixed)
        except ValueError:
            n = 0
        if n < 1:
            from models.exceptions import InputError

            raise InputError(f"{ENV} must be a positive integer; got {fixed!r}", field=ENV,
                             expected="a positive integer", received=repr(fixed))
        return n
    if most is None:
        import torch

        most = torch.get_num_threads()
    if macs_per_step < SMALL_STEP_MACS or most <= 1:
        return 1
    return max(1, min(most, idle_cores()))


@contextmanager
def torch_threads(n: int):
    """torch's intra-op thread count set to ``n`` inside the block, restored after it.

    Set even where ``torch.get_num_threads()`` already reads ``n``: that reads OpenMP's count, which
    ``threadpoolctl`` may have lowered, while MKL inside torch keeps the count ``torch.set_num_threads``
    gave it last. Left at two there, MKL's batched products (LMVE's configurations in lockstep) ran a two-thread
    OpenMP team whose worker spun at every barrier: beside a busy process the synthetic default's
    served-method folds took 36-160 s instead of 12."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield n
    finally:
        torch.set_num_threads(before)


class ContentionGuard:
    """Watches a phase's step times between held-out evaluations and drops it to one thread when they
    run :data:`SLOWDOWN` times slower than its fastest window (another process took a core: its steps
    wait for a descheduled thread at every operation). Step times only fall otherwise (configurations
    leave the batch), so a slowdown that large is contention. Inactive on one thread or under
    ``LMVE_TORCH_THREADS``.

    Attributes
    ----------
    threads : int
        The threads the phase runs on now.
    demoted_at : int or None
        The step after which it went on on one thread.
    """

    def __init__(self, threads: int):
        self.threads = threads
        self.active = threads > 1 and not os.environ.get(ENV)
        self.fastest = float("inf")
        self.demoted_at: int | None = None
        self._t, self._step = time.perf_counter(), 0

    def resume(self, step: int) -> None:
        """Steps start again after ``step`` (after an evaluation, or at the phase's start with 0)."""
        self._t, self._step = time.perf_counter(), step

    def steps_done(self, step: int) -> None:
        """The steps since :meth:`resume` ended at ``step``: compare their mean time with the fastest."""
        if not self.active or step <= self._step:
            return
        per_step = (time.perf_counter() - self._t) / (step - self._step)
        if per_step > SLOWDOWN * self.fastest:
            import torch

            torch.set_num_threads(1)  # torch_threads restores the caller's count when the phase ends
            self.threads, self.active, self.demoted_at = 1, False, step
        self.fastest = min(self.fastest, per_step)
