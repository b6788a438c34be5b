"""How many generated cases the hardening property tests run: their default x ORACLE_FUZZ_SCALE.

The default keeps the suite fast on CI (2 cores); `ORACLE_FUZZ_SCALE=20` is a long local run.
"""
import os

SCALE = max(1, int(os.environ.get("ORACLE_FUZZ_SCALE", "1") or "1"))
