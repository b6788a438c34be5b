"""Warmup planning: token counts and one compile per distinct signature."""
from __future__ import annotations

from oracle.warmup import WarmupUnit, plan_warmup, run_warmup, token_counts


def test_token_counts_spec():
    assert token_counts(8192, [512, 1, 0, 256, 256, -4]) == (1, 256, 512, 8192)
    assert token_counts(0) == (1,)


def test_plan_deduplicates_by_kernel_and_signature():
    ran = []

    class FakeKernel:
        def __init__(self, shape):
            self.shape = shape

        def warmup_units(self, counts):
            return [WarmupUnit("k.moe", (self.shape, m), lambda s=self.shape, m=m: ran.append((s, m)))
                    for m in counts]

    layers = [FakeKernel((2880, 2880)) for _ in range(24)] + [FakeKernel((4096, 1536))]
    plan = plan_warmup(layers, token_counts(4096, [1, 8]))
    assert len(plan) == 2 * 3
    assert run_warmup(plan) == 6 and sorted(ran) == sorted({(l.shape, m) for l in layers for m in (1, 8, 4096)})
