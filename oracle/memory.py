"""The C heap's habits that decide a streamed load's resident set (glibc; no-ops elsewhere).

glibc serves blocks below its mmap threshold from its heap and, each time it frees a block that was
mapped, raises that threshold to the block's size (up to 32 MiB). Tensors of a few MiB made and freed
one after another (each layer's temporaries at load; each call's dequantized matrix in the emulation's
packed mode) then stay in the heap after they are freed, and the resident set grows as if they were
kept: a streamed load of a 0.5B model grew by ~4x its packed weights (bench/bench_hf_load.py). Two
remedies, both here so the loader and the plugins share them: give freed heap pages back after each
layer (`release_freed_memory`), and, where blocks are made and freed on every call, fix the threshold
so such blocks are mapped and unmapped (`map_large_blocks`; process-wide, as glibc's setting is).
"""
from __future__ import annotations

import functools
from typing import Any

#: mallopt's parameter number for the mmap threshold (glibc malloc.h: M_MMAP_THRESHOLD = -3)
_M_MMAP_THRESHOLD = -3


@functools.lru_cache(maxsize=1)
def _libc() -> Any:
    import ctypes
    import ctypes.util
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.malloc_trim, libc.mallopt     # glibc only (musl, macOS and Windows lack them)
        return libc
    except (OSError, AttributeError):
        return None


def release_freed_memory() -> None:
    """Give the heap pages freed so far back to the system (glibc malloc_trim(0))."""
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)


@functools.lru_cache(maxsize=None)
def map_large_blocks(threshold: int = 1 << 20) -> bool:
    """Blocks of `threshold` bytes and more are mapped, and unmapped when freed, from now on (glibc
    mallopt(M_MMAP_THRESHOLD), which also stops the threshold from rising). True where it took effect."""
    libc = _libc()
    return bool(libc is not None and libc.mallopt(_M_MMAP_THRESHOLD, int(threshold)))
