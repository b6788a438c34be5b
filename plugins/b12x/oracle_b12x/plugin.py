"""Entry point of the `oracle.kernels` group: registers kernels.yaml and flashinfer_kernels.yaml
(FlashInfer's own SM12x kernels), the b12x tier (after the optimized one) with flashinfer_b12x
right before it, and policy.yaml (b12x MoE is opt-in).

No torch, no b12x here. The optional `can_implement` hook runs b12x's own
pure-Python planners, but only when ORACLE_B12X_PLANNER_CHECK=1: importing them
costs about 1.4 s (cutlass + triton), and tests/test_conformance.py shows the
YAML constraints already agree with those planners on the tested grid, so by
default the hook answers at once and selection stays in microseconds.
"""
from __future__ import annotations

from pathlib import Path

from oracle.envvars import decision_env, flag
from oracle.hookspecs import hookimpl

from .provider import FLASHINFER_KERNELS_FILE, KERNELS_FILE

PLANNER_CHECK_ENV = "ORACLE_B12X_PLANNER_CHECK"
POLICY_FILE = Path(__file__).with_name("policy.yaml")


@hookimpl
def register_kernels(register):
    register(KERNELS_FILE)
    register(FLASHINFER_KERNELS_FILE)    # FlashInfer's own SM12x kernels (backend flashinfer_b12x)


@hookimpl
def register_tiers(insert):
    insert("b12x", after="optimized")
    # FlashInfer's own SM12x kernels right before native b12x, as vLLM lists FlashInferB12xNvFp4 before
    # B12xNvFp4 (after the established optimized backends); flashinfer_kernels.yaml keeps its MoE opt-in.
    insert("flashinfer_b12x", before="b12x", ops=["linear", "moe"])


@hookimpl
def register_policies(register):
    register(POLICY_FILE)


@hookimpl
def can_implement(layer, mode):
    if not flag(decision_env(), PLANNER_CHECK_ENV):  # the caller's env=
        return None
    from .planner_check import planner_reason  # lazy: imports b12x planners (and torch)

    return planner_reason(layer, mode)
