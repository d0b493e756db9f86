"""Keep freed memory in the worker's heap instead of handing it back to the kernel after every request.

glibc serves an allocation over its mmap threshold (128 KB at start) by a fresh ``mmap`` and returns
freed heap memory above its trim threshold: numpy's temporaries of a batch request (the distances of a
256-row UJIIndoorLoc search, the split outcomes of 1,000 trees) are then page-faulted in anew on every
request, which can cost more than the computation. :func:`keep_freed_memory` sets glibc's ``M_MMAP_THRESHOLD``,
``M_TRIM_THRESHOLD`` and ``M_TOP_PAD`` through ``mallopt`` (ctypes; nothing to install); the cost is
that a worker keeps up to ``keep_mb`` of freed memory for its next requests.
"""

from __future__ import annotations

import ctypes
import logging
import sys

log = logging.getLogger("lmve.service")

M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3
#: glibc's largest mmap threshold on 64-bit systems
MMAP_THRESHOLD_MAX = 32 * 2**20


def keep_freed_memory(keep_mb: int) -> bool:
    """Let this process keep up to ``keep_mb`` MB of freed memory (allocations up to 32 MB from the heap);
    0 leaves glibc's defaults. Whether the settings took (``False`` off glibc, e.g. musl or macOS)."""
    if keep_mb <= 0 or not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        log.info("no glibc mallopt: freed memory goes back to the system as usual")
        return False
    keep = keep_mb * 2**20
    return all(mallopt(option, value) == 1 for option, value in (
        (M_MMAP_THRESHOLD, min(keep, MMAP_THRESHOLD_MAX)), (M_TRIM_THRESHOLD, keep), (M_TOP_PAD, min(keep, 64 * 2**20))))
