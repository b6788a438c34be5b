"""gemlite's GEMMs behind the oracle linear contract: checkpoint tensors in, gemlite's packing out.

INT4: GPTQ qweight [K/8, N] (low nibble first), fp16 scales [K/g, N] and optional qzeros [K/g, N/8]
are unpacked once and handed to gemlite's A16Wn, which repacks 4-bit words in its own layout
(value = (q - z) * s; the scales and zero points become bf16). FP8 per channel: the E4M3 weight
and its fp32 channel scales go to A8W8_fp8_dynamic, which quantizes activations per token on
each call. gemlite is imported only here, when a layer is built.
"""
from __future__ import annotations

from typing import Any, Sequence

import torch

from oracle.errors import TensorError
from oracle.kernel import Kernel
from oracle.tensors import check_activations, check_device, check_tensor, forbid, unpack_nibbles

FLOATS = (torch.bfloat16, torch.float16, torch.float32)
PACK = 8


class GemliteLinear(Kernel):
    """int4 W4A16 or fp8_channel W8A8 through one gemlite module."""

    module: Any = None

    def process_weights(self, weight: Any, weight_scale: Any = None, weight_global_scale: Any = None,
                        input_scale: Any = None, input_global_scale: Any = None,
                        weight_zero_point: Any = None, bias: Any = None) -> None:
        n, k = self.layer.out_features, self.layer.in_features
        self.n, self.k = n, k
        for name, t in (("weight_global_scale", weight_global_scale), ("input_scale", input_scale),
                        ("input_global_scale", input_global_scale)):
            forbid(name, t, f"{self.mode.weight} takes no global or static activation scale here")
        if weight_scale is None:
            raise TensorError("weight_scale", f"a tensor (required for {self.mode.weight} weights)", "None")
        if bias is not None:
            check_tensor("bias", bias, dtypes=FLOATS, shapes=[[n]], why="one bias per output feature")
        check_device("weight", weight, "cuda", "gemlite's kernels run on NVIDIA GPUs")
        self.device = weight.device
        b = None if bias is None else bias.to(device=self.device, dtype=torch.bfloat16)
        from gemlite import helper

        if self.mode.weight == "int4":
            group = getattr(self.layer, "group_size", None) or 128
            check_tensor("weight", weight, dtypes=(torch.int32,), shapes=[[k // PACK, n]], why="GPTQ qweight [K/8, N]")
            check_tensor("weight_scale", weight_scale, dtypes=FLOATS, shapes=[[k // group, n]],
                         why=f"one scale per group of {group} along K, [K/{group}, N]")
            if weight_zero_point is None:
                zeros = torch.full((n, k // group), 8.0, dtype=torch.bfloat16, device=self.device)
            else:
                check_tensor("weight_zero_point", weight_zero_point, dtypes=(torch.int32,),
                             shapes=[[k // group, n // PACK]], why="GPTQ qzeros, 8 zero points per int32 along N")
                zeros = unpack_nibbles(weight_zero_point, dim=1).t().to(torch.bfloat16).contiguous()
            q = unpack_nibbles(weight, dim=0).t().to(torch.uint8).contiguous()          # [N, K]
            self.module = helper.A16Wn(device=self.device, dtype=torch.bfloat16).from_weights(
                q, weight_scale.t().to(torch.bfloat16).contiguous(), zeros, W_nbits=4, group_size=group, bias=b)
        elif self.mode.weight == "fp8_channel":
            forbid("weight_zero_point", weight_zero_point, "fp8_channel weights are symmetric")
            check_tensor("weight", weight, dtypes=(torch.float8_e4m3fn,), shapes=[[n, k]], why="E4M3 [N, K]")
            check_tensor("weight_scale", weight_scale, dtypes=(torch.float32,), shapes=[[n], [n, 1]],
                         why="one fp32 scale per output channel")
            self.module = helper.A8W8_fp8_dynamic(device=self.device, dtype=torch.bfloat16).from_weights(
                weight.contiguous(), scales=weight_scale.reshape(n, 1).float(), bias=b)
        else:
            raise TensorError("weight", "int4 or fp8_channel weights (oracle-gemlite's modes)", self.mode.weight)

    def apply(self, x: Any) -> torch.Tensor:
        if self.module is None:
            raise RuntimeError(f"{self!r}: call process_weights before apply")
        lead, x2 = check_activations(x, self.k, self.device, FLOATS, torch.bfloat16)
        if x2.shape[0] == 0:
            return torch.empty(*lead, self.n, dtype=torch.bfloat16, device=self.device)
        return self.module(x2).reshape(*lead, self.n)

    def warmup_units(self, token_counts: Sequence[int]) -> list:
        """One call per token count: gemlite autotunes each new M on its first call (not capturable)."""
        from oracle.warmup import WarmupUnit

        name = self.spec.name if self.spec else "gemlite.linear"
        return [WarmupUnit(name, (self.mode.name, self.n, self.k, m),
                           lambda m=m: self.apply(torch.zeros(m, self.k, dtype=torch.bfloat16, device=self.device)))
                for m in token_counts]
