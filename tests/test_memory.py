"""oracle.memory: the glibc calls the loader and the emulation's packed mode rely on exist and run here."""
from __future__ import annotations

import ctypes.util
import sys

import pytest

from oracle import memory


@pytest.mark.skipif(not sys.platform.startswith("linux") or ctypes.util.find_library("c") is None,
                    reason="glibc's malloc_trim/mallopt are Linux (glibc) calls; elsewhere both are no-ops")
def test_glibc_calls_take_effect():
    memory.release_freed_memory()
    assert memory.map_large_blocks(1 << 20) is True


def test_no_libc_means_no_ops(monkeypatch):
    monkeypatch.setattr(memory, "_libc", lambda: None)
    memory.map_large_blocks.cache_clear()
    memory.release_freed_memory()
    assert memory.map_large_blocks(1 << 21) is False
    memory.map_large_blocks.cache_clear()
