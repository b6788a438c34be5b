"""Ahead-of-time compilation: which token counts to warm, and each signature once.

Kernels expose `warmup_units(token_counts)`; many layers share a signature (a model
with 58 identical MoE blocks compiles one MoE kernel per token count, not 58), so the
plan de-duplicates by (kernel, signature). All of it must run before CUDA-graph capture.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Callable, Hashable, Iterable, Sequence

from .errors import CaptureError


@dataclass(frozen=True)
class WarmupUnit:
    """One compile-worthy launch: `run()` triggers it; (kernel, signature) identifies it."""

    kernel: str
    signature: Hashable
    run: Callable[[], None] = field(compare=False, repr=False)


def token_counts(max_tokens: int, capture_sizes: Iterable[int] = ()) -> tuple[int, ...]:
    """{1} U {capture sizes > 0} U {max batched tokens}, sorted."""
    counts = {1}
    counts.update(int(s) for s in capture_sizes if int(s) > 0)
    if int(max_tokens) > 0:
        counts.add(int(max_tokens))
    return tuple(sorted(counts))


def plan_warmup(kernels: Iterable[object], counts: Sequence[int]) -> list[WarmupUnit]:
    """Every distinct (kernel, signature) among the kernels' units, first occurrence kept."""
    seen: set[tuple[str, Hashable]] = set()
    plan: list[WarmupUnit] = []
    for kernel in kernels:
        units = getattr(kernel, "warmup_units", None)
        for unit in (units(counts) if units else []):
            key = (unit.kernel, unit.signature)
            if key not in seen:
                seen.add(key)
                plan.append(unit)
    return plan


def is_capturing() -> bool:
    """True while a CUDA graph is being captured on the current stream (torch only if loaded)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    try:
        return bool(torch.cuda.is_available() and torch.cuda.is_current_stream_capturing())
    except Exception:
        return False


def ensure_not_capturing(what: str) -> None:
    if is_capturing():
        raise CaptureError(f"{what} during CUDA-graph capture: plan, prepare weights and warm up before capture")


def run_warmup(plan: Sequence[WarmupUnit]) -> int:
    """Run each unit once; refuses during graph capture. Returns the number run."""
    ensure_not_capturing("warmup")
    for unit in plan:
        unit.run()
    return len(plan)
