"""Architectures: a text config -> the modules one rank runs, with per-rank shapes.

Choices, applied the same way for every architecture:

- Fusion follows vLLM: q/k/v projections run as one `qkv_proj` GEMM and gate/up
  projections as one `gate_up_proj` GEMM (dense MLPs and shared experts). MLA
  projections (q_a_proj, q_b_proj, kv_a_proj_with_mqa, kv_b_proj, o_proj) are listed
  as the checkpoint names them. Quantization lists are always matched against the
  unfused checkpoint names (`Module.parts`).
- Tensor parallelism (--tp N): column-parallel layers (qkv, gate_up, q_b, kv_b,
  lm_head) split N, row-parallel layers (o_proj, down_proj) split K; q_a_proj,
  kv_a_proj_with_mqa and router gates are replicated. When N exceeds the KV head
  count, each rank keeps one whole KV head (KV heads are replicated), as vLLM does.
  The vocabulary is split in ceil(vocab/N) rows per rank.
- Expert parallelism (--ep N): routed experts are spread over N ranks and each
  expert stays whole (MoE tp_size 1), as vLLM's expert parallelism does; attention
  and dense layers keep --tp.
- Multi-token-prediction layers (num_nextn_predict_layers) and vision towers are not
  listed: they are not part of the decoder's forward pass; the report says so.
- Unknown architectures use a generic reading of the standard keys (GQA attention,
  gated MLP, or routed experts on every layer when an expert count is present); the
  report says the fallback was used.
"""
from __future__ import annotations

from typing import Callable

from ..errors import InputError
from .model import Module
from .source import ConfigView

_ACTIVATIONS = {"silu": "silu", "swish": "silu", "gelu": "gelu", "gelu_pytorch_tanh": "gelu",
                "gelu_new": "gelu", "relu2": "relu2"}


class Builder:
    """Collects modules for one rank; knows --tp/--ep and how each layer kind is split."""

    def __init__(self, cfg: ConfigView, tp: int, ep: int, prefix: str):
        self.cfg = cfg
        self.tp = tp
        self.ep = ep
        self.prefix = prefix
        self.modules: list[Module] = []
        self.notes: list[str] = []
        self.hidden = cfg.int("hidden_size")

    # ---- splitting ----------------------------------------------------------------
    def split(self, n: int, key: str, what: str = "") -> int:
        if n % self.tp:
            raise self.cfg.error(key, f"{what or key} {n} is not divisible by --tp {self.tp}")
        return n // self.tp

    def q_heads(self, key: str = "num_attention_heads") -> int:
        return self.split(self.cfg.int(key), key)

    def kv_heads(self, n_kv: int, key: str = "num_key_value_heads") -> int:
        if n_kv >= self.tp:
            return self.split(n_kv, key)
        if self.tp % n_kv:
            raise self.cfg.error(key, f"{n_kv} KV heads cannot be spread over --tp {self.tp}: "
                                 "expected --tp to divide, or be a multiple of, the KV head count")
        note = (f"--tp {self.tp} exceeds the {n_kv} KV heads: each rank holds one KV head "
                f"(each replicated {self.tp // n_kv} times)")
        if note not in self.notes:
            self.notes.append(note)
        return 1

    # ---- names --------------------------------------------------------------------
    def layer_prefix(self, i: int) -> str:
        return f"{self.prefix}model.layers.{i}"

    # ---- module kinds ---------------------------------------------------------------
    def linear(self, role: str, block: int | None, name: str, parts: list[str], k: int, n: int,
               *, bias: bool = False, sharded: bool = True) -> None:
        self.modules.append(Module(role, "linear", name, tuple(parts), block, {
            "in_features": k, "out_features": n, "has_bias": bias, "tp_size": self.tp if sharded else 1}))

    def moe(self, block: int, name: str, parts: list[str], *, experts: int, top_k: int,
            intermediate: int, keys: tuple[str, str], activation: str = "silu",
            params: dict | None = None, bias: bool = False, router_weight_on_input: bool = False) -> None:
        moe_tp = 1 if self.ep > 1 else self.tp
        if experts % self.ep:
            raise self.cfg.error(keys[0], f"{experts} experts are not divisible by --ep {self.ep}")
        if intermediate % moe_tp:
            raise self.cfg.error(keys[1], f"{keys[1]} {intermediate} is not divisible by --tp {moe_tp}")
        if top_k > experts:
            raise self.cfg.error("num_experts_per_tok", f"top-k {top_k} exceeds the {experts} experts")
        self.modules.append(Module("experts", "moe", name, tuple(parts), block, {
            "num_experts": experts, "top_k": top_k, "hidden_size": self.hidden,
            "intermediate_size": intermediate, "activation": activation,
            "activation_params": params or {}, "has_bias": bias, "tp_size": moe_tp, "ep_size": self.ep,
            "apply_router_weight_on_input": router_weight_on_input}))

    # ---- building blocks --------------------------------------------------------------
    def embeddings(self) -> None:
        vocab = self.cfg.int("vocab_size")
        self.modules.append(Module("embed_tokens", "embedding", f"{self.prefix}model.embed_tokens",
                                   (f"{self.prefix}model.embed_tokens",), None,
                                   {"num_embeddings": -(-vocab // self.tp), "embedding_dim": self.hidden,
                                    "tp_size": self.tp}))

    def lm_head(self) -> None:
        vocab = self.cfg.int("vocab_size")
        name = f"{self.prefix}lm_head"
        self.linear("lm_head", None, name, [name], self.hidden, -(-vocab // self.tp))
        if self.cfg.bool("tie_word_embeddings", False):
            self.notes.append("lm_head is tied to embed_tokens (tie_word_embeddings); it is still its own GEMM")

    def gqa_attention(self, i: int, *, bias_qkv: bool, bias_o: bool) -> None:
        c = self.cfg
        heads = c.int("num_attention_heads")
        head_dim = c.int("head_dim", None) or self._implicit_head_dim(heads)
        q = self.q_heads() * head_dim
        kv = self.kv_heads(c.int("num_key_value_heads", heads)) * head_dim
        p = f"{self.layer_prefix(i)}.self_attn"
        self.linear("qkv_proj", i, f"{p}.qkv_proj", [f"{p}.q_proj", f"{p}.k_proj", f"{p}.v_proj"],
                    self.hidden, q + 2 * kv, bias=bias_qkv)
        self.linear("o_proj", i, f"{p}.o_proj", [f"{p}.o_proj"], q, self.hidden, bias=bias_o)

    def _implicit_head_dim(self, heads: int) -> int:
        if self.hidden % heads:
            raise self.cfg.error("head_dim", f"required key is missing, and hidden_size {self.hidden} is "
                                 f"not divisible by num_attention_heads {heads}")
        return self.hidden // heads

    def mla_attention(self, i: int) -> None:
        c = self.cfg
        heads = self.q_heads()
        nope, rope = c.int("qk_nope_head_dim"), c.int("qk_rope_head_dim")
        v_dim, kv_rank = c.int("v_head_dim"), c.int("kv_lora_rank")
        q_rank = c.opt_int("q_lora_rank")
        p = f"{self.layer_prefix(i)}.self_attn"
        if q_rank is not None:
            self.linear("q_a_proj", i, f"{p}.q_a_proj", [f"{p}.q_a_proj"], self.hidden, q_rank, sharded=False)
            self.linear("q_b_proj", i, f"{p}.q_b_proj", [f"{p}.q_b_proj"], q_rank, heads * (nope + rope))
        else:
            self.linear("q_proj", i, f"{p}.q_proj", [f"{p}.q_proj"], self.hidden, heads * (nope + rope))
        self.linear("kv_a_proj_with_mqa", i, f"{p}.kv_a_proj_with_mqa", [f"{p}.kv_a_proj_with_mqa"],
                    self.hidden, kv_rank + rope, sharded=False)
        self.linear("kv_b_proj", i, f"{p}.kv_b_proj", [f"{p}.kv_b_proj"], kv_rank, heads * (nope + v_dim))
        self.linear("o_proj", i, f"{p}.o_proj", [f"{p}.o_proj"], heads * v_dim, self.hidden)

    def gated_mlp(self, i: int, base: str, size: int, key: str, *, role: str = "",
                  names: tuple[str, str, str] = ("gate_proj", "up_proj", "down_proj"), bias: bool = False,
                  what: str = "") -> None:
        per_rank = self.split(size, key, what)
        g, u, d = (f"{base}.{n}" for n in names)
        self.linear(f"{role}gate_up_proj", i, f"{base}.gate_up_proj", [g, u], self.hidden, 2 * per_rank, bias=bias)
        self.linear(f"{role}down_proj", i, d, [d], per_rank, self.hidden, bias=bias)

    def router(self, i: int, name: str, experts: int, *, bias: bool = False, role: str = "gate") -> None:
        self.linear(role, i, name, [name], self.hidden, experts, bias=bias, sharded=False)

    def moe_activation(self) -> str:
        act = self.cfg.str("hidden_act", "silu")
        if act not in _ACTIVATIONS:
            raise self.cfg.error("hidden_act", f"MoE activation {act!r} is not supported; expected one of "
                                 + ", ".join(sorted(_ACTIVATIONS)))
        return _ACTIVATIONS[act]

    def mtp_note(self) -> None:
        n = self.cfg.int("num_nextn_predict_layers", 0, minimum=0)
        if n:
            self.notes.append(f"{n} multi-token-prediction layer(s) (num_nextn_predict_layers) not listed: "
                              "they serve speculative decoding only")


def _experts(b: Builder, i: int, base: str, *, experts: int, top_k: int, intermediate: int,
             keys: tuple[str, str], parts: tuple[str, ...] = ("gate_proj", "up_proj", "down_proj"),
             per_expert: bool = True, **kw) -> None:
    names = [f"{base}.0.{p}" if per_expert else f"{base}.{p}" for p in parts]
    b.moe(i, base, names, experts=experts, top_k=top_k, intermediate=intermediate, keys=keys, **kw)


# ------------------------------------------------------------------ architectures
def dense(b: Builder) -> None:
    """llama, mistral, qwen2, qwen3: GQA attention + gated MLP on every layer."""
    c = b.cfg
    qwen2 = c.raw("model_type") == "qwen2"
    bias = c.bool("attention_bias", False)
    for i in range(c.int("num_hidden_layers")):
        b.gqa_attention(i, bias_qkv=qwen2 or bias, bias_o=bias and not qwen2)
        b.gated_mlp(i, f"{b.layer_prefix(i)}.mlp", c.int("intermediate_size"), "intermediate_size",
                    bias=c.bool("mlp_bias", False))


def qwen_moe(b: Builder) -> None:
    """qwen2_moe / qwen3_moe: experts where (i+1) % decoder_sparse_step == 0 and i not in mlp_only_layers."""
    c = b.cfg
    qwen2 = c.raw("model_type") == "qwen2_moe"
    # transformers 5 saves qwen3_moe's expert count as num_local_experts
    experts = c.int("num_experts", c.int("num_local_experts", 0, minimum=0), minimum=0)
    top_k = c.int("num_experts_per_tok")
    step = c.int("decoder_sparse_step", 1)
    mlp_only = set(c.list("mlp_only_layers", []))
    bias = c.bool("attention_bias", False)
    act = b.moe_activation()
    for i in range(c.int("num_hidden_layers")):
        p = f"{b.layer_prefix(i)}.mlp"
        b.gqa_attention(i, bias_qkv=qwen2 or bias, bias_o=bias and not qwen2)
        if experts and i not in mlp_only and (i + 1) % step == 0:
            b.router(i, f"{p}.gate", experts)
            _experts(b, i, f"{p}.experts", experts=experts, top_k=top_k,
                     intermediate=c.int("moe_intermediate_size"), keys=("num_experts", "moe_intermediate_size"),
                     activation=act)
            shared = c.int("shared_expert_intermediate_size", 0, minimum=0)
            if shared:
                b.gated_mlp(i, f"{p}.shared_expert", shared, "shared_expert_intermediate_size",
                            role="shared_experts.")
                b.router(i, f"{p}.shared_expert_gate", 1, role="shared_expert_gate")
        else:
            b.gated_mlp(i, p, c.int("intermediate_size"), "intermediate_size")


def mixtral(b: Builder) -> None:
    """mixtral / minimax_m2: routed experts (w1 gate, w3 up, w2 down) on every layer."""
    c = b.cfg
    bias = c.bool("attention_bias", False)
    for i in range(c.int("num_hidden_layers")):
        b.gqa_attention(i, bias_qkv=bias, bias_o=bias)
        _mixtral_moe(b, i)


def _mixtral_moe(b: Builder, i: int) -> None:
    c = b.cfg
    p = f"{b.layer_prefix(i)}.block_sparse_moe"
    experts = c.int("num_local_experts")
    b.router(i, f"{p}.gate", experts)
    _experts(b, i, f"{p}.experts", experts=experts, top_k=c.int("num_experts_per_tok"),
             intermediate=c.int("intermediate_size"), keys=("num_local_experts", "intermediate_size"),
             parts=("w1", "w3", "w2"), activation=b.moe_activation())


def minimax(b: Builder) -> None:
    """MiniMax-Text-01/M1: lightning (linear) attention layers interleaved with softmax attention."""
    c = b.cfg
    layers = c.int("num_hidden_layers")
    kinds = _minimax_attention_kinds(c, layers)
    if c.int("shared_intermediate_size", 0, minimum=0):
        raise c.error("shared_intermediate_size", "MiniMax shared experts are not supported; expected 0")
    heads = c.int("num_attention_heads")
    head_dim = c.int("head_dim", None) or b._implicit_head_dim(heads)
    for i in range(layers):
        if kinds[i] == "linear":
            p = f"{b.layer_prefix(i)}.self_attn"
            width = b.q_heads() * head_dim
            b.linear("linear_attn.qkv_proj", i, f"{p}.qkv_proj", [f"{p}.qkv_proj"], b.hidden, 3 * width)
            b.linear("linear_attn.output_gate", i, f"{p}.output_gate", [f"{p}.output_gate"], b.hidden, width)
            b.linear("linear_attn.out_proj", i, f"{p}.out_proj", [f"{p}.out_proj"], width, b.hidden)
        else:
            b.gqa_attention(i, bias_qkv=False, bias_o=False)
        _mixtral_moe(b, i)


def _minimax_attention_kinds(c: ConfigView, layers: int) -> list[str]:
    if "attn_type_list" in c:
        raw = c.list("attn_type_list")
        kinds = ["full" if v == 1 else "linear" if v == 0 else None for v in raw]
        key = "attn_type_list"
    elif "layer_types" in c:
        raw = c.list("layer_types")
        kinds = ["full" if v == "full_attention" else "linear" if v == "linear_attention" else None for v in raw]
        key = "layer_types"
    else:
        raise c.error("attn_type_list", "required key is missing; expected 0 (linear) / 1 (softmax) per layer")
    if len(kinds) != layers or None in kinds:
        raise c.error(key, f"expected {layers} entries of linear/full attention, got {raw!r}")
    return kinds  # type: ignore[return-value]


def deepseek(b: Builder) -> None:
    """deepseek_v2/v3, kimi_k2: MLA attention; dense MLP before first_k_dense_replace; shared experts."""
    c = b.cfg
    experts = c.opt_int("n_routed_experts")
    first_dense = c.int("first_k_dense_replace", 0, minimum=0)
    freq = c.int("moe_layer_freq", 1)
    act = b.moe_activation()
    for i in range(c.int("num_hidden_layers")):
        p = f"{b.layer_prefix(i)}.mlp"
        b.mla_attention(i)
        if experts and i >= first_dense and i % freq == 0:
            _routed_with_shared(b, i, p, experts, act)
        else:
            b.gated_mlp(i, p, c.int("intermediate_size"), "intermediate_size")
    b.mtp_note()


def _routed_with_shared(b: Builder, i: int, p: str, experts: int, act: str) -> None:
    c = b.cfg
    moe_size = c.int("moe_intermediate_size")
    b.router(i, f"{p}.gate", experts)
    _experts(b, i, f"{p}.experts", experts=experts, top_k=c.int("num_experts_per_tok"),
             intermediate=moe_size, keys=("n_routed_experts", "moe_intermediate_size"), activation=act)
    shared = c.int("n_shared_experts", 0, minimum=0)
    if shared:
        b.gated_mlp(i, f"{p}.shared_experts", shared * moe_size, "moe_intermediate_size", role="shared_experts.",
                    what="shared expert size (n_shared_experts x moe_intermediate_size)")


def glm4_moe(b: Builder) -> None:
    """glm4_moe: GQA attention (q/k/v bias), DeepSeek-style routed + shared experts."""
    c = b.cfg
    experts = c.int("n_routed_experts")
    first_dense = c.int("first_k_dense_replace", 0, minimum=0)
    act = b.moe_activation()
    bias = c.bool("attention_bias", False)
    for i in range(c.int("num_hidden_layers")):
        p = f"{b.layer_prefix(i)}.mlp"
        b.gqa_attention(i, bias_qkv=bias, bias_o=False)
        if i >= first_dense:
            _routed_with_shared(b, i, p, experts, act)
        else:
            b.gated_mlp(i, p, c.int("intermediate_size"), "intermediate_size")
    b.mtp_note()


def gpt_oss(b: Builder) -> None:
    """gpt-oss: biased attention, biased router, biased experts with the clamped SwiGLU (swigluoai)."""
    c = b.cfg
    experts = c.int("num_local_experts")
    top_k = c.int("num_experts_per_tok", None) or c.int("experts_per_token")
    limit = c.float("swiglu_limit")
    bias = c.bool("attention_bias", True)
    for i in range(c.int("num_hidden_layers")):
        p = f"{b.layer_prefix(i)}.mlp"
        b.gqa_attention(i, bias_qkv=bias, bias_o=bias)
        b.router(i, f"{p}.router", experts, bias=True)
        _experts(b, i, f"{p}.experts", experts=experts, top_k=top_k, intermediate=c.int("intermediate_size"),
                 keys=("num_local_experts", "intermediate_size"), parts=("gate_up_proj", "down_proj"),
                 per_expert=False, activation="swigluoai",
                 params={"limit": limit, "alpha": 1.702, "beta": 1.0}, bias=True)


def llama4(b: Builder) -> None:
    """llama4: routed experts (router weight applied on the input) + a shared expert on MoE layers."""
    c = b.cfg
    layers = c.int("num_hidden_layers")
    if c.raw("moe_layers") is not None:
        moe_layers = set(c.list("moe_layers"))
    else:
        step = c.int("interleave_moe_layer_step", 1)
        moe_layers = set(range(step - 1, layers, step))
    experts = c.int("num_local_experts")
    act = b.moe_activation()
    bias = c.bool("attention_bias", False)
    for i in range(layers):
        p = f"{b.layer_prefix(i)}.feed_forward"
        b.gqa_attention(i, bias_qkv=bias, bias_o=bias)
        if i in moe_layers:
            b.router(i, f"{p}.router", experts)
            _experts(b, i, f"{p}.experts", experts=experts, top_k=c.int("num_experts_per_tok"),
                     intermediate=c.int("intermediate_size"), keys=("num_local_experts", "intermediate_size"),
                     activation=act, router_weight_on_input=True)
            b.gated_mlp(i, f"{p}.shared_expert", c.int("intermediate_size"), "intermediate_size",
                        role="shared_experts.")
        else:
            b.gated_mlp(i, p, c.int("intermediate_size_mlp"), "intermediate_size_mlp")


def generic(b: Builder) -> None:
    """Unknown architectures: GQA attention; routed experts on every layer if an expert count is given."""
    c = b.cfg
    bias = c.bool("attention_bias", False)
    expert_key = next((k for k in ("num_local_experts", "num_experts", "n_routed_experts")
                       if c.raw(k)), None)
    act = b.moe_activation() if expert_key else "silu"
    for i in range(c.int("num_hidden_layers")):
        p = f"{b.layer_prefix(i)}.mlp"
        b.gqa_attention(i, bias_qkv=bias, bias_o=bias)
        if expert_key:
            experts = c.int(expert_key)
            size_key = "moe_intermediate_size" if "moe_intermediate_size" in c else "intermediate_size"
            b.router(i, f"{p}.gate", experts)
            _experts(b, i, f"{p}.experts", experts=experts, top_k=c.int("num_experts_per_tok"),
                     intermediate=c.int(size_key), keys=(expert_key, size_key), activation=act)
        else:
            b.gated_mlp(i, p, c.int("intermediate_size"), "intermediate_size")


ARCHITECTURES: dict[str, Callable[[Builder], None]] = {
    "llama": dense, "mistral": dense, "qwen2": dense, "qwen3": dense,
    "qwen2_moe": qwen_moe, "qwen3_moe": qwen_moe,
    "mixtral": mixtral, "minimax_m2": mixtral, "minimax": minimax, "minimax_text_01": minimax,
    "deepseek_v2": deepseek, "deepseek_v3": deepseek, "kimi_k2": deepseek,
    "glm4_moe": glm4_moe, "gpt_oss": gpt_oss, "llama4_text": llama4, "llama4": llama4,
}
#: `architectures[0]` -> model_type, for configs that omit model_type.
CLASS_NAMES = {
    "LlamaForCausalLM": "llama", "MistralForCausalLM": "mistral", "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3", "Qwen2MoeForCausalLM": "qwen2_moe", "Qwen3MoeForCausalLM": "qwen3_moe",
    "MixtralForCausalLM": "mixtral", "MiniMaxM2ForCausalLM": "minimax_m2", "MiniMaxForCausalLM": "minimax",
    "MiniMaxText01ForCausalLM": "minimax", "MiniMaxM1ForCausalLM": "minimax",
    "DeepseekV2ForCausalLM": "deepseek_v2", "DeepseekV3ForCausalLM": "deepseek_v3",
    "Glm4MoeForCausalLM": "glm4_moe", "GptOssForCausalLM": "gpt_oss",
    "Llama4ForCausalLM": "llama4_text", "Llama4ForConditionalGeneration": "llama4",
}


def build_modules(cfg: ConfigView, model_type: str, tp: int, ep: int, prefix: str) -> tuple[list[Module], list[str], bool]:
    """All modules of one rank, in forward order: (modules, notes, generic fallback used)."""
    if tp < 1 or ep < 1:
        raise InputError(f"expected positive --tp and --ep, got {tp} and {ep}", field="--tp/--ep")
    arch = ARCHITECTURES.get(model_type)
    b = Builder(cfg, tp, ep, prefix)
    b.embeddings()
    if arch is None:
        b.notes.append(f"architecture {model_type!r} is not known: layers were derived from the standard "
                       "keys (generic fallback: GQA attention, gated MLP or routed experts on every layer)")
    (arch or generic)(b)
    b.lm_head()
    return b.modules, b.notes, arch is None
