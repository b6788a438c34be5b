"""Entry point of the `oracle.kernels` group: registers kernels.yaml.

No torch, no b12x here. The optional `can_implement` hook runs b12x's own
pure-Python planners, but only when ORACLE_B12X_PLANNER_CHECK=1: importing them
costs about 1.4 s (cutlass + triton), and tests/test_conformance.py shows the
YAML constraints already agree with those planners on the tested grid, so by
default the hook answers at once and selection stays in microseconds.
"""
from __future__ import annotations

import os

from oracle.hookspecs import hookimpl

from .library import KERNELS_FILE
PLANNER_CHECK_ENV = "ORACLE_B12X_PLANNER_CHECK"


@hookimpl
def register_kernels(register):
    register(KERNELS_FILE)


@hookimpl
def can_implement(kernel, layer, mode):
    if os.environ.get(PLANNER_CHECK_ENV) != "1" or kernel.backend != "b12x":
        return None
    from .planner_check import planner_reason  # lazy: imports b12x planners (and torch)

    return planner_reason(layer, mode)
