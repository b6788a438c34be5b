"""Integer linear kernels that ship inside torch's CPU build, with the weights kept packed.

On a CPU the engine otherwise has only oracle-emulation, which keeps a dequantized copy of
every weight (2 bytes a weight in BF16): a 4-bit checkpoint then needs more memory than its
BF16 original. These three keep the checkpoint's bytes and multiply from them:

  torch.linear.int4_cpu        aten._weight_int4pack_mm_for_cpu (tinygemm's CPU build: the same
                               w = (q - 8) * scale + zero with bf16 (scale, zero) per group; its
                               layout and numerics are oracle_torch.tinygemm's)
  torch.linear.int8_weight_cpu aten._weight_int8pack_mm: y = (x @ q^T) * scale, int8 weights with one
                               scale per output channel (one call) or per group of K (one call per
                               group, summed in float32), activations in bf16/fp16/fp32 (W8A16)
  torch.linear.int8_cpu        torch._int_mm: int8 x int8 -> int32 products, activations quantized
                               per token (symmetric, amax/127, round half to even, as oracle-emulation
                               and compressed-tensors' dynamic token scheme), then
                               y = acc * s_x[:, None] * s_w[None, :] in float32 (W8A8)

Each offers `weight` (the matrix its arithmetic stands for, in the layer's dtype) for inspection
and for the checks that compare kernels with a checkpoint library's decompression; it is computed
on demand, never kept.
"""
from __future__ import annotations

import functools
from typing import Any

import torch

from oracle.errors import TensorError
from oracle.formats import torch_dtype
from oracle.kernel import Kernel
from oracle.tensors import apply_dense, check_dtype, check_finite, check_tensor, float_dtypes, forbid, shape_of

from .tinygemm import TorchTinyGemmInt4Linear, inner_k_tiles

FLOATS = float_dtypes()
QMAX = 127
#: the CPU operator each kernel needs, by kernel name (the runtime check asks torch for it)
CPU_OPS = {"torch.linear.int4_cpu": "_weight_int4pack_mm_for_cpu",
           "torch.linear.int8_weight_cpu": "_weight_int8pack_mm",
           "torch.linear.int8_cpu": "_int_mm"}


def check(spec: Any, platform: Any) -> tuple[bool, str | None]:
    """The runtime requirement on a CPU: this torch build has a CPU kernel for the kernel's operator."""
    op = CPU_OPS.get(spec.name)
    if op is None:
        return False, f"no CPU operator known for kernel {spec.name}"
    qualified = f"aten::{op}" if op != "_int_mm" else "aten::_int_mm"
    try:
        found = torch._C._dispatch_has_kernel_for_dispatch_key(qualified, "CPU")
    except RuntimeError:
        found = False
    if not found:
        return False, f"torch {torch.__version__} has no CPU kernel for aten.{op}"
    return True, None


#: rows per block of the CPU operator's packed layout (its AVX-512 build: 4 vectors of 16 floats)
CPU_BLOCK_N = 64


def pack_int4_for_cpu(words: torch.Tensor) -> torch.Tensor:
    """int32 words [N, K/8] (eight nibbles along K, low first: GPTQ's qweight transposed, compressed-tensors'
    weight_packed) -> the bytes [N, K/2] aten._convert_weight_to_int4pack_for_cpu makes from those nibbles
    on an AVX-512 CPU, built from the bytes directly (the operator takes them widened to int32 [N, K]).

    The operator's layout, per block of 64 rows, is a [K, 32] byte array whose byte (k, c) holds row c's
    nibble k low and row c + 32's high; a last block of 16, 32 or 48 rows is a [K, rows/2] array whose byte
    (k, j) holds row 2j low and row 2j + 1 high. A word's byte j holds nibbles 2j (low) and 2j + 1 (high),
    so each output byte is two nibbles of the same parity from two rows' bytes. Other CPU builds lay it out
    differently: `direct_int4_packing` checks this against the operator once before it is used.
    """
    n = words.shape[0]
    b = words.contiguous().view(torch.uint8)                       # [N, K/2]
    half = b.shape[1]
    out = torch.empty(n * half, dtype=torch.uint8)
    full = n // CPU_BLOCK_N * CPU_BLOCK_N

    def put(dst: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor) -> None:
        """lo, hi [B, W, K/2] (the low and high rows' bytes) -> dst [B, K/2, 2, W] (k even, then odd)."""
        dst[:, :, 0, :] = ((lo & 15) | (hi << 4)).transpose(1, 2)
        dst[:, :, 1, :] = ((lo >> 4) | (hi & 0xF0)).transpose(1, 2)

    if full:
        blocks = b[:full].view(-1, 2, CPU_BLOCK_N // 2, half)
        put(out[:full * half].view(-1, half, 2, CPU_BLOCK_N // 2), blocks[:, 0], blocks[:, 1])
    if n > full:
        pairs = b[full:].view(1, (n - full) // 2, 2, half)
        put(out[full * half:].view(1, half, 2, (n - full) // 2), pairs[:, :, 0], pairs[:, :, 1])
    return out.view(n, half)


@functools.cache
def direct_int4_packing() -> bool:
    """Whether pack_int4_for_cpu gives this torch build's operator's bytes (full blocks and a tail),
    checked once on random words; where not (another CPU capability), the operator packs."""
    from oracle.tensors import unpack_nibbles

    gen = torch.Generator().manual_seed(27)
    for n, k in ((CPU_BLOCK_N * 2 + 48, 256), (16, 64)):
        words = torch.randint(-2 ** 31, 2 ** 31 - 1, (n, k // 8), dtype=torch.int32, generator=gen)
        nibbles = unpack_nibbles(words.t(), dim=0).t().contiguous()
        if not torch.equal(pack_int4_for_cpu(words), torch.ops.aten._convert_weight_to_int4pack_for_cpu(nibbles, 2)):
            return False
    return True


class TorchCpuInt4Linear(TorchTinyGemmInt4Linear):
    """tinygemm's CPU operator (oracle_torch.tinygemm picks it on a CPU tensor), 4 bits a weight resident.
    Where this torch's layout is the one pack_int4_for_cpu builds (checked once), the checkpoint's words are
    packed byte-wise, without widening every nibble to an int32 for the operator (3-6x faster, same bytes)."""

    def _pack(self, weight: torch.Tensor, k: int) -> torch.Tensor:
        if weight.device.type == "cpu" and direct_int4_packing():
            inner_k_tiles(k)                                           # K in whole tile pairs, as the operator asks
            return pack_int4_for_cpu(weight.t())
        return super()._pack(weight, k)

    @property
    def weight(self) -> torch.Tensor:
        """The dequantized [N, K] matrix as the operator computes it: its product with the identity (each
        output is one weight times 1, so nothing but the operator's own dequantization is in it)."""
        if self.packed is None:
            raise RuntimeError(f"{type(self).__name__}: call process_weights before weight")
        eye = torch.eye(self.k, dtype=torch.bfloat16, device=self.device)
        return self._mm(eye, self.packed, self.group, self.sz).t().contiguous()


class _Int8(Kernel):
    """Symmetric int8 [N, K] weights with one scale per output channel, or (where `GROUPS` allows) per
    group of K (compressed-tensors' channel and group strategies; scales [N, 1] or [N, K/g])."""

    GROUPS = False
    q: torch.Tensor | None = None

    def process_weights(self, weight: Any, weight_scale: Any = None, weight_global_scale: Any = None,
                        input_scale: Any = None, input_global_scale: Any = None,
                        weight_zero_point: Any = None, bias: Any = None) -> None:
        n, k = self.layer.out_features, self.layer.in_features
        self.n, self.k, self.dtype = n, k, torch_dtype(self.layer.dtype)
        check_tensor("weight", weight, dtypes=(torch.int8,), shapes=[[n, k]], why="int8 weights [N, K]")
        if weight_scale is None:
            raise TensorError("weight_scale", "a tensor (required for int8 weights)", "None")
        check_dtype("weight_scale", weight_scale, FLOATS, "int8 weight scales")
        scale = weight_scale.reshape(n, 1) if shape_of(weight_scale) == [n] else weight_scale
        groups = scale.shape[-1] if scale.dim() == 2 and scale.shape[0] == n else 0
        if groups != 1 and not (self.GROUPS and groups and k % groups == 0):
            what = f"[{n}, K/g] (one scale per output channel or per group of K)" if self.GROUPS else \
                f"[{n}, 1] (one scale per output channel; {self.spec_name} takes no groups along K)"
            raise TensorError("weight_scale", f"shape {what}", str(shape_of(weight_scale)))
        check_finite("weight_scale", weight_scale)
        forbid("weight_zero_point", weight_zero_point, "int8 weights here are symmetric")
        for name, t in (("weight_global_scale", weight_global_scale), ("input_global_scale", input_global_scale)):
            forbid(name, t, "int8 layers take no global scales")
        forbid("input_scale", input_scale, f"{self.spec_name} takes no static activation scale")
        if bias is not None:
            check_tensor("bias", bias, dtypes=FLOATS, shapes=[[n]], why="one bias per output feature")
        self.device = weight.device
        self.group = k // groups
        self.q = weight.contiguous()
        self.scale = scale.float().contiguous()                       # [N, G]
        self.bias = None if bias is None else bias.to(device=self.device, dtype=self.dtype)

    @property
    def spec_name(self) -> str:
        return self.spec.name if self.spec is not None else type(self).__name__

    @property
    def weight(self) -> torch.Tensor:
        """q * scale in float32, rounded once to the layer's dtype (computed on demand)."""
        if self.q is None:
            raise RuntimeError(f"{type(self).__name__}: call process_weights before weight")
        w = self.q.float().unflatten(-1, (-1, self.group)) * self.scale[..., None]
        return w.flatten(-2).to(self.dtype)

    def apply(self, x: Any) -> torch.Tensor:
        if self.q is None:
            raise RuntimeError(f"{type(self).__name__}: call process_weights before apply")
        return apply_dense(x, self.k, self.n, self.device, self.dtype, self._run)

    def _run(self, x2: torch.Tensor) -> torch.Tensor:
        y = self.forward(x2)
        return y + self.bias if self.bias is not None else y

    def forward(self, x2: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError


class TorchInt8WeightLinear(_Int8):
    """W8A16: aten._weight_int8pack_mm, which takes one scale per output row. Per-channel layers are one
    call in the activations' dtype (the scale applied to the float32 sum); grouped ones (compressed-tensors'
    W8A16 preset: groups of 128) are one call per group of K on float32 activations with that group's
    scales, summed in float32: the weights stay int8 and every product is exact in float32."""

    GROUPS = True
    #: the operator's CPU kernel reads K in chunks of 16: other K crash the process (torch 2.13)
    K_MULTIPLE = 16

    def process_weights(self, **tensors: Any) -> None:
        super().process_weights(**tensors)
        if self.group % self.K_MULTIPLE:
            self.q = None
            raise TensorError("weight", f"K (or its groups) divisible by {self.K_MULTIPLE} (aten._weight_int8pack_mm's "
                              "CPU kernel crashes or computes garbage otherwise)", f"{self.group}")
        groups = self.scale.shape[1]
        if groups == 1:
            self.op_scale = self.scale[:, 0].to(self.dtype)
        else:                                                          # [G, N, g] and [G, N], each contiguous
            self.q_groups = self.q.unflatten(-1, (groups, self.group)).transpose(0, 1).contiguous()
            self.scale_groups = self.scale.t().contiguous()
            self.q = self.q_groups                                     # one copy kept (weight reads it back)

    @property
    def weight(self) -> torch.Tensor:
        if self.q is not None and self.q.dim() == 3:
            w = self.q.float() * self.scale_groups[..., None]         # [G, N, g]
            return w.transpose(0, 1).flatten(-2).to(self.dtype)
        return super().weight

    def forward(self, x2: torch.Tensor) -> torch.Tensor:
        if self.q.dim() == 2:
            return torch.ops.aten._weight_int8pack_mm(x2, self.q, self.op_scale)
        xg = x2.float().unflatten(-1, (-1, self.group))               # [M, G, g]
        y = torch.ops.aten._weight_int8pack_mm(xg[:, 0].contiguous(), self.q[0], self.scale_groups[0])
        for g in range(1, self.q.shape[0]):
            y += torch.ops.aten._weight_int8pack_mm(xg[:, g].contiguous(), self.q[g], self.scale_groups[g])
        return y.to(self.dtype)


def quantize_per_token(x2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[M, K] -> int8 codes and float32 scales [M, 1]: amax/127 per row, round half to even, clamp
    to +-127 (an all-zero row gets scale 1); the rule of oracle-emulation's int8 activations, on any
    device (oracle_torch.int8 falls back to it on CUDA)."""
    xf = x2.float()
    amax = xf.abs().amax(dim=-1, keepdim=True)
    scale = amax / torch.full_like(amax, QMAX)            # a tensor divisor: IEEE division on CUDA too
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    return torch.round(xf / scale).clamp(-QMAX, QMAX).to(torch.int8), scale


class TorchInt8DynamicLinear(_Int8):
    """W8A8: torch._int_mm on per-token int8 activations and per-channel int8 weights."""

    def process_weights(self, **tensors: Any) -> None:
        super().process_weights(**tensors)
        self.q_t = self.q.t()                     # [K, N] view: _int_mm takes B column-major as is
        self.channel_scale = self.scale[:, 0]

    def forward(self, x2: torch.Tensor) -> torch.Tensor:
        xq, sx = quantize_per_token(x2)
        acc = torch._int_mm(xq, self.q_t)
        return (acc.float() * sx * self.channel_scale[None, :]).to(self.dtype)
