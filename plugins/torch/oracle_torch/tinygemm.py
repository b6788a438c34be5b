"""torch's tinygemm INT4 W4A16 GEMM (aten._weight_int4pack_mm) serving GPTQ int4 linear layers.

tinygemm is the INT4 kernel that ships inside torch (gpt-fast, torchao's int4 weight-only).
It dequantizes w = (q - 8) * scale + zero with one bf16 (scale, zero) pair per group of K
and per output column, in its own tensor-core tile layout. GPTQ's w = (q - z) * s maps onto
it exactly in real numbers with scale = s and zero = (8 - z) * s (symmetric: z = 8, zero 0);
the stored pair is rounded to bf16, which is the one numerical difference from
oracle-emulation (a relative 2**-9 per group; the tests state the tolerance).

Weights stay 4-bit (tinygemm's layout, the same bytes as the checkpoint). CUDA runs
`_weight_int4pack_mm` (bf16 activations only, capability >= 8.0); the CPU build of the same
operator (`*_for_cpu`, which takes the nibbles unpacked as int32) runs the same arithmetic,
which is what the CPU tests check against oracle-emulation.
"""
from __future__ import annotations

from typing import Any, Sequence

import torch

from oracle.errors import TensorError
from oracle.kernel import Kernel
from oracle.tensors import (apply_dense, check_dtype, check_shape, check_tensor, float_dtypes, forbid, shape_of,
                            unpack_nibbles)

PACK = 8                               # GPTQ: 8 nibbles per int32
GROUPS = (32, 64, 128, 256)            # the group sizes int4mm.cu instantiates (qGroupSize check)
K_TILE = 16                            # tinygemm's m16n8k16 K tile; innerKTiles in {2, 4, 8}
FLOATS = float_dtypes()


def inner_k_tiles(k: int) -> int:
    """The widest innerKTiles (8, 4, 2) whose K extent divides K (int4mm.cu needs an even divisor)."""
    for tiles in (8, 4, 2):
        if k % (tiles * K_TILE) == 0:
            return tiles
    raise TensorError("weight", f"K divisible by {2 * K_TILE} (tinygemm packs two 16-wide K tiles per int32)",
                      f"K = {k}")


def scales_and_zeros(scale: torch.Tensor, zero_point: torch.Tensor | None) -> torch.Tensor:
    """GPTQ scales [G, N] and zero points (unpacked, [G, N]; None = 8) -> tinygemm's [G, N, 2] bf16.

    zero = (8 - z) * s in fp32 from the bf16-rounded scale, so q = z dequantizes to (close to) 0.
    """
    s = scale.to(torch.bfloat16)
    z = torch.full_like(s, 8, dtype=torch.int32) if zero_point is None else zero_point.to(torch.int32)
    zero = ((8 - z).float() * s.float()).to(torch.bfloat16)
    return torch.stack((s, zero), dim=-1).contiguous()


def pack_weight(q_nk: torch.Tensor, tiles: int) -> torch.Tensor:
    """Nibbles [N, K] int32 -> tinygemm's packed layout on q's device.

    CUDA takes bytes [N, K/2] with the even k in the high nibble (gpt-fast's and torchao's
    packing for torch >= 2.5); the CPU operator takes the nibbles as int32 [N, K].
    """
    if q_nk.is_cuda:
        pairs = (torch.bitwise_left_shift(q_nk[:, 0::2], 4) | q_nk[:, 1::2]).to(torch.uint8).contiguous()
        return torch.ops.aten._convert_weight_to_int4pack(pairs, tiles)
    return torch.ops.aten._convert_weight_to_int4pack_for_cpu(q_nk.contiguous(), tiles)


class TorchTinyGemmInt4Linear(Kernel):
    """int4 (GPTQ, symmetric or with zero points) x bf16 activations through torch's tinygemm."""

    packed: torch.Tensor | None = None

    def process_weights(self, weight: Any, weight_scale: Any = None, weight_global_scale: Any = None,
                        input_scale: Any = None, input_global_scale: Any = None,
                        weight_zero_point: Any = None, bias: Any = None) -> None:
        n, k = self.layer.out_features, self.layer.in_features
        self.n, self.k = n, k
        check_tensor("weight", weight, dtypes=(torch.int32,), shapes=[[k // PACK, n]],
                     why=f"GPTQ qweight [K/8, N] for N={n}, K={k}")
        if k % PACK or n % PACK:
            raise TensorError("weight", "K and N divisible by 8 (GPTQ packing)", f"N={n}, K={k}")
        if weight_scale is None:
            raise TensorError("weight_scale", "a tensor (required for int4 weights)", "None")
        check_dtype("weight_scale", weight_scale, FLOATS, "per-group scales")
        groups = shape_of(weight_scale)[0] if weight_scale.dim() == 2 else 0
        group = k // groups if groups and k % groups == 0 else 0
        if group not in GROUPS:
            raise TensorError("weight_scale", f"[K/group, N] with a group size in {list(GROUPS)} "
                              "(tinygemm's qGroupSize)", f"shape {shape_of(weight_scale)} for K={k}")
        check_shape("weight_scale", weight_scale, [groups, n], "one scale per group of K per column")
        declared = getattr(self.layer, "group_size", None)
        if declared is not None and declared != group:
            raise TensorError("weight_scale", f"group size {declared} (the layer's group_size)", f"group size {group}")
        if weight_zero_point is not None:
            check_tensor("weight_zero_point", weight_zero_point, dtypes=(torch.int32,), shapes=[[groups, n // PACK]],
                         why="GPTQ qzeros, 8 zero points per int32 along N")
        for name, t in (("weight_global_scale", weight_global_scale), ("input_scale", input_scale),
                        ("input_global_scale", input_global_scale)):
            forbid(name, t, "int4 W4A16 takes no global or activation scales")
        if bias is not None:
            check_tensor("bias", bias, dtypes=FLOATS, shapes=[[n]], why="one bias per output feature")
        if not bool(torch.isfinite(weight_scale).all()):
            raise TensorError("weight_scale", "finite scales", "a NaN or infinite scale")
        self.device = weight.device
        self.group = group
        z = None if weight_zero_point is None else unpack_nibbles(weight_zero_point.to(self.device), dim=1)
        self.packed = self._pack(weight, k)
        self.sz = scales_and_zeros(weight_scale.to(self.device), z)
        self.bias = None if bias is None else bias.to(device=self.device, dtype=torch.bfloat16)
        self._mm = torch.ops.aten._weight_int4pack_mm if self.device.type == "cuda" else \
            torch.ops.aten._weight_int4pack_mm_for_cpu

    def _pack(self, weight: torch.Tensor, k: int) -> torch.Tensor:
        """GPTQ qweight [K/8, N] -> the operator's packed layout (oracle_torch.cpu_int packs a CPU's directly)."""
        return pack_weight(unpack_nibbles(weight, dim=0).t().contiguous(), inner_k_tiles(k))

    def apply(self, x: Any) -> torch.Tensor:
        if self.packed is None:
            raise RuntimeError(f"{self!r}: call process_weights before apply")
        return apply_dense(x, self.k, self.n, self.device, torch.bfloat16, self.forward)

    def forward(self, x2: torch.Tensor) -> torch.Tensor:
        """tinygemm and the bias on checked [M, K] activations (one aten op: no eager graph, whose
        copy-in, replay and copy-out cost more host time than the op's own launch)."""
        y = self._mm(x2, self.packed, self.group, self.sz)
        return y + self.bias if self.bias is not None else y

    def warmup_units(self, token_counts: Sequence[int]) -> list:
        from oracle.warmup import WarmupUnit

        name = self.spec.name if self.spec else "torch.linear.int4_tinygemm"
        return [WarmupUnit(name, (self.n, self.k, self.group, m),
                           lambda m=m: self.apply(torch.zeros(m, self.k, dtype=torch.bfloat16, device=self.device)))
                for m in token_counts]
