"""Emulated linear layer: weights dequantized once, activations rounded as the real kernel would.

process_weights dequantizes the checkpoint tensors to the layer's dtype and caches the
matrix, so apply is one activation quantize-dequantize (for A8/A4 modes) plus a plain
matmul: the emulation is then as fast as a BF16 GEMM, with the same rounding.
ORACLE_EMULATION_WEIGHTS=packed keeps the checkpoint tensors instead and dequantizes inside
each call (weights.StoredWeight): the same results, the quantized size in memory.
Activation scales: `input_scale` (fp8_tensor, static per tensor; absent = dynamic) and
`input_global_scale` (NVFP4 W4A4; absent = dynamic amax/(6*448)); the per-token and
1x128 FP8 modes and the MX modes are dynamic by definition and take no input scale.
"""
from __future__ import annotations

from typing import Any

import torch

from oracle.formats import torch_dtype
from oracle.kernel import Kernel

from .activations import quantize_dequantize
from .weights import StoredWeight, activation_scale, check_input, check_vector


class EmulationLinear(Kernel):
    """y = qdq(x) @ dequant(W)^T + b for every weight format and activation mode."""

    stored: StoredWeight | None = None

    @property
    def weight(self) -> torch.Tensor | None:
        """The dequantized [N, K] matrix in the layer's dtype (made on demand in packed mode)."""
        return None if self.stored is None else self.stored.get()

    def process_weights(self, weight: Any, weight_scale: Any = None, weight_global_scale: Any = None,
                        input_scale: Any = None, input_global_scale: Any = None,
                        weight_zero_point: Any = None, bias: Any = None) -> None:
        layer, fmt = self.layer, self.mode.weight
        n, k = layer.out_features, layer.in_features
        self.dtype = torch_dtype(layer.dtype)
        tensors = {"weight": weight, "scale": weight_scale, "global": weight_global_scale, "zero": weight_zero_point}
        names = {"weight": "weight", "scale": "weight_scale", "global": "weight_global_scale",
                 "zero": "weight_zero_point"}
        self.stored = StoredWeight(fmt, tensors, names, [], n, k, self.dtype)
        device = self.stored.device
        self.bias = None
        if bias is not None:
            self.bias = check_vector("bias", bias, [n], "one bias per output feature").to(device=device,
                                                                                          dtype=self.dtype)
        self.act_params: dict[str, Any] = {}
        act = self.mode.activation
        if act == "fp8":
            self.act_params["granularity"] = self.mode.params.get("activation_granularity", "tensor")
            if self.act_params["granularity"] == "tensor":
                static = activation_scale("input_scale", input_scale)
                if static is not None:
                    self.act_params["scale"] = static.to(device)
        elif act == "nvfp4":
            g = activation_scale("input_global_scale", input_global_scale)
            if g is not None:
                self.act_params["global_scale"] = g.to(device)

    def apply(self, x: Any) -> torch.Tensor:
        if self.stored is None:
            raise RuntimeError(f"{self!r}: call process_weights before apply")
        weight = self.stored.get()
        check_input("x", x, self.layer.in_features, weight)
        xq = quantize_dequantize(x.to(self.dtype), self.mode.activation, **self.act_params)
        return torch.nn.functional.linear(xq, weight, self.bias)
