"""Shared settings of the hardening property tests.

SCALE: how many generated cases run, their default x ORACLE_FUZZ_SCALE (the default keeps the suite
fast on CI's 2 cores; `ORACLE_FUZZ_SCALE=20` is a long local run).
CASE_BOUND_S: the stated bound on one generated case. Hypothesis' own deadline is off because
a loaded 2-core machine makes it flaky; `bounded()` asserts this looser bound instead, so a hang
or a blow-up still fails.
"""
import contextlib
import os
import time

SCALE = max(1, int(os.environ.get("ORACLE_FUZZ_SCALE", "1") or "1"))
CASE_BOUND_S = 5.0


@contextlib.contextmanager
def bounded(seconds: float = CASE_BOUND_S):
    start = time.perf_counter()
    yield
    elapsed = time.perf_counter() - start
    assert elapsed < seconds, f"one case took {elapsed:.1f} s (bound {seconds} s)"
