"""gemlite's FP8 W8A8 GEMM (per-channel weights, dynamic per-token activations) as a peer candidate.

Why: issue #26 measured gemlite 0.6 (a Triton low-bit GEMM library on the package index) beside
oracle-triton on an H200 with weights from HBM; on some FP8 per-channel shapes and row counts it is
the faster kernel (plugins/triton/README.md#fp8-w8a8-per-channel-per-token-activations has the latest
figures, plugins/triton/HISTORY.md the rounds behind them), so a tuning file must be able to choose
it. It sits in the `peer` tier (after the project's own kernels): it is taken automatically only
where a tuning file measured it faster. Its eager calls cost 300-900 us of host time (gemlite binds
and checks every argument per call and autotunes each new shape and row bucket on first use), which
vanishes under CUDA graphs, so only graph-mode measurements (`oracle tune`'s default) should choose it.

gemlite quantizes the activations itself (per token, amax / 448, E4M3) and multiplies the codes on
float8 tensor cores with the per-channel weight scale applied after the sum: oracle-emulation's
W8A8 per-token numerics, up to its own rounding of the scale division (the GPU test states the
tolerance). The weights keep the checkpoint's E4M3 bytes and fp32 scales (gemlite stores the codes
transposed, one byte per weight: no extra memory).
"""
from __future__ import annotations

from typing import Any

import torch

from oracle.kernel import Kernel
from oracle.tensors import apply_dense, check_tensor, float_dtypes, forbid

from .weights import pack

FLOATS = float_dtypes()


class GemliteFP8ChannelLinear(Kernel):
    """fp8_channel weights x dynamic per-token FP8 activations through gemlite's A8W8_fp8_dynamic."""

    lin: Any = None

    def process_weights(self, weight: Any, weight_scale: Any = None, weight_global_scale: Any = None,
                        input_scale: Any = None, input_global_scale: Any = None,
                        weight_zero_point: Any = None, bias: Any = None) -> None:
        n, k = self.layer.out_features, self.layer.in_features
        self.n, self.k = n, k
        packed = pack("fp8_channel", {"weight": "weight", "scale": "weight_scale", "zero": "weight_zero_point",
                                      "global": "weight_global_scale"},
                      {"weight": weight, "scale": weight_scale, "zero": weight_zero_point,
                       "global": weight_global_scale}, [], n, k, None)
        forbid("weight_global_scale", weight_global_scale, "per-channel FP8 weights have one scale per channel")
        forbid("input_scale", input_scale, "gemlite scales the activations dynamically, per token")
        forbid("input_global_scale", input_global_scale, "FP8 activations take no NVFP4 scale")
        if bias is not None:
            check_tensor("bias", bias, dtypes=FLOATS, shapes=[[n]], why="one bias per output feature")
        from gemlite import helper      # the peer's own package, imported only when it is instantiated

        self.device = packed.weight.device
        self.lin = helper.A8W8_fp8_dynamic(device=self.device, dtype=torch.bfloat16).from_weights(
            packed.weight.view(torch.float8_e4m3fn), scales=packed.scale.reshape(n, 1),
            bias=None if bias is None else bias.to(self.device))

    def apply(self, x: Any) -> torch.Tensor:
        if self.lin is None:
            raise RuntimeError(f"{self!r}: call process_weights before apply")
        return apply_dense(x, self.k, self.n, self.device, torch.bfloat16, self.lin)
