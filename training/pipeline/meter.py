"""Where a training run spends its time and memory: wall seconds and peak resident memory per stage.

The peak of a stage is the kernel's high-water mark of the process's resident set (``VmHWM`` in
``/proc/self/status``), reset when the stage starts (writing ``5`` to ``/proc/self/clear_refs``,
Linux 4.0 and later): the most memory the process held at any moment of that stage, including what
earlier stages still hold, with no sampling thread. Where the reset is not available the figure is
the process's peak so far (``resource.getrusage``), said by ``peak_kind``.
"""

from __future__ import annotations

import resource
import sys
import time
from contextlib import contextmanager
from pathlib import Path

_STATUS, _CLEAR = Path("/proc/self/status"), Path("/proc/self/clear_refs")


def _reset_peak() -> bool:
    """Reset the process's resident high-water mark; False where that is not possible."""
    try:
        _CLEAR.write_text("5")
        return True
    except OSError:
        return False


def peak_rss_mib() -> float:
    """The process's resident high-water mark in MiB (since the last reset, where resets work)."""
    try:
        for line in _STATUS.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    return peak / (1024 * 1024 if sys.platform == "darwin" else 1024)


class StageMeter:
    """Records each ``with meter.stage(name):`` block's wall seconds and peak resident MiB.

    Attributes
    ----------
    stages : dict
        ``name -> {"seconds", "peak_rss_mib"}`` in the order the stages ran (a repeated name adds up its
        seconds and keeps the larger peak).
    peak_kind : str
        ``"stage"``: peaks are per stage; ``"process"``: the reset is unavailable and each is the
        process's peak so far.
    """

    def __init__(self):
        self.stages: dict[str, dict] = {}
        self.peak_kind = "stage"

    @contextmanager
    def stage(self, name: str):
        if not _reset_peak():
            self.peak_kind = "process"
        t0 = time.perf_counter()
        try:
            yield
        finally:
            seconds, peak = time.perf_counter() - t0, peak_rss_mib()
            old = self.stages.get(name)
            if old is not None:
                seconds, peak = seconds + old["seconds"], max(peak, old["peak_rss_mib"])
            self.stages[name] = {"seconds": round(seconds, 3), "peak_rss_mib": round(peak, 1)}

    def peak(self) -> float:
        """The largest stage peak (MiB)."""
        return max((s["peak_rss_mib"] for s in self.stages.values()), default=0.0)
