"""The device-side requirement: can this Triton compile and run the kernels here, correctly?

The engine calls `check(spec, platform)` only on a detected device (on a simulated preset
it is assumed, and the trace says so). Once per device and kernel family a small product
runs through the real kernels (one row through the small-batch path, three through the tiled
one) and is compared with a float32 product of the same dequantized weights; a compiler error or a wrong result rejects the kernel with that
detail (reported once), so the layer falls to the next candidate instead of crashing.
"""
from __future__ import annotations

import functools
from typing import Any

PROBE_TOLERANCE = 2e-2


def check(spec: Any, platform: Any) -> tuple[bool, str | None]:
    try:
        import torch
        import triton  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - report, never crash the engine
        return False, f"torch/triton cannot be imported ({type(exc).__name__}: {exc})"
    if not torch.cuda.is_available() or torch.version.cuda is None:
        return False, f"torch {torch.__version__} has no usable CUDA device"
    fmt = "fp8_block" if spec.name.endswith("fp8") else "mxfp4"
    return _probe(fmt, spec.op, torch.cuda.current_device())


@functools.lru_cache(maxsize=None)
def _probe(fmt: str, op: str, device_index: int) -> tuple[bool, str | None]:
    import logging
    import time

    import structlog
    import torch

    start = time.perf_counter()
    try:
        y, ref = _run(fmt, op, torch.device("cuda", device_index))
        torch.cuda.synchronize(device_index)
    except Exception as exc:  # noqa: BLE001 - a compiler or launch failure becomes the reason
        detail = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ''}"
        structlog.get_logger("oracle_triton").warning("triton_probe_failed", format=fmt, op=op, error=detail)
        return False, detail
    err = float((y.float() - ref).norm() / ref.norm())
    # What a load pays for it (Triton compiles, seconds on a fresh machine). A stdlib log, silent unless the
    # application asks (`oracle --log-decisions`): printed, it would land in `explain --format json`'s stdout.
    logging.getLogger("oracle_triton").info("triton_probe format=%s op=%s error=%.5f seconds=%.2f", fmt, op, err,
                                            time.perf_counter() - start)
    if not err < PROBE_TOLERANCE:
        return False, f"a probe product disagrees with the float32 reference (relative error {err:.3g})"
    return True, None


def _run(fmt: str, op: str, device: Any):
    import torch

    from oracle import LinearLayer, MoELayer
    from oracle.catalog import Mode

    from .linear import TritonLinear
    from .moe import TritonMoE

    gen = torch.Generator(device="cpu").manual_seed(7)
    n, k = 256, 256
    codes = torch.randint(0, 256, (n, k // 2), generator=gen, dtype=torch.uint8)
    lut = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0])
    if fmt == "mxfp4":
        scale = torch.randint(120, 130, (n, k // 32), generator=gen, dtype=torch.uint8)
        w = torch.stack((lut[(codes & 15).long()], lut[(codes >> 4).long()]), -1).flatten(-2)
        w = w * torch.exp2(scale.float() - 127).repeat_interleave(32, 1)
        tensors = {"weight": codes, "weight_scale": scale}
        mode = Mode(weight="mxfp4", activation="bf16", name="probe")
    else:
        wq = (torch.randn(n, k, generator=gen) * 8).to(torch.float8_e4m3fn)
        scale = torch.rand(n // 128, k // 128, generator=gen) + 0.5
        w = wq.float() * scale.repeat_interleave(128, 0).repeat_interleave(128, 1)
        tensors = {"weight": wq, "weight_scale": scale}
        mode = Mode(weight="fp8_block", activation="bf16", name="probe")
    x = torch.randn(4, k, generator=gen).to(torch.bfloat16)
    tensors = {key: v.to(device) for key, v in tensors.items()}
    if op == "moe":
        layer = MoELayer(name="probe", num_experts=2, top_k=1, hidden_size=k, intermediate_size=n // 2,
                         weight_format=fmt, activation="relu2")
        kernel = TritonMoE(layer, mode, None)
        kernel.process_weights(w13=tensors["weight"][None, : n // 2].expand(2, -1, -1).contiguous(),
                               w2=_w2(fmt, tensors, k, n // 2),
                               w13_scale=_s(fmt, tensors["weight_scale"], n // 2),
                               w2_scale=_s2(fmt, tensors, k, n // 2))
        ids = torch.zeros(4, 1, dtype=torch.int32, device=device)
        xd, ones = x.to(device), torch.ones(4, 1, device=device)
        # one token takes the direct path (4-bit experts), three the aligned grouped GEMM
        y = torch.cat([kernel.apply(xd[:1], ones[:1], ids[:1]), kernel.apply(xd[1:], ones[1:], ids[1:])])
        h = torch.relu(x.float() @ w[: n // 2].t()).square().bfloat16().float()
        ref = h @ w[:k, : n // 2].t()
        return y.cpu(), ref
    layer = LinearLayer(name="probe", in_features=k, out_features=n, weight_format=fmt)
    kernel = TritonLinear(layer, mode, None)
    kernel.process_weights(**tensors)
    xd = x.to(device)       # one row takes the GEMV, three a tensor-core tile (4-bit: the swap-AB kernel)
    return torch.cat([kernel.apply(xd[:1]), kernel.apply(xd[1:])]).cpu(), x.float() @ w.t()


def _s(fmt, scale, rows):
    if fmt == "mxfp4":
        return scale[None, :rows].expand(2, -1, -1).contiguous()
    return scale[None, : -(-rows // 128)].expand(2, -1, -1).contiguous()


def _w2(fmt, tensors, h, i):
    """w2 [E, H, I]: the probe reuses the first I columns' worth of the weight's bytes."""
    w = tensors["weight"]
    cols = i // 2 if fmt == "mxfp4" else i
    return w[None, :h, :cols].expand(2, -1, -1).contiguous()


def _s2(fmt, tensors, h, i):
    s = tensors["weight_scale"]
    if fmt == "mxfp4":
        return s[None, :h, : i // 32].expand(2, -1, -1).contiguous()
    return s[None, : -(-h // 128), : -(-i // 128)].expand(2, -1, -1).contiguous()

