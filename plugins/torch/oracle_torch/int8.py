"""W8A8 int8 on CUDA: torch._int_mm (cuBLASLt's int8 GEMM, int32 accumulation) between per-token int8
activations and per-channel int8 weights (compressed-tensors' W8A8 preset, `int-quantized`).

One call is three launches: the activations quantized per row (oracle_torch.int8_triton: the codes
and scales of oracle-emulation's int8 rule, amax/127, round half to even), the int8 GEMM, and a
scale epilogue y = (acc * s_x) * s_w in float32, rounded once to the layer's dtype, then + bias
(the order of oracle_torch.cpu_int's CPU kernel). cuBLASLt's int8 GEMM as torch calls it needs
more than 16 rows and K, N multiples of 8 (aten/src/ATen/native/cuda/Blas.cpp, _int_mm_out_cuda):
K and N are declared constraints (kernels.yaml), and fewer than 17 rows are padded to 32 with zero
codes by the quantize launch itself. Eager few-row calls replay a private CUDA graph of the three
launches (oracle.integration.eager_graphs). Without a working Triton the eager torch functions of
cpu_int (same codes) quantize and scale instead.
"""
from __future__ import annotations

import os
from typing import Any

import torch

from oracle.errors import TensorError
from oracle.integration.eager_graphs import EagerGraphs
from oracle.tensors import check_device

from .cpu_int import TorchInt8DynamicLinear, quantize_per_token

#: torch._int_mm on CUDA asks for more than this many rows; smaller calls are padded to PAD_ROWS
MIN_ROWS = 16
PAD_ROWS = 32
#: K and N multiples of this (cuBLASLt int8 operand alignment, checked by torch._int_mm on CUDA)
ALIGN = 8
_TRITON_FAILED: list[str] = []


def rows_for(m: int) -> int:
    """The row count the GEMM runs: m itself above MIN_ROWS, else PAD_ROWS."""
    return m if m > MIN_ROWS else PAD_ROWS


class TorchInt8Linear(TorchInt8DynamicLinear):
    """torch.linear.int8: per-channel int8 weights x per-token int8 activations on an NVIDIA GPU."""

    def process_weights(self, **tensors: Any) -> None:
        super().process_weights(**tensors)
        try:
            check_device("weight", tensors.get("weight"), "cuda", "torch._int_mm's int8 GEMM runs on NVIDIA GPUs")
        except TensorError:
            self.q = None
            raise
        if self.n % ALIGN or self.k % ALIGN:
            self.q = None
            raise TensorError("weight", f"N and K multiples of {ALIGN} (torch._int_mm's cuBLASLt int8 alignment)",
                              f"N={self.n}, K={self.k}")
        self.channel_scale = self.channel_scale.contiguous()
        self.eager = EagerGraphs(self.forward)

    def _run(self, x2: torch.Tensor) -> torch.Tensor:
        return self.eager(x2)

    def forward(self, x2: torch.Tensor) -> torch.Tensor:
        """Quantize, GEMM, scale (+ bias) on checked [M, K] activations (what an eager graph captures)."""
        m = x2.shape[0]
        xq, sx = _quantize(x2, rows_for(m))
        acc = torch._int_mm(xq, self.q_t)
        return _scale(acc, sx, self.channel_scale, self.bias, m, self.dtype)


def _fused() -> Any:
    """oracle_torch.int8_triton, or None where Triton failed once (or ORACLE_TORCH_QUANT=eager)."""
    if _TRITON_FAILED or os.environ.get("ORACLE_TORCH_QUANT") == "eager":
        return None
    from . import int8_triton
    return int8_triton


def _fell_back(exc: Exception) -> None:
    _TRITON_FAILED.append(f"{type(exc).__name__}: {exc}"[:500])
    import structlog
    structlog.get_logger("oracle_torch").warning("fused_int8_failed", error=_TRITON_FAILED[0],
                                                 fallback="eager torch on the same CUDA device")


def _quantize(x2: torch.Tensor, rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Codes [rows, K] and scales [rows, 1] of x2 [M, K], rows past M zero (scale 1)."""
    fused = _fused()
    if fused is not None:
        try:
            return fused.int8_per_token(x2.contiguous(), rows)
        except Exception as exc:  # noqa: BLE001 - a compiler problem falls back to the reference
            _fell_back(exc)
    xq, sx = quantize_per_token(x2)
    pad = rows - x2.shape[0]
    if pad:
        xq = torch.nn.functional.pad(xq, (0, 0, 0, pad))
        sx = torch.nn.functional.pad(sx, (0, 0, 0, pad), value=1.0)
    return xq, sx


def _scale(acc: torch.Tensor, sx: torch.Tensor, sw: torch.Tensor, bias: torch.Tensor | None, m: int,
           dtype: torch.dtype) -> torch.Tensor:
    """(acc * s_x) * s_w in float32 for the first m rows, rounded to dtype, + bias."""
    fused = _fused()
    if fused is not None:
        try:
            return fused.scale_epilogue(acc, sx, sw, bias, m, dtype)
        except Exception as exc:  # noqa: BLE001 - a compiler problem falls back to the reference
            _fell_back(exc)
    y = (acc[:m].float() * sx[:m] * sw[None, :]).to(dtype)
    return y + bias if bias is not None else y
