"""Linear kernels on torch's scaled matmul: y = (qA * sA) @ (qW * sW)^T (+ b), in the layer's dtype.

process_weights checks the checkpoint tensors (names and shapes as in oracle.kernel) and
lays them out once (B = W^T as a column-major view, scales in the layout the GEMM reads);
apply quantizes the activations on the device exactly as oracle-emulation rounds them
(oracle_torch.quantize), runs one scaled GEMM and adds the bias after it. Eager few-row calls
replay a private CUDA graph of those launches (oracle.integration.eager_graphs).
"""
from __future__ import annotations

import os
from typing import Any, Callable

import torch

from oracle.errors import TensorError
from oracle.formats import torch_dtype
from oracle.integration.eager_graphs import EagerGraphs
from oracle.kernel import Kernel
from oracle.tensors import apply_dense, check_device, check_scales, check_tensor, float_dtypes, forbid

from . import gemm, quantize


QUANT_ENV = "ORACLE_TORCH_QUANT"   # "eager": the torch reference functions even on CUDA
_FUSED_FAILED: set[str] = set()


def _quantizer(name: str, x: torch.Tensor) -> Callable[..., Any]:
    """The fused Triton quantizer on CUDA (same rounding), else the eager torch one.

    A Triton that cannot compile must not stop the kernel: the failure is logged once and
    the eager functions (same results, more memory passes) run on the same device.
    """
    eager = getattr(quantize, name)
    if not x.is_cuda or os.environ.get(QUANT_ENV) == "eager" or name in _FUSED_FAILED:
        return eager

    def fused(*args: Any) -> Any:
        try:
            from . import quantize_triton
            return getattr(quantize_triton, name)(*args)
        except Exception as exc:  # noqa: BLE001 - a compiler problem falls back to the reference
            _FUSED_FAILED.add(name)
            import structlog
            structlog.get_logger("oracle_torch").warning(
                "fused_quantizer_failed", quantizer=name, error=f"{type(exc).__name__}: {exc}"[:500],
                fallback="eager torch on the same CUDA device")
            return eager(*args)
    return fused


FLOATS = float_dtypes()


class _ScaledLinear(Kernel):
    """Shared lifecycle: validate, keep W^T and scales, quantize x, GEMM, bias."""

    weight_dtype: Any = torch.float8_e4m3fn
    packed_k_divisor = 1          # nvfp4 stores two codes per byte along K
    w_t: torch.Tensor | None = None

    def process_weights(self, weight: Any, weight_scale: Any = None, weight_global_scale: Any = None,
                        input_scale: Any = None, input_global_scale: Any = None,
                        weight_zero_point: Any = None, bias: Any = None) -> None:
        n, k = self.layer.out_features, self.layer.in_features
        self.n, self.k = n, k
        self.dtype = torch_dtype(self.layer.dtype)
        check_tensor("weight", weight, dtypes=(self.weight_dtype,), shapes=[[n, k // self.packed_k_divisor]],
                     why=f"{self.mode.weight} weight [N, K{'/2' if self.packed_k_divisor == 2 else ''}] "
                         f"for N={n}, K={k}")
        if n % 16 or k % (16 * self.packed_k_divisor):
            raise TensorError("weight", f"N divisible by 16 and K by {16 * self.packed_k_divisor} "
                              "(torch scaled-matmul operand alignment)", f"N={n}, K={k}")
        forbid("weight_zero_point", weight_zero_point, f"{self.mode.weight} weights are symmetric")
        if weight_scale is None:
            raise TensorError("weight_scale", f"a tensor (required for {self.mode.weight} weights)", "None")
        if bias is not None:
            check_tensor("bias", bias, dtypes=FLOATS, shapes=[[n]], why="one bias per output feature")
        scales = dict(weight_scale=weight_scale, weight_global_scale=weight_global_scale,
                      input_scale=input_scale, input_global_scale=input_global_scale)
        self._validate(**scales)          # every tensor is checked before anything touches the GPU
        check_device("weight", weight, "cuda", "torch scaled-matmul kernels run on NVIDIA GPUs")
        self.device = weight.device
        self.w_t = weight.contiguous().t()
        self.bias = None if bias is None else bias.to(device=self.device, dtype=self.dtype)
        self._prepare(**scales)
        self.eager = EagerGraphs(self.forward, width=n + k)

    def _validate(self, **scales: Any) -> None:
        raise NotImplementedError

    def _prepare(self, **scales: Any) -> None:
        raise NotImplementedError

    def _gemm(self, x2: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def apply(self, x: Any) -> torch.Tensor:
        if self.w_t is None:
            raise RuntimeError(f"{self!r}: call process_weights before apply")
        return apply_dense(x, self.k, self.n, self.device, self.dtype, self.eager)

    def forward(self, x2: torch.Tensor) -> torch.Tensor:
        """Quantize, GEMM, bias on checked [M, K] activations (what an eager graph captures)."""
        y = self._gemm(x2)
        return y + self.bias if self.bias is not None else y


def _scalar_scale(name: str, t: Any) -> None:
    check_tensor(name, t, dtypes=(torch.float32,), shapes=[[], [1]], why="one fp32 scale per tensor")
    check_scales(name, t)


class TorchTensorFP8Linear(_ScaledLinear):
    """fp8_tensor weights x per-tensor FP8 activations (static input_scale, or dynamic amax/448)."""

    def _validate(self, weight_scale: Any, input_scale: Any, **_: Any) -> None:
        _scalar_scale("weight_scale", weight_scale)
        if input_scale is not None:
            _scalar_scale("input_scale", input_scale)

    def _prepare(self, weight_scale: Any, input_scale: Any, **_: Any) -> None:
        self.sw = weight_scale.to(self.device).reshape(())
        self.static = None if input_scale is None else input_scale.to(self.device).reshape(())

    def _gemm(self, x2: torch.Tensor) -> torch.Tensor:
        xq, sx = _quantizer("fp8_per_tensor", x2)(x2, self.static)
        return gemm.tensorwise(xq, self.w_t, sx, self.sw, self.dtype)


class TorchChannelFP8Linear(_ScaledLinear):
    """fp8_channel weights (one scale per output channel) x per-token FP8 activations: rowwise scales."""

    def _validate(self, weight_scale: Any, input_scale: Any, **_: Any) -> None:
        check_tensor("weight_scale", weight_scale, dtypes=(torch.float32,), shapes=[[self.n], [self.n, 1]],
                     why="one fp32 scale per output channel")
        check_scales("weight_scale", weight_scale)
        forbid("input_scale", input_scale, "per-token activation scales are dynamic")

    def _prepare(self, weight_scale: Any, **_: Any) -> None:
        self.sw = weight_scale.to(self.device).reshape(1, self.n).contiguous()

    def _gemm(self, x2: torch.Tensor) -> torch.Tensor:
        xq, sx = _quantizer("fp8_per_token", x2)(x2)
        return gemm.rowwise(xq, self.w_t, sx.contiguous(), self.sw, self.dtype)


class TorchBlockFP8Linear(_ScaledLinear):
    """fp8_block weights (128x128 blocks) x 1x128-group FP8 activations: cuBLASLt blockwise scaling;
    one row on CUDA of a layer small enough (block_gemv.serves), the fused group quantizer's launch and a
    Triton GEMV over the codes (oracle_torch.block_gemv, PREQUANT)."""

    def _validate(self, weight_scale: Any, input_scale: Any, **_: Any) -> None:
        if self.n % gemm.BLOCK or self.k % gemm.BLOCK:
            raise TensorError("weight", "N and K multiples of 128 (whole 128x128 blocks)", f"N={self.n}, K={self.k}")
        nb, kb = self.n // gemm.BLOCK, self.k // gemm.BLOCK
        check_tensor("weight_scale", weight_scale, dtypes=(torch.float32,), shapes=[[nb, kb]],
                     why="one fp32 scale per 128x128 block, [ceil(N/128), ceil(K/128)]")
        check_scales("weight_scale", weight_scale)
        forbid("input_scale", input_scale, "1x128 activation scales are dynamic")

    def _prepare(self, weight_scale: Any, **_: Any) -> None:
        from .block_layout import block_scale_layout

        kb = self.k // gemm.BLOCK
        layout = block_scale_layout(self.device)
        if layout == "unsupported":
            raise TensorError("weight", "a device where torch runs blockwise FP8 scaling (SM90/SM10x, "
                              "CUDA >= 12.9)", f"torch {torch.__version__} refusing it on {self.device}")
        if layout == "l4-only" and kb % 4:
            raise TensorError("weight", "K/128 divisible by 4 (this torch's blockwise scaling accepts only "
                              "K-block counts that are multiples of 4)", f"K={self.k}")
        self.sw = gemm.block_weight_scale(weight_scale.to(self.device), "kblocks" if layout == "kblocks" else "l4")

    def _gemm(self, x2: torch.Tensor) -> torch.Tensor:
        m = x2.shape[0]
        if m and self._gemv_serves(x2):
            try:
                from . import block_gemv
                # K slices summed by a second launch: 0.3-0.7 us faster than the in-launch sum (H200, r6, r7)
                return block_gemv.block_gemv(x2.contiguous(), self.w_t.t(), self.sw, self.dtype,
                                             prequant=block_gemv.prequant())
            except Exception as exc:  # noqa: BLE001 - a compiler problem falls back to cuBLASLt
                _FUSED_FAILED.add("block_gemv")
                import structlog
                structlog.get_logger("oracle_torch").warning(
                    "block_gemv_failed", error=f"{type(exc).__name__}: {exc}"[:500], fallback="cuBLASLt blockwise")
        pad = (-m) % gemm.BLOCK_M_MULTIPLE
        if pad:
            x2 = torch.nn.functional.pad(x2, (0, 0, 0, pad))
        xq, sx = _quantizer("fp8_per_group", x2)(x2)
        y = gemm.blockwise(xq, self.w_t, gemm.m_major(sx), self.sw, self.dtype)
        return y[:m] if pad else y


    def _gemv_serves(self, x2: torch.Tensor) -> bool:
        """One row on CUDA goes to the Triton GEMV (oracle_torch.block_gemv) where it is the faster
        path (block_gemv.serves: layers up to MAX_WEIGHTS weights), unless the fused quantizers are
        switched off (ORACLE_TORCH_QUANT=eager), ORACLE_TORCH_BLOCK_GEMV=0, or it failed to compile here."""
        if not x2.is_cuda or os.environ.get(QUANT_ENV) == "eager" or "block_gemv" in _FUSED_FAILED:
            return False
        from . import block_gemv
        return x2.shape[0] <= block_gemv.MAX_ROWS and block_gemv.enabled() and block_gemv.serves(self.n, self.k)


class TorchMXFP8Linear(_ScaledLinear):
    """mxfp8 weights x MXFP8 activations (E8M0 per 32 along K), capability 10.x."""

    def _validate(self, weight_scale: Any, **_: Any) -> None:
        kb = self.k // quantize.MX_BLOCK
        e8m0 = getattr(torch, "float8_e8m0fnu", torch.uint8)
        check_tensor("weight_scale", weight_scale, dtypes=(torch.uint8, e8m0), shapes=[[self.n, kb]],
                     why="one E8M0 byte per 32 weights along K, [N, K/32]")
        if bool((weight_scale.view(torch.uint8) == 0xFF).any()):
            raise TensorError("weight_scale", "E8M0 scales (0xFF is NaN)", "a 0xFF byte")

    def _prepare(self, weight_scale: Any, **_: Any) -> None:
        e8m0 = getattr(torch, "float8_e8m0fnu", torch.uint8)
        self.sw = gemm.swizzle_128x4(weight_scale.to(self.device).view(torch.uint8).view(e8m0))

    def _gemm(self, x2: torch.Tensor) -> torch.Tensor:
        xq, sx = quantize.mxfp8(x2)
        sa = gemm.swizzle_128x4(sx.view(torch.float8_e8m0fnu))
        return gemm.mx_blockwise(xq, self.w_t, sa, self.sw, "mxfp8", self.dtype)


class TorchNVFP4Linear(_ScaledLinear):
    """nvfp4 weights x NVFP4 activations (E4M3 per 16 times a global scale), capability 10.x.

    The GEMM applies the block scales (bf16 out); the two global scales multiply its result in fp32.
    """

    weight_dtype = torch.uint8
    packed_k_divisor = 2

    def _validate(self, weight_scale: Any, weight_global_scale: Any, input_global_scale: Any, **_: Any) -> None:
        check_tensor("weight_scale", weight_scale, dtypes=(torch.float8_e4m3fn,),
                     shapes=[[self.n, self.k // quantize.NV_BLOCK]], why="one E4M3 scale per 16 weights along K")
        check_scales("weight_scale", weight_scale, sign="non-negative")
        if weight_global_scale is None:
            raise TensorError("weight_global_scale", "a tensor (required for nvfp4 weights)", "None")
        _scalar_scale("weight_global_scale", weight_global_scale)
        if input_global_scale is not None:
            _scalar_scale("input_global_scale", input_global_scale)

    def _prepare(self, weight_scale: Any, weight_global_scale: Any, input_global_scale: Any, **_: Any) -> None:
        self.gw = weight_global_scale.to(self.device).reshape(())
        self.ga = None if input_global_scale is None else input_global_scale.to(self.device).reshape(())
        self.w_t = self.w_t.view(torch.float4_e2m1fn_x2)   # same bytes, two E2M1 codes each
        self.sw = gemm.swizzle_128x4(weight_scale.to(self.device))

    def _gemm(self, x2: torch.Tensor) -> torch.Tensor:
        packed, bs, ga = quantize.nvfp4(x2, self.ga)
        a = packed.view(torch.float4_e2m1fn_x2)
        y = gemm.mx_blockwise(a, self.w_t, gemm.swizzle_128x4(bs), self.sw, "nvfp4", torch.bfloat16)
        return (y.float() * (ga * self.gw)).to(self.dtype)
