"""The device-side requirement: does this torch build, on this GPU, run the kernel correctly?

The engine calls `check(spec, platform)` only on a detected device (on a simulated preset
it is assumed, and the trace says so). Each kernel is probed once per device (cached): a
small product through the kernel class itself, compared with the same quantized operands
dequantized and multiplied in float32. A refused call (the library's own error) or a
wrong result rejects the kernel with that detail, so the layer falls to the next tier
instead of crashing. Blockwise FP8 also learns here which weight-scale layout torch takes.
"""
from __future__ import annotations

import functools
from typing import Any

from .block_layout import PROBE_TOLERANCE, PROBED_BLOCK_LAYOUTS, block_scale_layout  # noqa: F401 (re-exported)
E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)


def _torch_device() -> tuple[Any, str | None]:
    try:
        import torch
    except Exception as exc:  # noqa: BLE001 - report, never crash the engine
        return None, f"torch cannot be imported ({type(exc).__name__}: {exc})"
    if not torch.cuda.is_available() or torch.version.cuda is None:
        return None, f"torch {torch.__version__} has no usable CUDA device (a CPU-only build or no GPU)"
    if not hasattr(torch, "_scaled_mm") or not hasattr(torch, "float8_e4m3fn"):
        return None, f"torch {torch.__version__} has no FP8 scaled matmul (torch._scaled_mm)"
    return torch, None


def check(spec: Any, platform: Any) -> tuple[bool, str | None]:
    torch, why = _torch_device()
    if torch is None:
        return False, why
    return _probe(spec.name, torch.cuda.current_device())


@functools.lru_cache(maxsize=None)
def _probe(kernel: str, device_index: int) -> tuple[bool, str | None]:
    import torch

    if kernel == "torch.linear.fp8_block":
        layout = block_scale_layout(torch.device("cuda", device_index))
        if layout == "unsupported":
            return False, (f"torch {torch.__version__} refuses blockwise FP8 scaling (1x128 x 128x128) on "
                           f"capability {'.'.join(map(str, torch.cuda.get_device_capability(device_index)))}; "
                           "it needs cuBLASLt blockwise scaling (CUDA >= 12.9, SM90/SM10x)")
        return True, None
    if kernel == "torch.linear.int4_tinygemm":
        if not hasattr(torch.ops.aten, "_weight_int4pack_mm"):
            return False, f"torch {torch.__version__} has no aten._weight_int4pack_mm (tinygemm)"
        return probe_product("int4", 32, 256, 256, torch.device("cuda", device_index))
    if kernel == "torch.linear.int8":
        return probe_product("int8", 32, 256, 256, torch.device("cuda", device_index))
    fmt = {"torch.linear.fp8_tensor": "fp8_tensor", "torch.linear.fp8_channel": "fp8_channel",
           "torch.linear.mxfp8": "mxfp8", "torch.linear.nvfp4": "nvfp4"}.get(kernel)
    if fmt is None:
        return False, f"no probe for kernel {kernel}"
    if fmt in ("mxfp8", "nvfp4") and not hasattr(torch.nn.functional, "scaled_mm"):
        return False, f"torch {torch.__version__} has no torch.nn.functional.scaled_mm (block-scaled FP8/FP4)"
    return probe_product(fmt, 32, 256, 256, torch.device("cuda", device_index))


def probe_product(fmt: str, m: int, n: int, k: int, device: Any) -> tuple[bool, str | None]:
    """Run the kernel on random operands; (True, None) if it agrees with a float32 reference."""
    import torch

    try:
        y, ref = _run(fmt, m, n, k, device)
        torch.cuda.synchronize(device)
    except Exception as exc:  # noqa: BLE001 - the library's refusal becomes the reason
        return False, f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    err = float((y.float() - ref).norm() / ref.norm())
    if not err < PROBE_TOLERANCE:
        return False, f"a {m}x{n}x{k} probe disagrees with the float32 reference (relative error {err:.3g})"
    return True, None


def _layer_and_mode(fmt: str, m: int, n: int, k: int) -> tuple[Any, Any]:
    from oracle import LinearLayer
    from oracle.catalog import Mode

    if fmt == "int8":
        layer = LinearLayer(name="probe", in_features=k, out_features=n, weight_format="int8", activation_format="int8")
        return layer, Mode(weight="int8", activation="int8", name="probe")
    if fmt == "int4":
        layer = LinearLayer(name="probe", in_features=k, out_features=n, weight_format="int4", group_size=128)
        return layer, Mode(weight="int4", activation="bf16", name="probe")
    act = {"fp8_tensor": "fp8", "fp8_channel": "fp8", "fp8_block": "fp8", "mxfp8": "mxfp8", "nvfp4": "nvfp4"}[fmt]
    layer = LinearLayer(name="probe", in_features=k, out_features=n, weight_format=fmt, activation_format=act)
    return layer, Mode(weight=fmt, activation=act, name="probe")


def _run(fmt: str, m: int, n: int, k: int, device: Any):
    import torch

    from . import linear, quantize

    gen = torch.Generator(device="cpu").manual_seed(1234)
    x = torch.randn(m, k, generator=gen).to(device=device, dtype=torch.bfloat16)
    w = torch.randn(n, k, generator=gen).to(device)
    layer, mode = _layer_and_mode(fmt, m, n, k)
    if fmt == "int4":
        return _run_int4(layer, mode, x, gen)
    if fmt == "int8":
        from .cpu_int import quantize_per_token
        from .int8 import TorchInt8Linear
        wq = torch.randint(-127, 128, (n, k), generator=gen, dtype=torch.int8).to(device)
        ws = (torch.rand(n, 1, generator=gen) * 0.01 + 0.005).to(device)
        impl = TorchInt8Linear(layer, mode, None)
        impl.process_weights(weight=wq, weight_scale=ws)
        xq, xs = quantize_per_token(x)
        return impl.apply(x), (xq.float() * xs) @ (wq.float() * ws).t()
    if fmt in ("fp8_tensor", "fp8_channel", "mxfp8"):
        wq = w.to(torch.float8_e4m3fn)
        if fmt == "fp8_tensor":
            ws = torch.tensor(0.5, device=device)
            wf = wq.float() * ws
            xq, xs = quantize.fp8_per_tensor(x)
            xf = xq.float() * xs
        elif fmt == "fp8_channel":
            ws = torch.rand(n, generator=gen).to(device) + 0.5
            wf = wq.float() * ws[:, None]
            xq, xs = quantize.fp8_per_token(x)
            xf = xq.float() * xs
        else:
            ws = torch.randint(120, 134, (n, k // 32), generator=gen, dtype=torch.uint8).to(device)
            wf = wq.float() * torch.exp2(ws.float() - 127).repeat_interleave(32, 1)
            xq, xs = quantize.mxfp8(x)
            xf = xq.float() * torch.exp2(xs.float() - 127).repeat_interleave(32, 1)
        impl = {"fp8_tensor": linear.TorchTensorFP8Linear, "fp8_channel": linear.TorchChannelFP8Linear,
                "mxfp8": linear.TorchMXFP8Linear}[fmt](layer, mode, None)
        impl.process_weights(weight=wq, weight_scale=ws)
        return impl.apply(x), xf @ wf.t()
    lut = torch.tensor(E2M1, device=device)
    codes = torch.randint(0, 256, (n, k // 2), generator=gen, dtype=torch.uint8).to(device)
    ws = (torch.rand(n, k // 16, generator=gen) + 0.5).to(device).to(torch.float8_e4m3fn)
    gw = torch.tensor(0.25, device=device)
    w_vals = torch.stack((lut[(codes & 15).long()], lut[(codes >> 4).long()]), -1).flatten(-2)
    wf = w_vals * ws.float().repeat_interleave(16, 1) * gw
    packed, bs, ga = quantize.nvfp4(x)
    x_vals = torch.stack((lut[(packed & 15).long()], lut[(packed >> 4).long()]), -1).flatten(-2)
    xf = x_vals * bs.float().repeat_interleave(16, 1) * ga
    impl = linear.TorchNVFP4Linear(layer, mode, None)
    impl.process_weights(weight=codes, weight_scale=ws, weight_global_scale=gw)
    return impl.apply(x), xf @ wf.t()


def _run_int4(layer: Any, mode: Any, x: Any, gen: Any):
    """tinygemm on random GPTQ tensors (with zero points) against w = (q - z) * s in float32,
    the scale and the zero term rounded to bf16 as tinygemm stores them."""
    import torch

    from . import tinygemm

    n, k, g = layer.out_features, layer.in_features, layer.group_size
    q = torch.randint(0, 16, (k, n), generator=gen, dtype=torch.int32)
    z = torch.randint(0, 16, (k // g, n), generator=gen, dtype=torch.int32)
    s = (torch.rand(k // g, n, generator=gen) * 0.02 + 0.01).to(torch.float16)
    shifts = torch.arange(0, 32, 4, dtype=torch.int32)
    words = (q.reshape(k // 8, 8, n) << shifts[None, :, None]).sum(1, dtype=torch.int32)
    zeros = (z.reshape(k // g, n // 8, 8) << shifts).sum(-1, dtype=torch.int32)
    impl = tinygemm.TorchTinyGemmInt4Linear(layer, mode, None)
    impl.process_weights(weight=words.to(x.device), weight_scale=s.to(x.device), weight_zero_point=zeros.to(x.device))
    sz = tinygemm.scales_and_zeros(s, z).float()
    w = (q.float() - 8) * sz[..., 0].repeat_interleave(g, 0) + sz[..., 1].repeat_interleave(g, 0)   # [K, N]
    return impl.apply(x), x.float() @ w.to(x.device)
