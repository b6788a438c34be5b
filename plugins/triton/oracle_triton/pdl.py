"""Programmatic dependent launch, L2 prefetch (sm_90) and a sleeping counter wait (sm_70+), as Triton
device functions (inline PTX).

Used by the fused MoE's FC1 -> FC2 chain (moe_kernels) and the dense per-token quantizer -> FP8 GEMM
chain (gemm): one copy of the PTX in a module both import, so neither kernel module imports the other
for it.
"""
from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def gdc_launch_dependents():
    """Programmatic dependent launch (sm_90): the grid launched after this one (with launch_pdl) may start."""
    tl.inline_asm_elementwise("griddepcontrol.launch_dependents; mov.u32 $0, 0;", "=r", [], dtype=tl.int32,
                              is_pure=False, pack=1)


@triton.jit
def gdc_wait():
    """Programmatic dependent launch (sm_90): wait until the previous grid has finished and its writes are
    visible (a no-op when this grid was launched without launch_pdl)."""
    tl.inline_asm_elementwise("griddepcontrol.wait; mov.u32 $0, 0;", "=r", [], dtype=tl.int32, is_pure=False,
                              pack=1)


@triton.jit
def prefetch_rows_l2(base, nbytes):
    """Thread 0 asks L2 for nbytes at base (bulk prefetches of 16 KB; nothing is loaded into registers)."""
    for off in range(0, nbytes, 16384):
        size = tl.minimum(nbytes - off, 16384)
        tl.inline_asm_elementwise(
            "{ .reg .u32 tid; .reg .pred lead; mov.u32 tid, %tid.x; setp.eq.u32 lead, tid, 0; "
            "@lead cp.async.bulk.prefetch.L2.global [$1], $2; mov.u32 $0, 0; }",
            "=r,l,r", [base + off, size.to(tl.int32)], dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def prefetch_row_heads(ptrs, nbytes):
    """Each element of `ptrs` (addresses of weight rows, 16-byte aligned) asks L2 for the nbytes (a
    multiple of 16) that start there: one bulk prefetch per row from the thread holding it, nothing
    loaded into registers (rows a layout replicates over threads are asked for more than once)."""
    return tl.inline_asm_elementwise(
        "{ cp.async.bulk.prefetch.L2.global [$1], $2; mov.u32 $0, 0; }",
        "=r,l,r", [ptrs, tl.full(ptrs.shape, nbytes, tl.int32)], dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def wait_until_at_least(ptr, target):
    """Spin until the int32 counter at ptr reaches target (gpu-scope acquire loads, not atomics, with a
    short nanosleep between them, so hundreds of waiting programs do not queue on the counter's L2
    slice ahead of the writers' own atomics); returns the value seen. sm_70+ (nanosleep)."""
    return tl.inline_asm_elementwise(
        "{ .reg .pred p; .reg .s32 v; WAIT_LOOP: ld.acquire.gpu.global.s32 v, [$1]; setp.lt.s32 p, v, $2; "
        "@p nanosleep.u32 100; @p bra WAIT_LOOP; mov.b32 $0, v; }",
        "=r,l,r", [ptr, target], dtype=tl.int32, is_pure=False, pack=1)
