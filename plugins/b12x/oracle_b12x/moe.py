"""b12x fused tensor-parallel MoE (SM120/SM121), through b12x's tensor-based planned API.

process_weights: checks every tensor against the layer, canonicalises FP4 zero signs,
reorders [gate; up] to [up; gate] for the w13 modes, swizzles NVFP4 block scales,
then `fused_moe.plan_weights` + `prepare_weights` once; a reload with the same layout
copies into the previous storage (captured CUDA graphs stay valid); when b12x says the
source parameters are no longer needed, caller nn.Parameters are emptied.
apply: one plan (and one uint8 scratch arena) per power-of-two token capacity, made
before capture (warmup_units), then `fused_moe.bind` + `fused_moe.run`.

process_weights may rewrite the caller's tensors in place (FP4 negative zeros; b12x's
own W31 row flip and in-place repacks, as its storage policy says): hand it tensors
that no other kernel will read afterwards.
"""
from __future__ import annotations

from functools import partial
from typing import Any, Hashable

from oracle.errors import CaptureError, InputError
from oracle.formats import CODEC_BLOCKS, MX_BLOCK, NV_BLOCK, torch_dtype
from oracle.kernel import Kernel
from oracle.warmup import WarmupUnit, is_capturing

from . import mapping
from .common import (PlanCache, canonicalize_fp4_zero_signs_, capacities, capacity, check_tensor, per_expert,
                     refuse_during_capture, release_sources, reuse_packed_storage, swap_gate_up)
from .library import B12xUnavailableError, attr, enum_has, has, load


_FP4_SCALE_GROUP = {"modelopt_nvfp4": NV_BLOCK, "fp4_e8m0_k32": MX_BLOCK}
_CODECS = CODEC_BLOCKS

#: signature -> (plan, scratch), shared by every layer of the same signature (one warmup
#: unit per signature, as oracle.warmup de-duplicates); and the signatures already run once.
_PLANS = PlanCache()     # signature -> (b12x plan, its uint8 scratch)


def _fm(name: str) -> Any:
    """`b12x.moe.fused_moe.<name>`, or the clear error saying this b12x lacks it."""
    return attr(load("moe.fused_moe"), name, "b12x fused MoE")


def clear_plans() -> None:
    _PLANS.clear()


class B12xMoE(Kernel):
    experts: Any = None          # b12x B12XFP4ExpertWeights (what bind() takes)
    weight_plan: Any = None      # b12x MoEWeightPreparationPlan

    def __init__(self, layer: Any, mode: Any, spec: Any):
        super().__init__(layer, mode, spec)
        p = mode.params
        self.quant_mode, self.source_format, self.w13_layout = p["quant_mode"], p["source_format"], p["w13_layout"]
        self.e, self.h, self.k = layer.num_experts, layer.hidden_size, layer.top_k
        self.i = layer.intermediate_size // layer.tp_size
        self.gated = layer.activation != "relu2_no_mul"
        self.rows13 = 2 * self.i if self.gated else self.i
        self.activation = mapping.b12x_activation(layer.activation)
        self.swiglu = mapping.swiglu_args(layer.activation, layer.activation_params)
        self.owner = f"{spec.name} layer {layer.name!r}" if layer.name else spec.name
        self.source_released = False

    # ---- weights ------------------------------------------------------------------------
    def process_weights(self, w13: Any = None, w2: Any = None, w13_scale: Any = None, w2_scale: Any = None,
                        w13_global_scale: Any = None, w2_global_scale: Any = None,
                        w13_input_scale: Any = None, w2_input_scale: Any = None,
                        w13_bias: Any = None, w2_bias: Any = None) -> None:
        refuse_during_capture(f"{self.owner}: preparing b12x MoE weights")
        for name, bias in (("w13_bias", w13_bias), ("w2_bias", w2_bias)):
            if bias is not None:
                raise InputError("kernel does not support expert biases", source=self.owner, field=name)
        if self.source_format in _CODECS:
            plan, experts = self._prepare_codec(w13, w2, w13_scale, w2_scale)
        else:
            plan, experts = self._prepare_fp4(w13, w2, w13_scale, w2_scale, w13_global_scale,
                                              w2_global_scale, w13_input_scale, w2_input_scale)
        kept, _ = reuse_packed_storage(self.experts, experts)  # plans are keyed by shape, not storage
        self.experts, self.weight_plan = kept, plan
        if getattr(plan, "discards_source_parameters", False):
            release_sources((w13, w2, w13_scale, w2_scale))
            self.source_released = True

    def _prepare_fp4(self, w13, w2, s13, s2, g13, g2, a13, a2):
        import torch

        group = _FP4_SCALE_GROUP[self.source_format]
        nvfp4 = self.source_format == "modelopt_nvfp4"
        scale_dtypes = [torch.float8_e4m3fn] if nvfp4 else [torch.uint8, getattr(torch, "float8_e8m0fnu", torch.uint8)]
        scale_what = "E4M3 scales per 16" if nvfp4 else "E8M0 scales per 32"
        e, h, i, rows = self.e, self.h, self.i, self.rows13
        check_tensor(self.owner, "w13", w13, dtypes=[torch.uint8], shape=[e, rows, h // 2],
                     what="packed E2M1 pairs [E, 2I or I, H/2], gate rows first")
        check_tensor(self.owner, "w2", w2, dtypes=[torch.uint8], shape=[e, h, i // 2], what="packed E2M1 [E, H, I/2]")
        check_tensor(self.owner, "w13_scale", s13, dtypes=scale_dtypes, shape=[e, rows, h // group], what=scale_what)
        check_tensor(self.owner, "w2_scale", s2, dtypes=scale_dtypes, shape=[e, h, -(-i // group)], what=scale_what)
        ones = torch.ones(e, dtype=torch.float32)
        if nvfp4:
            g13 = per_expert(self.owner, "w13_global_scale", g13, e, "NVFP4 weight global scale")
            g2 = per_expert(self.owner, "w2_global_scale", g2, e, "NVFP4 weight global scale")
        else:
            g13, g2 = ones, ones
        if self.quant_mode in ("nvfp4", "w4a8_nvfp4"):
            # b12x takes the reciprocal (quantization-direction) activation scale.
            a13 = 1.0 / per_expert(self.owner, "w13_input_scale", a13, e, "activation scale, needed for W4A4/W4A8")
            a2 = 1.0 / per_expert(self.owner, "w2_input_scale", a2, e, "activation scale, needed for W4A4/W4A8")
        else:
            a13, a2 = ones, ones
        if not w13.is_cuda:
            raise InputError("b12x prepares experts on the GPU: expected a CUDA tensor", source=self.owner,
                             field="w13")
        device = w13.device
        g13, g2, a13, a2 = (t.to(device) for t in (g13, g2, a13, a2))
        w13, w2 = canonicalize_fp4_zero_signs_(w13.contiguous()), canonicalize_fp4_zero_signs_(w2.contiguous())
        s13, s2 = s13.contiguous(), s2.contiguous()
        if self.w13_layout == "w13" and self.gated:
            w13, s13 = swap_gate_up(w13, i), swap_gate_up(s13, i)
        if nvfp4:
            swizzle = attr(load("_lib.intrinsics"), "swizzle_block_scale", "NVFP4 scale swizzling")
            s13, s2 = swizzle(s13), swizzle(s2)
        dtype = torch_dtype(self.layer.dtype)
        plan = self._call(_fm("plan_weights"), quant_modes=self.quant_mode, source_format=self.source_format,
                          activation=self.activation, params_dtype=dtype, num_experts=e, hidden_size=h,
                          intermediate_size=i, w13_layout=self.w13_layout)
        experts = self._call(_fm("prepare_weights"), plan=plan, params_dtype=dtype,
                             w1_fp4=w13, w1_blockscale=s13, w1_global_scale=g13, a1_gscale=a13,
                             w2_fp4=w2, w2_blockscale=s2, w2_global_scale=g2, a2_gscale=a2)
        return plan, experts

    def _prepare_codec(self, w13, w2, s13, s2):
        import torch

        block, nbytes = _CODECS[self.source_format]
        if s13 is not None or s2 is not None:
            raise InputError(f"{self.source_format} scales are embedded in its blocks; pass no w13_scale/w2_scale",
                             source=self.owner, field="w13_scale")
        e, h, i = self.e, self.h, self.i
        check_tensor(self.owner, "w13", w13, dtypes=[torch.uint8], shape=[e, self.rows13, h // block, nbytes],
                     what=f"GGML {self.source_format} blocks [E, 2I or I, H/{block}, {nbytes}], gate rows first")
        check_tensor(self.owner, "w2", w2, dtypes=[torch.uint8], shape=[e, h, i // block, nbytes],
                     what=f"GGML {self.source_format} blocks [E, H, I/{block}, {nbytes}]")
        if not w13.is_cuda:
            raise InputError("b12x prepares experts on the GPU: expected a CUDA tensor", source=self.owner,
                             field="w13")
        if not enum_has(_fm("PackedSourceFormat"), self.source_format):
            raise B12xUnavailableError(f"this b12x has no {self.source_format} MoE source format")
        weights_type = _fm("BlockQuantWeights" if has(load("moe.fused_moe"), "BlockQuantWeights") else "IQ2XSWeights")
        plan = self._call(
            _fm("plan_weights"),
            source=_fm("PackedSource")(format=self.source_format, w13_layout=self.w13_layout),
            activation=_fm("ActivationSpec")(mode="a16", nonlinearity=self.activation,
                                         io_dtype=torch_dtype(self.layer.dtype)),
            geometry=_fm("MoEGeometry")(num_experts=e, hidden_size=h, intermediate_size=i))
        prepared = self._call(_fm("prepare_weights"), plan=plan,
                              weights=weights_type(w13=w13.contiguous(), w2=w2.contiguous(), codec=self.source_format))
        return plan._impl, prepared._impl

    def _call(self, fn, **kwargs):
        try:
            return fn(**kwargs)
        except (ValueError, TypeError, NotImplementedError) as exc:
            raise InputError(f"b12x rejects this MoE layer at preparation: {exc}", source=self.owner,
                             field=f"{self.mode.name} E={self.e} H={self.h} I={self.i}") from None

    # ---- planning -----------------------------------------------------------------------
    def _signature(self, cap: int) -> Hashable:
        limit, alpha, beta = self.swiglu
        return (str(self.experts.w1_fp4.device) if self.experts is not None else None,
                self.quant_mode, self.source_format, self.w13_layout, self.e, self.h, self.i, self.k,
                self.activation, self.layer.apply_router_weight_on_input, limit, alpha, beta, self.layer.dtype, cap)

    def _plan_for(self, cap: int, *, running: bool = False) -> tuple[Any, Any]:
        return _PLANS.get(self._signature(cap), partial(self._make_plan, cap), owner=self.owner,
                          what=f"{cap} tokens", running=running)

    def _make_plan(self, cap: int) -> tuple[Any, Any]:
        import torch
        limit, alpha, beta = self.swiglu
        device = self.experts.w1_fp4.device
        caps = self._call(_fm("Caps"), max_tokens=cap, num_topk=self.k, device=device,
                          weight_plan=self.weight_plan, quant_mode=self.quant_mode,
                          core_token_counts=(cap,), route_num_experts=0,
                          apply_router_weight_on_input=self.layer.apply_router_weight_on_input,
                          swiglu_limit=limit, swiglu_alpha=alpha, swiglu_beta=beta)
        plan = _fm("plan")(caps)
        specs = tuple(plan.scratch_specs())
        if len(specs) != 1 or specs[0].dtype != torch.uint8:
            raise B12xUnavailableError(f"expected one uint8 b12x MoE scratch buffer, got {specs}")
        return plan, torch.empty(int(specs[0].nbytes), dtype=torch.uint8, device=device)

    # ---- running ------------------------------------------------------------------------
    def apply(self, hidden_states: Any, topk_weights: Any, topk_ids: Any) -> Any:
        import torch

        if self.experts is None:
            raise RuntimeError(f"{self.owner}: call process_weights before apply")
        m = hidden_states.shape[0] if hidden_states.ndim == 2 else -1
        check_tensor(self.owner, "hidden_states", hidden_states, dtypes=[torch_dtype(self.layer.dtype)],
                     shape=[m, self.h], what=f"[M, {self.h}] activations")
        check_tensor(self.owner, "topk_ids", topk_ids, dtypes=[torch.int32, torch.int64], shape=[m, self.k],
                     what=f"[M, {self.k}] expert ids")
        check_tensor(self.owner, "topk_weights", topk_weights,
                     dtypes=[torch.float32, torch.bfloat16, torch.float16], shape=[m, self.k],
                     what=f"[M, {self.k}] router weights")
        ids, weights = topk_ids, topk_weights
        if not ids.is_contiguous() or not weights.is_contiguous() or weights.dtype != torch.float32:
            if is_capturing():
                raise CaptureError(f"{self.owner}: topk_ids/topk_weights must be contiguous int and fp32 during "
                                   "CUDA-graph capture (converting them would allocate)")
            ids, weights = ids.contiguous(), weights.to(torch.float32).contiguous()
        return self._run(hidden_states.contiguous(), weights, ids, running=True)

    def _run(self, x, weights, ids, *, running: bool = False):
        import torch

        cap = capacity(x.shape[0])
        plan, scratch = self._plan_for(cap, running=running)
        out = torch.empty_like(x)
        binding = _fm("bind")(plan, scratch=scratch, a=x, experts=self.experts, topk_weights=weights,
                              topk_ids=ids, output=out, input_scales_static=True,
                              unit_scale_contract=self.quant_mode == "w4a16")
        result = _fm("run")(binding=binding)
        return out if result is None else result

    def warmup_units(self, token_counts) -> list:
        return [WarmupUnit(kernel=self.spec.name, signature=self._signature(cap), run=partial(self._warm, cap))
                for cap in capacities(token_counts)]

    def _warm(self, cap: int) -> None:
        """One launch with zero activations and ids arange(k) % E (weights 1/k), as b12x's tests do."""
        import torch

        device = self.experts.w1_fp4.device
        x = torch.zeros(cap, self.h, dtype=torch_dtype(self.layer.dtype), device=device)
        ids = (torch.arange(self.k, device=device, dtype=torch.int32) % self.e).expand(cap, self.k).contiguous()
        weights = torch.full((cap, self.k), 1.0 / self.k, dtype=torch.float32, device=device)
        self._run(x, weights, ids)
        _PLANS.mark_warmed(self._signature(cap))
