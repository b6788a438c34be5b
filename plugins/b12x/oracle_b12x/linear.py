"""b12x dense linear kernels: y = x W^T (+ b) on SM120/SM121.

One class per b12x entry point. Each packs the checkpoint tensors once
(`process_weights`), plans one b12x declaration per power-of-two row capacity
(shared by every layer of the same shape, like b12x's own heuristic plans), warms
each plan before CUDA-graph capture and only runs during capture.
"""
from __future__ import annotations

from functools import partial
from typing import Any, Hashable

from oracle.errors import InputError
from oracle.formats import E4M3_MAX, torch_dtype
from oracle.kernel import Kernel
from oracle.warmup import WarmupUnit

from . import mapping
from .common import (PlanCache, canonicalize_fp4_zero_signs_, capacities, capacity, check_scalar, check_tensor,
                     refuse_during_capture, reuse_packed_storage)
from .library import B12xUnavailableError, attr, has, load


#: (kernel, signature) -> b12x plan, shared across layers.
_PLANS = PlanCache()


def clear_plans() -> None:
    """Forget every shared plan (tests, or a device change)."""
    _PLANS.clear()


class B12xLinear(Kernel):
    """Shared lifecycle; subclasses say how to validate, pack, plan and run."""

    module = "gemm.blockscaled"
    packed: Any = None
    bias: Any = None

    def __init__(self, layer: Any, mode: Any, spec: Any):
        super().__init__(layer, mode, spec)
        self.k, self.n = layer.in_features, layer.out_features
        self.owner = f"{spec.name} layer {layer.name!r}" if layer.name else spec.name
        self.dtype_name = layer.dtype

    # ---- lifecycle -------------------------------------------------------------------
    def process_weights(self, weight: Any = None, weight_scale: Any = None, weight_global_scale: Any = None,
                        input_scale: Any = None, input_global_scale: Any = None,
                        weight_zero_point: Any = None, bias: Any = None) -> None:
        refuse_during_capture(f"{self.owner}: process_weights")
        if weight_zero_point is not None:
            raise InputError(f"b12x {self.mode.weight} weights have no zero point", source=self.owner,
                             field="weight_zero_point")
        packed = self._pack(weight=weight, weight_scale=weight_scale, weight_global_scale=weight_global_scale,
                            input_scale=input_scale, input_global_scale=input_global_scale)
        self.packed, changed = reuse_packed_storage(self.packed, packed)
        if changed:
            _forget_plans(self.spec.name, self._layer_key())
        self.bias = self._bias(bias)

    def apply(self, x: Any) -> Any:
        import torch

        if self.packed is None:
            raise RuntimeError(f"{self.owner}: call process_weights before apply")
        if not isinstance(x, torch.Tensor) or x.shape[-1] != self.k:
            raise InputError(f"expected a tensor [..., {self.k}]", source=self.owner, field="x")
        x2 = x.reshape(-1, self.k)
        if not x2.is_contiguous():
            x2 = x2.contiguous()
        plan = self._plan_for(capacity(x2.shape[0]), running=True)
        out = self._run(x2, plan)
        return out.reshape(*x.shape[:-1], self.n)

    def warmup_units(self, token_counts) -> list:
        return [WarmupUnit(kernel=self.spec.name, signature=self._signature(cap), run=partial(self._warm, cap))
                for cap in capacities(token_counts)]

    # ---- planning --------------------------------------------------------------------
    def _layer_key(self) -> Hashable:
        device = str(self._device()) if self.packed is not None else None
        return (self.mode.name, self.k, self.n, self.dtype_name, device)

    def _signature(self, cap: int) -> Hashable:
        return (*self._layer_key(), cap)

    def _plan_for(self, cap: int, *, running: bool = False) -> Any:
        return _PLANS.get((self.spec.name, self._signature(cap)), partial(self._make_plan, cap),
                          owner=self.owner, what=f"{cap} rows", running=running)

    def _make_plan(self, cap: int) -> Any:
        query, fixed = mapping.dense_query_args(self.layer, self.mode, tokens=cap)
        query.update(self._query_overrides())
        module = load(self.module)
        make = attr(module, "FixedBlockscaledQuery" if fixed else "BlockscaledQuery", "GEMM planning")
        try:
            plan = attr(module, "plan", "GEMM planning")(make(**query))
            _validate_now(plan, self._device())
            return plan
        except (ValueError, TypeError) as exc:
            raise InputError(f"b12x rejects this layer at plan time: {exc}", source=self.owner,
                             field=f"{self.mode.name} K={self.k} N={self.n}") from None

    def _query_overrides(self) -> dict:
        return {}

    def _warm(self, cap: int) -> None:
        import torch

        x = torch.zeros(cap, self.k, dtype=torch_dtype(self.dtype_name), device=self._device())
        self._run(x, self._plan_for(cap, running=True))

    # ---- pieces subclasses provide ------------------------------------------------------
    def _pack(self, **tensors: Any) -> Any:
        raise NotImplementedError

    def _run(self, x2: Any, plan: Any) -> Any:
        raise NotImplementedError

    def _device(self) -> Any:
        raise NotImplementedError

    def _bias(self, bias: Any) -> Any:
        if bias is None:
            return None
        return check_tensor(self.owner, "bias", bias, dtypes=[torch_dtype(self.dtype_name)], shape=[self.n],
                            what=f"one {self.dtype_name} value per output feature").to(self._device())

    def _check_cuda(self, name: str, tensor: Any) -> None:
        if not tensor.is_cuda:
            raise InputError("b12x packs weights on the GPU: expected a CUDA tensor", source=self.owner, field=name)


class B12xTensorFP8Linear(B12xLinear):
    """Static per-tensor FP8 (W8A8): activations quantized with the checkpoint's input scale."""

    module = "gemm.tensor_fp8_linear"

    def _pack(self, weight, weight_scale, input_scale, **_):
        import torch

        check_tensor(self.owner, "weight", weight, dtypes=[torch.float8_e4m3fn], shape=[self.n, self.k],
                     what="E4M3 values [N, K]")
        w_scale = check_scalar(self.owner, "weight_scale", weight_scale, "one fp32 weight scale per tensor")
        if input_scale is None:
            raise InputError("b12x tensor FP8 needs a static per-tensor activation scale; this checkpoint has "
                             "dynamic activation scales", source=self.owner, field="input_scale")
        self.input_scale = check_scalar(self.owner, "input_scale", input_scale, "one fp32 activation scale")
        self._check_cuda("weight", weight)
        self.input_scale = self.input_scale.to(weight.device)
        tensor_fp8 = load(self.module)
        output_scale = (self.input_scale * w_scale.to(weight.device)).reshape(())
        return attr(tensor_fp8, "pack_weight", "tensor FP8 packing")(weight.contiguous(), output_scale)

    def _query_overrides(self) -> dict:
        return {"padded_in_features": self.packed.padded_in_features}

    def _run(self, x2, plan):
        import torch

        xq = (x2.float() / self.input_scale).clamp_(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
        tensor_fp8 = load(self.module)
        mm = attr(tensor_fp8, "mm", "tensor FP8 GEMM")
        return mm(xq, self.packed, plan=plan, bias=self.bias, out_dtype=torch_dtype(self.dtype_name))

    def _device(self):
        return self.input_scale.device


class B12xBlockFP8Linear(B12xLinear):
    """128x128 block FP8 weights, activations quantized per 1x128 group here, b12x's serialized GEMM."""

    def _pack(self, weight, weight_scale, **_):
        import torch

        check_tensor(self.owner, "weight", weight, dtypes=[torch.float8_e4m3fn], shape=[self.n, self.k],
                     what="E4M3 values [N, K]")
        shape = [self.n // 128, self.k // 128]
        scale = check_tensor(self.owner, "weight_scale", weight_scale,
                             dtypes=[torch.float32, torch.uint8, getattr(torch, "float8_e8m0fnu", torch.uint8)],
                             shape=shape, what="one fp32 (or UE8M0) scale per 128x128 block")
        self._check_cuda("weight", weight)
        if scale.dtype != torch.float32:  # b12x takes fp32 block scales: decode UE8M0 (2^(e-127)) once
            scale = torch.exp2(scale.view(torch.uint8).to(torch.float32) - 127.0)
        return (weight.contiguous(), scale.to(weight.device).contiguous())

    def _run(self, x2, plan):
        import torch

        m = x2.shape[0]
        groups = x2.float().view(m, self.k // 128, 128)
        a_scale = groups.abs().amax(dim=-1).clamp_(min=1e-12) / E4M3_MAX
        xq = (groups / a_scale.unsqueeze(-1)).clamp_(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn).view(m, self.k)
        weight, w_scale = self.packed
        mm_block_fp8 = attr(load(self.module), "mm_block_fp8", "block FP8 GEMM")
        out = mm_block_fp8(xq, a_scale.contiguous(), weight, w_scale, plan=plan,
                           out_dtype=torch_dtype(self.dtype_name))
        return out if self.bias is None else out.add_(self.bias)

    def _device(self):
        return self.packed[0].device


class B12xMXFP8Linear(B12xLinear):
    """MXFP8 weights, BF16 activations quantized inside b12x (W8A8) or kept in BF16 (W8A16)."""

    def _pack(self, weight, weight_scale, **_):
        import torch

        check_tensor(self.owner, "weight", weight, dtypes=[torch.float8_e4m3fn], shape=[self.n, self.k],
                     what="E4M3 values [N, K]")
        check_tensor(self.owner, "weight_scale", weight_scale,
                     dtypes=[torch.uint8, getattr(torch, "float8_e8m0fnu", torch.uint8)],
                     shape=[self.n, self.k // 32], what="one E8M0 scale per 32 values along K")
        self._check_cuda("weight", weight)
        return attr(load(self.module), "pack_weight", "MXFP8 packing")(weight.contiguous(), weight_scale.contiguous())

    def _query_overrides(self) -> dict:
        return {"padded_in_features": self.packed.padded_in_features}

    def _run(self, x2, plan):
        return attr(load(self.module), "mm", "packed MXFP8 GEMM")(x2, self.packed, plan=plan, bias=self.bias)

    def _device(self):
        return self.packed.weight.values.device if has(self.packed, "weight") else self.packed.values.device


class B12xNVFP4Linear(B12xLinear):
    """NVFP4 weights: W4A4 (activations quantized inside b12x with the checkpoint's scale) or W4A16."""

    def _pack(self, weight, weight_scale, weight_global_scale, input_global_scale, **_):
        import torch

        check_tensor(self.owner, "weight", weight, dtypes=[torch.uint8], shape=[self.n, self.k // 2],
                     what="packed E2M1 pairs [N, K/2], low nibble = even k")
        check_tensor(self.owner, "weight_scale", weight_scale, dtypes=[torch.float8_e4m3fn],
                     shape=[self.n, self.k // 16], what="one E4M3 scale per 16 values along K")
        g = check_scalar(self.owner, "weight_global_scale", weight_global_scale, "the fp32 weight global scale")
        self.activation_scale = None
        if self.mode.params.get("activation_mode") == "quantized":
            a = check_scalar(self.owner, "input_global_scale", input_global_scale,
                             "the checkpoint's activation scale (ModelOpt input_scale), needed for W4A4")
            self.activation_scale = (1.0 / a).to(weight.device)  # b12x multiplies before rounding
        self._check_cuda("weight", weight)
        blockscaled = load(self.module)
        intrinsics = load("_lib.intrinsics")
        values = canonicalize_fp4_zero_signs_(weight.contiguous())
        scales = attr(intrinsics, "swizzle_block_scale", "NVFP4 scale swizzling")(weight_scale.contiguous())
        if self.serialized:
            # fp16 W4A4: b12x's serialized GEMM on operands quantized here; alpha undoes both global scales.
            self.alpha = (a * g).to(device=weight.device, dtype=torch.float32).reshape(1)
            return values, scales
        pack = attr(blockscaled, "pack_weight", "NVFP4 packing")
        return pack(values, scales, recipe="nvfp4", global_scale=g.to(weight.device),
                    global_scale_kind="multiplier")

    @property
    def serialized(self) -> bool:
        """fp16 W4A4 runs b12x's serialized NVFP4 GEMM (its BF16 precision contract has no fp16 path)."""
        return mapping.is_fixed_contract(self.layer, self.mode)

    def _run(self, x2, plan):
        import torch

        if self.serialized:
            values, scales = self.packed
            xq, xs = quantize_nvfp4_activations(x2, self.activation_scale)
            mm_nvfp4 = attr(load(self.module), "mm_nvfp4", "serialized NVFP4 GEMM")
            out = mm_nvfp4(xq, xs, values, scales, self.alpha, plan=plan, out_dtype=torch.float16)
            return out if self.bias is None else out.add_(self.bias)
        mm = attr(load(self.module), "mm", "packed NVFP4 GEMM")
        if self.activation_scale is None:
            return mm(x2, self.packed, plan=plan, bias=self.bias)
        return mm(x2, self.packed, plan=plan, bias=self.bias,
                              activation_global_scale=self.activation_scale)

    def _device(self):
        return self.packed[0].device if self.serialized else self.packed.values.device


def quantize_nvfp4_activations(x2: Any, inverse_scale: Any) -> tuple[Any, Any]:
    """[M, K] activations -> (packed E2M1 uint8 [M, K/2], swizzled E4M3 scale view) with b12x's own
    pure-torch quantizer (`inverse_scale` multiplies before rounding, as b12x's global scales do)."""
    import torch

    quantize = attr(load("_lib.intrinsics"), "quantize_grouped_nvfp4_torch", "NVFP4 activation quantization")
    m, k = x2.shape
    packed, scales = quantize(x2.unsqueeze(0), torch.tensor([m], device=x2.device), inverse_scale.reshape(1))
    return packed.view(m, k // 2), scales


class B12xMXFP4Linear(B12xLinear):
    """MXFP4 weights with dynamic MXFP4 activations (flashinfer's quantizer), b12x's serialized GEMM."""

    def _pack(self, weight, weight_scale, **_):
        import torch

        check_tensor(self.owner, "weight", weight, dtypes=[torch.uint8], shape=[self.n, self.k // 2],
                     what="packed E2M1 pairs [N, K/2], low nibble = even k")
        check_tensor(self.owner, "weight_scale", weight_scale,
                     dtypes=[torch.uint8, getattr(torch, "float8_e8m0fnu", torch.uint8)],
                     shape=[self.n, self.k // 32], what="one E8M0 scale per 32 values along K")
        self.quantize = mxfp4_quantizer()
        self._check_cuda("weight", weight)
        intrinsics = load("_lib.intrinsics")
        values = canonicalize_fp4_zero_signs_(weight.contiguous())
        scales = weight_scale.contiguous()
        if hasattr(torch, "float8_e8m0fnu"):
            scales = scales.view(torch.float8_e8m0fnu)
        return values, attr(intrinsics, "swizzle_block_scale", "MXFP4 scale swizzling")(scales)

    def _run(self, x2, plan):
        values, scales = self.packed
        xq, xs = self.quantize(x2)
        mm_mxfp4 = attr(load(self.module), "mm_mxfp4", "serialized MXFP4 GEMM")
        out = mm_mxfp4(xq, xs, values, scales, plan=plan, out_dtype=torch_dtype(self.dtype_name))
        return out if self.bias is None else out.add_(self.bias)

    def _device(self):
        return self.packed[0].device


def mxfp4_quantizer():
    """flashinfer's MXFP4 activation quantizer -> fn(x) = (packed uint8, swizzled E8M0 scales)."""
    import importlib

    try:
        flashinfer = importlib.import_module("flashinfer")
    except Exception as exc:
        raise B12xUnavailableError(
            "b12x MXFP4 linear quantizes activations with flashinfer, which is not importable "
            f"({type(exc).__name__}: {exc}); pip install 'oracle-b12x[mxfp4]'") from None
    quantize = getattr(flashinfer, "mxfp4_quantize", None)
    if quantize is None:
        raise B12xUnavailableError("this flashinfer has no mxfp4_quantize; pip install -U flashinfer-python")

    def run(x):
        import torch

        packed, scales = quantize(x)
        if scales.dtype == torch.uint8 and hasattr(torch, "float8_e8m0fnu"):
            scales = scales.view(torch.float8_e8m0fnu)
        return packed, scales
    return run


class B12xCodecLinear(B12xLinear):
    """GGML block codecs (IQ2_XS, IQ2_XXS, Q8_0) with BF16 activations (A16)."""

    def _pack(self, weight, weight_scale, weight_global_scale, **_):
        import torch

        block, nbytes = self.mode.params["block_weights"], self.mode.params["block_bytes"]
        if weight_scale is not None or weight_global_scale is not None:
            raise InputError(f"{self.mode.weight} scales are embedded in its blocks; pass no weight_scale",
                             source=self.owner, field="weight_scale")
        if isinstance(weight, torch.Tensor) and weight.ndim != 3:
            raise InputError(f"b12x serves {self.mode.weight} matrices only; quantized normalization weights and "
                             f"other packed vectors ({weight.ndim}-D) are not supported: expected "
                             f"[N, K/{block}, {nbytes}]", source=self.owner, field="weight")
        check_tensor(self.owner, "weight", weight, dtypes=[torch.uint8], shape=[self.n, self.k // block, nbytes],
                     what=f"GGML {self.mode.weight} blocks [N, K/{block}, {nbytes}]")
        self._check_cuda("weight", weight)
        pack = attr(load(self.module), "pack_weight", f"{self.mode.weight} packing")
        return pack(weight.contiguous(), recipe=self.mode.weight)

    def _run(self, x2, plan):
        return attr(load(self.module), "mm", f"{self.mode.weight} GEMM")(x2, self.packed, plan=plan, bias=self.bias)

    def _device(self):
        for name in ("values", "blocks", "weight"):
            t = getattr(self.packed, name, None)
            if t is not None and hasattr(t, "device"):
                return t.device
        raise RuntimeError(f"{self.owner}: cannot find the packed weight's device")


def _validate_now(plan: Any, device: Any) -> None:
    """Run the plan's own query/config validation now: a b12x Plan is a declaration that
    b12x would otherwise only validate when first prepared (possibly during capture)."""
    contract = getattr(plan, "contract", None)
    if contract is None or not hasattr(contract, "configure"):
        return                                   # another b12x layout: it validates later itself
    prep = load("preparation")
    identity = prep.detect_device(device).identity if has(prep, "detect_device") else None
    contract.configure(plan.query, device=identity, search=False)


def _forget_plans(kernel: str, layer_key: Hashable) -> None:
    """Plans hold no weight storage, but warmed launches may; re-warm after storage moved."""
    _PLANS.forget_warmed(lambda k: not (k[0] == kernel and k[1][:len(layer_key)] == layer_key))
