"""Which weight-scale layout this torch's blockwise FP8 matmul takes on a device, probed once.

Kept apart from `runtime` (which probes whole kernels through `linear`) so that `linear`
can ask for the layout without importing the module that imports it: the probe below
runs the same GEMM call (`gemm.blockwise`) on random operands and compares it with the
same quantized operands multiplied in float32. No torch at import.
"""
from __future__ import annotations

import functools
from typing import Any

#: Relative Frobenius error allowed: the GEMM output is bf16 (2**-9 relative rounding) on
#: identical operands; a layout mistake gives errors of order 1.
PROBE_TOLERANCE = 2e-2
#: device -> the layout found by `block_scale_layout` (read by plugin.can_implement).
PROBED_BLOCK_LAYOUTS: dict[str, str] = {}


@functools.lru_cache(maxsize=None)
def block_scale_layout(device: Any) -> str:
    """Which [K/128, N/128] weight-scale layout this torch's blockwise FP8 accepts on `device`.

    "kblocks" or "l4" when K/128 = 3 works with that layout; "l4-only" when only K/128 = 4
    works; "unsupported" when blockwise scaling is refused. Runs real products, once.
    """
    found = "unsupported"
    for layout in ("kblocks", "l4"):
        if probe_block(device, layout, 384)[0]:
            found = layout
            break
    else:
        if probe_block(device, "l4", 512)[0]:
            found = "l4-only"
    PROBED_BLOCK_LAYOUTS[str(device)] = found
    return found


def probe_block(device: Any, layout: str, k: int, m: int = 16, n: int = 256) -> tuple[bool, str | None]:
    """One blockwise product with `layout`'s weight scales; (agrees with float32, the refusal if any)."""
    import torch

    from . import gemm, quantize

    try:
        gen = torch.Generator(device="cpu").manual_seed(1234)
        x = torch.randn(m, k, generator=gen).to(device=device, dtype=torch.bfloat16)
        wq = torch.randn(n, k, generator=gen).to(device).to(torch.float8_e4m3fn)
        ws = torch.rand(n // gemm.BLOCK, k // gemm.BLOCK, generator=gen).to(device) + 0.5
        xq, xs = quantize.fp8_per_group(x)
        y = gemm.blockwise(xq, wq.contiguous().t(), gemm.m_major(xs), gemm.block_weight_scale(ws, layout),
                           torch.bfloat16)
        torch.cuda.synchronize(device)
    except Exception as exc:  # noqa: BLE001 - the library's refusal is the answer
        return False, f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    wf = wq.float() * ws.repeat_interleave(gemm.BLOCK, 0).repeat_interleave(gemm.BLOCK, 1)
    ref = (xq.float() * xs.repeat_interleave(gemm.BLOCK, 1)) @ wf.t()
    err = float((y.float() - ref).norm() / ref.norm())
    return err < PROBE_TOLERANCE, None
