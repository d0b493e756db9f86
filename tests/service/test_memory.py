"""service.memory: a worker keeps freed memory in its heap (glibc), so batch temporaries are not mmap'd anew."""

import subprocess
import sys

import pytest

from service.memory import keep_freed_memory

PROBE = """
import ctypes, sys
import numpy as np
from service.memory import keep_freed_memory

class Info(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                     "fsmblks", "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = Info
took = keep_freed_memory(int(sys.argv[1]))
a = np.ones(2**20)  # 8 MB: over glibc's default mmap threshold
mapped = libc.mallinfo2().hblkhd
del a
print(took, mapped >= 8 * 2**20, libc.mallinfo2().fordblks >= 8 * 2**20)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc only")
@pytest.mark.parametrize("keep_mb, want", [(0, "False True False"), (256, "True False True")])
def test_an_8_mb_temporary_comes_from_the_heap_and_stays_there_when_memory_is_kept(keep_mb, want):
    """With glibc's defaults the array is mmap'd and returned on free; with 256 MB kept, it comes from the heap
    and its memory stays free in the heap for the next request."""
    out = subprocess.run([sys.executable, "-c", PROBE, str(keep_mb)], capture_output=True, text=True, check=True)
    assert out.stdout.split() == want.split()


def test_nothing_is_set_for_zero():
    assert keep_freed_memory(0) is False
