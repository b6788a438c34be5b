"""flashinfer_b12x.linear.nvfp4: NVFP4 W4A4 through FlashInfer's b12x CuTe-DSL GEMM
(`flashinfer.mm_fp4(..., backend="b12x")`, SM120/SM121), as vLLM's FlashInferB12xNvFp4LinearKernel
runs it: activations quantized by `flashinfer.fp4_quantize` with the checkpoint's input scale,
weights and their 128x4-swizzled E4M3 scales padded to N % 32 and K % 32 (the GEMM's TMA
alignment), the padded output columns sliced off.
"""
from __future__ import annotations

from functools import partial
from typing import Any

from oracle.errors import InputError
from oracle.formats import torch_dtype
from oracle.kernel import Kernel
from oracle.warmup import WarmupUnit

from .common import check_scalar, check_tensor, refuse_during_capture
from .flashinfer_common import flashinfer, round_up, swizzle_128x4

ALIGN = 32      # N and K multiples FlashInfer's b12x FP4 GEMM needs (vLLM pads to them)


class FlashInferB12xNVFP4Linear(Kernel):
    """Dense NVFP4 W4A4 with FlashInfer's SM12x GEMM."""

    def __init__(self, layer: Any, mode: Any, spec: Any):
        super().__init__(layer, mode, spec)
        self.k, self.n = layer.in_features, layer.out_features
        self.kp, self.np = round_up(self.k, ALIGN), round_up(self.n, ALIGN)
        self.owner = f"{spec.name} layer {layer.name!r}" if layer.name else spec.name
        self.weight = self.weight_scale = self.alpha = self.input_scale = self.bias = None

    def process_weights(self, weight: Any = None, weight_scale: Any = None, weight_global_scale: Any = None,
                        input_scale: Any = None, input_global_scale: Any = None,
                        weight_zero_point: Any = None, bias: Any = None) -> None:
        import torch

        refuse_during_capture(f"{self.owner}: process_weights")
        if weight_zero_point is not None:
            raise InputError("NVFP4 weights have no zero point", source=self.owner, field="weight_zero_point")
        check_tensor(self.owner, "weight", weight, dtypes=[torch.uint8], shape=[self.n, self.k // 2],
                     what="packed E2M1 pairs [N, K/2], low nibble = even k")
        check_tensor(self.owner, "weight_scale", weight_scale, dtypes=[torch.float8_e4m3fn],
                     shape=[self.n, self.k // 16], what="one E4M3 scale per 16 values along K")
        g = check_scalar(self.owner, "weight_global_scale", weight_global_scale, "the fp32 weight global scale")
        a = check_scalar(self.owner, "input_global_scale", input_global_scale,
                         "the checkpoint's activation scale (ModelOpt input_scale), needed for W4A4")
        if not weight.is_cuda:
            raise InputError("FlashInfer's GEMM runs on the GPU: expected a CUDA tensor", source=self.owner,
                             field="weight")
        device = weight.device
        padded = torch.zeros((self.np, self.kp // 2), dtype=torch.uint8, device=device)
        padded[:self.n, :self.k // 2] = weight
        scales = torch.zeros((self.np, self.kp // 16), dtype=torch.float8_e4m3fn, device=device)
        scales[:self.n, :self.k // 16] = weight_scale
        self.weight, self.weight_scale = padded, swizzle_128x4(scales)
        self.input_scale = (1.0 / a).reshape(1).to(device)          # fp4_quantize multiplies before rounding
        self.alpha = (a * g).reshape(1).to(device=device, dtype=torch.float32)
        self.bias = None if bias is None else check_tensor(
            self.owner, "bias", bias, dtypes=[torch_dtype(self.layer.dtype)], shape=[self.n],
            what=f"one {self.layer.dtype} value per output feature").to(device)

    def apply(self, x: Any) -> Any:
        import torch

        if self.weight is None:
            raise RuntimeError(f"{self.owner}: call process_weights before apply")
        if not isinstance(x, torch.Tensor) or x.shape[-1] != self.k:
            raise InputError(f"expected a tensor [..., {self.k}]", source=self.owner, field="x")
        fi = flashinfer()
        x2 = x.reshape(-1, self.k)
        xq, xs = fi.fp4_quantize(x2, self.input_scale, sf_vec_size=16, is_sf_swizzled_layout=True)
        if self.kp != self.k:
            xq = torch.nn.functional.pad(xq, (0, (self.kp - self.k) // 2))
        out = fi.mm_fp4(xq, self.weight.t(), xs, self.weight_scale.t(), self.alpha, x.dtype, backend="b12x")
        out = out[:, :self.n]
        if self.bias is not None:
            out = out + self.bias
        return out.reshape(*x.shape[:-1], self.n)

    def warmup_units(self, token_counts) -> list:
        """One call per token count before capture: FlashInfer compiles its CuTe-DSL GEMM per shape."""
        key = (self.mode.name, self.np, self.kp, self.layer.dtype)
        return [WarmupUnit(kernel=self.spec.name, signature=(*key, m), run=partial(self._warm, m))
                for m in sorted(set(token_counts))]

    def _warm(self, m: int) -> None:
        import torch

        self.apply(torch.zeros(m, self.k, dtype=torch_dtype(self.layer.dtype), device=self.weight.device))
