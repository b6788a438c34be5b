"""Ask b12x's own pure-Python planners whether they accept a layer in a mode.

Used by the opt-in `can_implement` hook (ORACLE_B12X_PLANNER_CHECK=1) and as the
reference of tests/test_conformance.py. Runs on CPU: no tensor is allocated and
nothing is compiled. The calls are the ones the kernels make at preparation time
(reference sections 3.2, 3.4 and 5.2):

  MoE     fused_moe.plan_weights (canonical) -> fused_moe.Caps (decode-config
          selection and SwiGLU parameter checks) -> plan_tp_moe_execution, with
          route_num_experts=0 as the kernel plans it (external routing: no native
          route program, so no 1024-expert limit)
  linear  blockscaled TUNING / FIXED_TUNING .configure(query, device=SM120 identity)
  embed   sequence.embedding EmbeddingQuery validation
"""
from __future__ import annotations

from typing import Any

from oracle.formats import CODEC_BLOCKS, torch_dtype

from . import mapping
from .library import load


#: A made-up SM120 identity: the planners' device-dependent rules (A16 needs SM12x) need one.
SM120 = {"vendor": "nvidia", "compute_capability": (12, 0), "sm_count": 188,
         "product_name": "NVIDIA RTX PRO 6000 Blackwell (simulated)"}
_PLANNED_TOKENS = 256
_REJECTED = (ValueError, TypeError, NotImplementedError, KeyError)


def planner_reason(layer: Any, mode: Any) -> str | None:
    """None when b12x's planners accept (layer, mode), else b12x's own message."""
    check = {"moe": _moe, "linear": _linear, "embedding": _embedding}[layer.op]
    try:
        check(layer, mode)
    except _REJECTED as exc:
        return f"b12x planner rejects it: {exc}"
    return None


def _device_identity():
    prep = load("preparation")
    return prep.DeviceIdentity(**SM120)


# ---------------------------------------------------------------------------- MoE
def _moe(layer: Any, mode: Any) -> None:
    fm = load("moe.fused_moe")
    impl = load("moe.fused_moe._impl")
    params = mode.params
    if layer.has_bias:
        raise ValueError("b12x fused_moe has no expert-bias input")
    dtype = torch_dtype(layer.dtype)
    nonlinearity = mapping.b12x_activation(layer.activation)
    per_rank = layer.intermediate_size // layer.tp_size
    weight_plan = fm.plan_weights(
        source=fm.PackedSource(format=params["source_format"], w13_layout=params["w13_layout"]),
        activation=fm.ActivationSpec(mode=mapping.ACTIVATION_MODE[mode.activation], nonlinearity=nonlinearity,
                                     io_dtype=dtype),
        geometry=fm.MoEGeometry(num_experts=layer.num_experts, hidden_size=layer.hidden_size,
                                intermediate_size=per_rank),
    )
    limit, alpha, beta = mapping.swiglu_args(layer.activation, layer.activation_params)
    caps = fm.Caps(max_tokens=_PLANNED_TOKENS, num_topk=layer.top_k, device="cpu", weight_plan=weight_plan._impl,
                   quant_mode=params["quant_mode"], route_num_experts=0,
                   apply_router_weight_on_input=layer.apply_router_weight_on_input,
                   swiglu_limit=limit, swiglu_alpha=alpha, swiglu_beta=beta)
    impl.plan_tp_moe_execution(
        num_tokens=_PLANNED_TOKENS, num_topk=layer.top_k, device="cpu", weight_plan=weight_plan._impl,
        quant_mode=params["quant_mode"], swiglu_limit=limit, swiglu_alpha=alpha, swiglu_beta=beta,
        apply_router_weight_on_input=layer.apply_router_weight_on_input, decode_config=caps.decode_config)
    # No route-query validation: the plugin routes outside b12x (the caller's topk_ids;
    # Caps(route_num_experts=0) prepares no route program), so b12x's native-routing limit of
    # 1024 experts does not apply, exactly as in B12xMoE._make_plan.


# ---------------------------------------------------------------------------- linear
def _linear(layer: Any, mode: Any) -> None:
    query, fixed = mapping.dense_query_args(layer, mode, tokens=_PLANNED_TOKENS)
    tuning = load("gemm.blockscaled._tuning")
    if fixed:
        tuning.FIXED_TUNING.configure(tuning.FixedBlockscaledQuery(**query), device=_device_identity(),
                                      search=False)
    else:
        if layer.dtype != "bfloat16":  # blockscaled._ops.linear: BF16 source, out_dtype None/bf16
            raise ValueError(f"b12x's packed precision contract takes and returns BF16, not {layer.dtype}")
        tuning.TUNING.configure(tuning.BlockscaledQuery(**query), device=_device_identity(), search=False)


# ---------------------------------------------------------------------------- embedding
def _embedding(layer: Any, mode: Any) -> None:
    if layer.dtype != "bfloat16":
        raise ValueError("b12x decodes Q8_0 embedding rows to BF16 only")
    tuning = load("sequence.embedding._tuning")
    width = layer.embedding_dim
    block, nbytes = CODEC_BLOCKS["q8_0"]
    tuning.EmbeddingQuery(max_rows=_PLANNED_TOKENS, table_rows=layer.num_embeddings, width=width,
                          row_stride=-(-width // block) * nbytes, weight_dtype="uint8", id_dtype="int64")
