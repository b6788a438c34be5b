"""Every spelling transformers and model repositories write for the keys the front end reads.

Expert counts, experts per token, shared experts, activations and multi-token-prediction
layers each have several names across model families (num_experts / num_local_experts /
n_routed_experts / moe_num_experts, ...). One reader per quantity accepts them all, rejects
two spellings that disagree, and refuses an expert-looking key it does not understand
instead of reading the model as dense.
"""
from __future__ import annotations

from .source import ConfigView

#: Every spelling transformers (and model repos) write for the keys the front end reads.
EXPERT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts", "num_routed_experts",
               "n_experts")
#: top_k_experts: Gemma 4 (transformers Gemma4TextConfig); moe_top_k: DBRX / Step; n_activated_experts:
#: DeepSeek's own inference ModelArgs; num_activated_experts: Hunyuan/Bailing-style configs.
TOP_K_KEYS = ("num_experts_per_tok", "num_experts_per_token", "experts_per_token", "moe_k", "moe_topk",
              "top_k_experts", "moe_top_k", "n_activated_experts", "num_activated_experts")
#: (`top_k` is a generation setting in transformers configs, default 50: never read as an expert count)
SHARED_COUNT_KEYS = ("n_shared_experts", "num_shared_experts", "moe_num_shared_experts")
#: The width routed experts run at when it is not hidden_size (latent MoE; Kimi-K3's text_config).
LATENT_EXPERT_KEYS = ("routed_expert_hidden_size", "moe_latent_size")
#: The experts' own weight dtype when it differs from the rest of the checkpoint. DeepSeek-V4 writes
#: `expert_dtype` beside an FP8 quantization_config: "fp4" = float4_e2m1fn_x2 with UE8M0 scales per 32
#: (DeepSeek's inference/model.py MoE; vLLM loads it with its MXFP4 MoE method), "fp8" = the checkpoint's
#: block FP8 like every other layer.
EXPERT_DTYPE_KEYS = ("expert_dtype", "experts_dtype", "moe_expert_dtype")
EXPERT_DTYPES = {"fp4": ("mxfp4", 32), "mxfp4": ("mxfp4", 32), "fp8": None}
#: FP8 element-format spellings (transformers' `fmt`, torch dtype names, safetensors names) -> e4m3 / e5m2.
FP8_ELEMENT_FORMATS = {"e4m3": "e4m3", "float8_e4m3fn": "e4m3", "float8_e4m3": "e4m3", "fp8_e4m3": "e4m3",
                       "f8e4m3": "e4m3", "F8_E4M3": "e4m3",
                       "e5m2": "e5m2", "float8_e5m2": "e5m2", "fp8_e5m2": "e5m2", "F8_E5M2": "e5m2"}
ACTIVATION_KEYS = ("hidden_act", "hidden_activation", "activation_function")
MTP_KEYS = ("num_nextn_predict_layers", "mtp_num_hidden_layers", "num_mtp_modules")
#: SiTU's parameters as configs spell them -> the engine's activation_params names.
SITU_PARAMS = {"activation_situ_beta": "beta", "activation_situ_linear_beta": "linear_beta"}
#: Expert-related keys that do not change the layers (routing, losses, training knobs).
_HARMLESS_MOE_KEYS = frozenset({
    "router_aux_loss_coef", "output_router_logits", "norm_topk_prob", "router_jitter_noise", "moe_aux_loss_coeff",
    "aux_loss_alpha", "seq_aux", "topk_method", "n_group", "topk_group", "routed_scaling_factor", "scoring_func",
    "moe_router_activation_func", "num_expert_group", "router_z_loss_coef", "moe_layer_freq",
    "first_k_dense_replace", "decoder_sparse_step", "mlp_only_layers", "moe_gate", "moe_use_aux_free",
    "moe_intermediate_size", "shared_expert_intermediate_size", "moe_layer_start_index", "moe_layer_end_index",
    "moe_layer_interval", "use_routing_bias", "expert_dtype", "moe_renormalize", "router_bias",
    "num_max_dispatch_tokens_per_rank", "moe_capacity", "ep_size", "num_hash_layers", "use_moe_router_bias",
    "moe_router_scaling_factor", "enable_moe_block", "share_expert_dim", "shared_intermediate_size",
    *EXPERT_KEYS, *TOP_K_KEYS, *SHARED_COUNT_KEYS, *EXPERT_DTYPE_KEYS, *LATENT_EXPERT_KEYS,
})
_MOE_LOOKING = ("expert", "moe")


def first_key(cfg: ConfigView, keys: tuple[str, ...]) -> str | None:
    """The one spelling of a key that the config uses; two spellings that disagree are an error."""
    present = [k for k in keys if cfg.raw(k) is not None]
    values = {k: cfg.raw(k) for k in present}
    if len({repr(v) for v in values.values()}) > 1:
        shown = ", ".join(f"{k}={v!r}" for k, v in values.items())
        raise cfg.error(present[1], f"contradictory values for the same quantity ({shown}); expected one value")
    return present[0] if present else None


def expert_count(cfg: ConfigView) -> tuple[int, str]:
    """(routed experts, key) in any spelling; (0, key) when the config has none."""
    key = first_key(cfg, EXPERT_KEYS)
    if key is None:
        return 0, EXPERT_KEYS[0]
    value = cfg.raw(key)
    if isinstance(value, list):   # per-layer lists (Hunyuan): one value for every layer is supported
        if not value or len(set(map(repr, value))) != 1:
            raise cfg.error(key, f"per-layer expert counts that differ are not supported, got {value!r}")
        value = value[0]
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise cfg.error(key, f"expected a non-negative integer, got {value!r}")
    return value, key


def top_k(cfg: ConfigView) -> int:
    key = first_key(cfg, TOP_K_KEYS)
    if key is None:
        raise cfg.error(TOP_K_KEYS[0], "required key is missing; expected the experts per token (top-k)")
    value = cfg.raw(key)
    if isinstance(value, list) and value and len(set(map(repr, value))) == 1:
        value = value[0]
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise cfg.error(key, f"expected a positive integer, got {value!r}")
    return value


def shared_count(cfg: ConfigView) -> int:
    key = first_key(cfg, SHARED_COUNT_KEYS)
    return cfg.int(key, 0, minimum=0) if key else 0


def reject_unknown_moe_keys(cfg: ConfigView, what: str) -> None:
    """A key that looks like it describes experts, with a value, that no reading here understands."""
    for key, value in cfg.data.items():
        if key in _HARMLESS_MOE_KEYS or not any(w in key.lower() for w in _MOE_LOOKING):
            continue
        if value in (None, False, 0, [], {}, ""):
            continue
        raise cfg.error(key, f"this expert/MoE key is not understood for {what}; expected one of "
                        f"{', '.join(EXPERT_KEYS)} (experts) and {', '.join(TOP_K_KEYS)} (top-k): "
                        "reading the model as dense would be a guess")


def expert_dtype(cfg: ConfigView) -> tuple[tuple[str, int] | None, str | None]:
    """((weight format, group size), key) when the config gives the experts their own dtype, else (None, key)."""
    key = first_key(cfg, EXPERT_DTYPE_KEYS)
    if key is None:
        return None, None
    value = cfg.str(key)
    if value not in EXPERT_DTYPES:
        raise cfg.error(key, f"unknown expert dtype {value!r}; expected one of {', '.join(EXPERT_DTYPES)}")
    return EXPERT_DTYPES[value], key


def fp8_element_format(view: ConfigView, key: str = "fmt") -> str:
    """'e4m3' or 'e5m2' from any spelling writers use (float8_e4m3fn, ...); anything else is an error."""
    raw = view.str(key, "e4m3")
    fmt = FP8_ELEMENT_FORMATS.get(raw) or FP8_ELEMENT_FORMATS.get(raw.lower())
    if fmt is None:
        raise view.error(key, f"unknown FP8 element format {raw!r}; expected one of {', '.join(FP8_ELEMENT_FORMATS)}")
    return fmt
