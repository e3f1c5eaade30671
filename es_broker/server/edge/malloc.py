"""Handing freed C-heap memory back to the system (glibc only).

Partial frames are held in chunks of at most a few hundred KiB, which glibc
serves from its heap once its dynamic mmap threshold has risen (it does after
the first large block is freed). Freed heap memory that lies below live
objects is never returned by itself, so a broker whose connections once held
hundreds of MiB of partial frames would keep that RSS after they closed.
`trim` (malloc_trim(0)) releases every free heap page, wherever it lies.

Fixing M_MMAP_THRESHOLD low instead would return such blocks on free too, but
every 256 KiB socket read would then be its own mmap and munmap.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import sys


@functools.cache
def _glibc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.gnu_get_libc_version.restype = ctypes.c_char_p  # glibc only (not musl)
        libc.malloc_trim.argtypes = [ctypes.c_size_t]
    except (OSError, AttributeError):
        return None
    return libc


def trim() -> bool:
    """Return free C-heap memory to the system (malloc_trim(0)); False if none was, or not glibc."""
    libc = _glibc()
    return bool(libc is not None and libc.malloc_trim(0))
