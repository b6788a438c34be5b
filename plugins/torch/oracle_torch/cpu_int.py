"""Integer linear kernels that ship inside torch's CPU build, with the weights kept packed.

On a CPU the engine otherwise has only oracle-emulation, which keeps a dequantized copy of
every weight (2 bytes a weight in BF16): a 4-bit checkpoint then needs more memory than its
BF16 original. These three keep the checkpoint's bytes and multiply from them:

  torch.linear.int4_cpu        aten._weight_int4pack_mm_for_cpu (tinygemm's CPU build: the same
                               w = (q - 8) * scale + zero with bf16 (scale, zero) per group; its
                               layout and numerics are oracle_torch.tinygemm's)
  torch.linear.int8_weight_cpu aten._weight_int8pack_mm: y = (x @ q^T) * scale, int8 weights with one
                               scale per output channel, activations in bf16/fp16/fp32 (W8A16)
  torch.linear.int8_cpu        torch._int_mm: int8 x int8 -> int32 products, activations quantized
                               per token (symmetric, amax/127, round half to even, as oracle-emulation
                               and compressed-tensors' dynamic token scheme), then
                               y = acc * s_x[:, None] * s_w[None, :] in float32 (W8A8)

Each offers `weight` (the matrix its arithmetic stands for, in the layer's dtype) for inspection
and for the checks that compare kernels with a checkpoint library's decompression; it is computed
on demand, never kept.
"""
from __future__ import annotations

from typing import Any

import torch

from oracle.errors import TensorError
from oracle.formats import torch_dtype
from oracle.kernel import Kernel
from oracle.tensors import apply_dense, check_dtype, check_finite, check_tensor, float_dtypes, forbid, shape_of

from .tinygemm import TorchTinyGemmInt4Linear

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


class TorchCpuInt4Linear(TorchTinyGemmInt4Linear):
    """tinygemm's CPU operator (oracle_torch.tinygemm picks it on a CPU tensor), 4 bits a weight resident."""

    @property
    def weight(self) -> torch.Tensor:
        """The dequantized [N, K] matrix as the operator computes it: its product with the identity (each
        output is one weight times 1, so nothing but the operator's own dequantization is in it)."""
        if self.packed is None:
            raise RuntimeError(f"{type(self).__name__}: call process_weights before weight")
        eye = torch.eye(self.k, dtype=torch.bfloat16, device=self.device)
        return self._mm(eye, self.packed, self.group, self.sz).t().contiguous()


class _Int8PerChannel(Kernel):
    """int8 [N, K] weights with one scale per output channel (compressed-tensors' channel strategy)."""

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
        if shape_of(weight_scale) not in ([n, 1], [n]):
            raise TensorError("weight_scale", f"shape [{n}, 1] (one scale per output channel; {self.spec_name} "
                              "takes no groups along K)", str(shape_of(weight_scale)))
        check_finite("weight_scale", weight_scale)
        forbid("weight_zero_point", weight_zero_point, "int8 weights here are symmetric")
        for name, t in (("weight_global_scale", weight_global_scale), ("input_global_scale", input_global_scale)):
            forbid(name, t, "int8 layers take no global scales")
        forbid("input_scale", input_scale, f"{self.spec_name} quantizes activations per token, dynamically")
        if bias is not None:
            check_tensor("bias", bias, dtypes=FLOATS, shapes=[[n]], why="one bias per output feature")
        self.device = weight.device
        self.q = weight.contiguous()
        self.scale = weight_scale.reshape(n).float()
        self.bias = None if bias is None else bias.to(device=self.device, dtype=self.dtype)

    @property
    def spec_name(self) -> str:
        return self.spec.name if self.spec is not None else type(self).__name__

    @property
    def weight(self) -> torch.Tensor:
        """q * scale in float32, rounded once to the layer's dtype (computed on demand)."""
        if self.q is None:
            raise RuntimeError(f"{type(self).__name__}: call process_weights before weight")
        return (self.q.float() * self.scale[:, None]).to(self.dtype)

    def apply(self, x: Any) -> torch.Tensor:
        if self.q is None:
            raise RuntimeError(f"{type(self).__name__}: call process_weights before apply")
        return apply_dense(x, self.k, self.n, self.device, self.dtype, self._run)

    def _run(self, x2: torch.Tensor) -> torch.Tensor:
        y = self.forward(x2)
        return y + self.bias if self.bias is not None else y

    def forward(self, x2: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError


class TorchInt8WeightLinear(_Int8PerChannel):
    """W8A16: aten._weight_int8pack_mm (activations stay in the layer's dtype; the scale is applied to
    the float32 sum, in the activations' dtype as the operator requires)."""

    #: the operator's CPU kernel reads K in chunks of 16: other K crash the process (torch 2.13)
    K_MULTIPLE = 16

    def process_weights(self, **tensors: Any) -> None:
        if self.layer.in_features % self.K_MULTIPLE:
            raise TensorError("weight", f"K divisible by {self.K_MULTIPLE} (aten._weight_int8pack_mm's CPU kernel "
                              "crashes or computes garbage otherwise)", f"K = {self.layer.in_features}")
        super().process_weights(**tensors)
        self.op_scale = self.scale.to(self.dtype)

    def forward(self, x2: torch.Tensor) -> torch.Tensor:
        return torch.ops.aten._weight_int8pack_mm(x2, self.q, self.op_scale)


def quantize_per_token(x2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[M, K] -> int8 codes and float32 scales [M, 1]: amax/127 per row, round half to even, clamp
    to +-127 (an all-zero row gets scale 1); the rule of oracle-emulation's int8 activations."""
    xf = x2.float()
    scale = xf.abs().amax(dim=-1, keepdim=True) / QMAX
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    return torch.round(xf / scale).clamp(-QMAX, QMAX).to(torch.int8), scale


class TorchInt8DynamicLinear(_Int8PerChannel):
    """W8A8: torch._int_mm on per-token int8 activations and per-channel int8 weights."""

    def process_weights(self, **tensors: Any) -> None:
        super().process_weights(**tensors)
        self.q_t = self.q.t()                     # [K, N] view: _int_mm takes B column-major as is

    def forward(self, x2: torch.Tensor) -> torch.Tensor:
        xq, sx = quantize_per_token(x2)
        acc = torch._int_mm(xq, self.q_t)
        return (acc.float() * sx * self.scale[None, :]).to(self.dtype)
