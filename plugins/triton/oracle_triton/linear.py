"""Linear kernel: y = x @ dequant(W)^T (+ b) through wgemm_kernel, weights kept packed.

W8A16/W4A16 modes multiply the layer-dtype activations in one launch; W8A8 (W4A4) modes
first round them to E4M3 (NVFP4) in one pass (per 1x128 group, per token, or per tensor:
static input_scale or the dynamic amax/448), exactly as oracle-emulation rounds them.
Eager few-row calls replay a private CUDA graph of `forward` (oracle.integration.eager_graphs).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import torch

from oracle.errors import TensorError
from oracle.kernel import Kernel
from oracle.formats import E2M1_MAX, E4M3_MAX, torch_dtype
from oracle.integration.eager_graphs import EagerGraphs
from oracle.tensors import apply_dense, check_scales, check_tensor, float_dtypes, forbid

from .formats import ACT_CODES, ACT_NONE, ACT_NVFP4, ACT_TENSOR, ACT_TOKEN
from .launch import TENSOR_SCALE_MAX, DenseGemm, tensor_scale
from .weights import pack, repack_words

FLOATS = float_dtypes()
#: Eager calls up to this many rows take DenseGemm.planned (one launch plan per row count);
#: the plans that cannot be recorded (cuBLAS paths, from LIBRARY_MIN_ROWS) keep the ordinary path.
PLANNED_MAX_ROWS = 64
#: W4A16 MXFP4 / NVFP4 weights are repacked at load into GPTQ's [K/8, N] word layout
#: (weights.repack_words); False keeps the checkpoint's [N, K/2] bytes (benchmarks compare both,
#: and fp4_gemv's row-walking GEMV reads only those).
WORD_LAYOUT = True


class TritonLinear(Kernel):
    """Every weight format of triton.linear.*; the mode picks the activation handling."""

    gemm: DenseGemm | None = None

    def process_weights(self, weight: Any, weight_scale: Any = None, weight_global_scale: Any = None,
                        input_scale: Any = None, input_global_scale: Any = None,
                        weight_zero_point: Any = None, bias: Any = None) -> None:
        n, k = self.layer.out_features, self.layer.in_features
        self.n, self.k, self.dtype = n, k, torch_dtype(self.layer.dtype)
        packed = pack(self.mode.weight, {"weight": "weight", "scale": "weight_scale", "zero": "weight_zero_point",
                                         "global": "weight_global_scale"},
                      {"weight": weight, "scale": weight_scale, "zero": weight_zero_point,
                       "global": weight_global_scale}, [], n, k, getattr(self.layer, "group_size", None))
        if bias is not None:
            check_tensor("bias", bias, dtypes=FLOATS, shapes=[[n]], why="one bias per output feature")
        granularity = self.mode.params.get("activation_granularity") if self.mode.activation == "fp8" else None
        self.act = ACT_CODES[granularity] if granularity else ACT_NONE
        if self.mode.activation == "nvfp4":
            self.act = ACT_NVFP4
            input_scale, input_global_scale = input_global_scale, None
        forbid("input_global_scale", input_global_scale, f"{self.mode.name} takes no NVFP4 activation scale")
        self.static = None
        if input_scale is not None:
            if self.act not in (ACT_TENSOR, ACT_NVFP4):
                raise TensorError("input_scale", f"None ({self.mode.name} activations are not statically scaled)",
                                  f"a tensor of shape {list(input_scale.shape)}")
            check_tensor("input_scale", input_scale, dtypes=(torch.float32,), shapes=None, why="fp32 per-tensor scale")
            if input_scale.numel() != 1:
                raise TensorError("input_scale", "shape [] or [1] (one scale per tensor)", str(list(input_scale.shape)))
            check_scales("input_scale", input_scale, sign="positive")
        if packed.weight.device.type != "cuda" and not _interpreting():
            raise TensorError("weight", "a CUDA tensor (Triton kernels run on NVIDIA GPUs)", str(packed.weight.device))
        dev = packed.weight.device
        self.device = dev
        if input_scale is not None:
            self.static = input_scale.to(dev).float().reshape(1)
        b = None if bias is None else bias.to(device=dev, dtype=self.dtype).contiguous()
        if WORD_LAYOUT and self.mode.weight in ("mxfp4", "nvfp4") and self.act == ACT_NONE and k % 8 == 0:
            # W4A16 E2M1: GPTQ's word layout, so the one-row GEMV reads it as INT4's (every path reads it)
            packed = repack_words(self.mode.weight, dataclasses.replace(packed, weight=packed.weight.to(dev),
                                                                        scale=packed.scale.to(dev)), n, k)
        self.packed = packed
        self.gemm = DenseGemm(packed.layout, n, k, packed.weight.to(dev), packed.scale.to(dev),
                              None if packed.zero is None else packed.zero.to(dev),
                              None if packed.global_scale is None else packed.global_scale.to(dev), b,
                              mode=self.mode.name, weight_format=self.mode.weight)
        self.eager = EagerGraphs(self.forward)
        self._keep = (self.static,)       # a launch plan's persistent tensors besides the gemm's own
        # calls whose launches need no torch op first (row_act) replay a launch plan (DenseGemm.planned,
        # fastlaunch): on the H200's host cheaper than the eager graph's copy in, replay and copy out
        self.planned = dev.type == "cuda"

    def apply(self, x: Any) -> torch.Tensor:
        if self.gemm is None:
            raise RuntimeError(f"{self!r}: call process_weights before apply")
        if self.planned and type(x) is torch.Tensor and x.dtype is self.dtype and x.device == self.device and \
                0 < x.dim() and x.shape[-1] == self.k and x.is_contiguous() and not x.requires_grad:
            rows = x.numel() // self.k
            if 0 < rows <= PLANNED_MAX_ROWS and self.row_act(rows) is not None:   # checked: a launch plan away
                out_shape = (rows, self.n) if x.dim() == 2 else x.shape[:-1] + (self.n,)   # (slicing a Size: ~1 us)
                y = self.gemm.planned(x, rows, out_shape, self.forward, self._keep)
                if y is not None:
                    return y
        return apply_dense(x, self.k, self.n, self.device, self.dtype, self.eager)

    def row_act(self, rows: int) -> int | None:
        """The activation handling the GEMM gets for `rows` rows when the call is Triton launches
        only (a launch plan can repeat it), or None where torch computes a dynamic per-tensor scale
        first (dynamic_tensor_scale; more than TENSOR_SCALE_MAX values). One row of a dynamic
        per-tensor FP8 layer is its own tensor: its scale is the row's per-token scale (the same
        amax / 448), which the GEMM computes itself; other small dynamic ones take launch.tensor_scale."""
        if self.act not in (ACT_TENSOR, ACT_NVFP4) or self.static is not None:
            return self.act
        if self.act == ACT_TENSOR and rows == 1:
            return ACT_TOKEN
        return self.act if rows * self.k <= TENSOR_SCALE_MAX else None

    def forward(self, x2: torch.Tensor) -> torch.Tensor:
        """The launches of one call on checked [M, K] activations (what an eager graph captures)."""
        act = self.row_act(x2.shape[0])
        if act is None:
            return self.gemm(x2, self.act, dynamic_tensor_scale(x2, self.act), self.dtype)
        scale = None
        if act in (ACT_TENSOR, ACT_NVFP4):
            scale = self.static if self.static is not None else \
                tensor_scale(x2, E4M3_MAX if act == ACT_TENSOR else E2M1_MAX * E4M3_MAX)
        return self.gemm(x2, act, scale, self.dtype)

    def warmup_units(self, token_counts: Sequence[int]) -> list:
        from oracle.warmup import WarmupUnit

        units = []
        for m in token_counts:
            cfg = self.gemm.config_for(m, self.act) if self.gemm else {}
            sig = (self.mode.name, self.n, self.k, self.layer.dtype, tuple(sorted(cfg.items())))
            units.append(WarmupUnit(self.spec.name if self.spec else "triton.linear", sig,
                                    lambda m=m: self.apply(torch.zeros(m, self.k, dtype=self.dtype, device=self.device))))
        return units


def dynamic_tensor_scale(x: torch.Tensor, act: int = ACT_TENSOR) -> torch.Tensor:
    """oracle-emulation's dynamic per-tensor scale (1 where the amax is 0): amax/448 for FP8,
    amax/(6*448) for the NVFP4 global scale. The amax by one reduction over x's own dtype (the inf-norm: the
    largest |x| of any float dtype is one of its values, so the same number as the fp32 copy's): x.float().abs()
    first wrote two copies, 590 of the 805 us this took on a 100 M-value bf16 tensor (Qwen3-235B W4A4's FC2
    input on WS's block rows at 4096 tokens, R104, H200)."""
    amax = torch.linalg.vector_norm(x, float("inf")).float().reshape(1)
    s = amax / torch.full_like(amax, E4M3_MAX if act == ACT_TENSOR else E2M1_MAX * E4M3_MAX)  # IEEE: CUDA's a / x
    # multiplies by the reciprocal, which can differ in the last bit and flip a later rounding
    return torch.where(s > 0, s, torch.ones_like(s))


def _interpreting() -> bool:
    from .launch import interpreting
    return interpreting()
