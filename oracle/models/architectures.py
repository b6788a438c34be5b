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

from dataclasses import dataclass
from typing import Callable

from ..errors import InputError
from ..formats import ACTIVATION_PARAMS
from .model import Module
from .source import ConfigView
from .spellings import (ACTIVATION_KEYS, EXPERT_KEYS, LATENT_EXPERT_KEYS, MTP_KEYS, SITU_PARAMS, TOP_K_KEYS, expert_count, first_key,
                        reject_unknown_moe_keys, shared_count, top_k)

_ACTIVATIONS = {"silu": "silu", "swish": "silu", "swiglu": "silu", "gelu": "gelu", "gelu_pytorch_tanh": "gelu",
                "gelu_new": "gelu", "relu2": "relu2", "situ": "situ",
                "swigluoai": "swigluoai"}


@dataclass(frozen=True)
class Layout:
    """Where a checkpoint keeps the decoder: `<base>.layers.N`, `<base>.embed_tokens` and `<head>`.

    Text-only checkpoints use model / lm_head. Multimodal ones nest the language model,
    and the nesting changed with transformers 5 (language_model.model.* / language_model.lm_head
    before, model.language_model.* / lm_head since): `oracle.models.build` picks the one
    the checkpoint's own names use.
    """

    base: str = "model"
    head: str = "lm_head"

    def rename(self, name: str) -> str:
        """A transformers causal-LM module name ('model.layers.0...', 'lm_head') in this layout."""
        if name == "lm_head":
            return self.head
        return f"{self.base}.{name[6:]}" if name.startswith("model.") else name


TEXT_ONLY = Layout()
#: Multimodal layouts, the transformers 4 one first.
NESTED_LAYOUTS = (Layout("language_model.model", "language_model.lm_head"), Layout("model.language_model", "lm_head"))


class Builder:
    """Collects modules for one rank; knows --tp/--ep and how each layer kind is split."""

    def __init__(self, cfg: ConfigView, tp: int, ep: int, layout: Layout = TEXT_ONLY):
        self.cfg = cfg
        self.tp = tp
        self.ep = ep
        self.layout = layout
        self.modules: list[Module] = []
        self.notes: list[str] = []
        self.hidden = cfg.int("hidden_size")
        self._activation: tuple[str, dict] | None = None

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
        return f"{self.layout.base}.layers.{i}"

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
        hidden = self.expert_hidden()
        self.modules.append(Module("experts", "moe", name, tuple(parts), block, {
            "num_experts": experts, "top_k": top_k, "hidden_size": hidden,
            "intermediate_size": intermediate, "activation": activation,
            "activation_params": params or {}, "has_bias": bias, "tp_size": moe_tp, "ep_size": self.ep,
            "apply_router_weight_on_input": router_weight_on_input}))

    # ---- building blocks --------------------------------------------------------------
    def embeddings(self, name: str = "") -> None:
        vocab = self.cfg.int("vocab_size")
        name = name or f"{self.layout.base}.embed_tokens"
        self.modules.append(Module("embed_tokens", "embedding", name, (name,), None,
                                   {"num_embeddings": -(-vocab // self.tp), "embedding_dim": self.hidden,
                                    "tp_size": self.tp}))

    def lm_head(self, name: str = "") -> None:
        vocab = self.cfg.int("vocab_size")
        name = name or self.layout.head
        self.linear("lm_head", None, name, [name], self.hidden, -(-vocab // self.tp))
        if self.cfg.bool("tie_word_embeddings", False):
            self.notes.append("lm_head is tied to embed_tokens (tie_word_embeddings); it is still its own GEMM")

    def gqa_attention(self, i: int, *, bias_qkv: bool, bias_o: bool, gated: bool = False) -> None:
        """q/k/v fused, o_proj; `gated`: q_proj also writes the output gate (2 x heads x head_dim)."""
        c = self.cfg
        heads = c.int("num_attention_heads")
        head_dim = c.int("head_dim", None) or self._implicit_head_dim(heads)
        q = self.q_heads() * head_dim
        kv = self.kv_heads(c.int("num_key_value_heads", heads)) * head_dim
        p = f"{self.layer_prefix(i)}.self_attn"
        self.linear("qkv_proj", i, f"{p}.qkv_proj", [f"{p}.q_proj", f"{p}.k_proj", f"{p}.v_proj"],
                    self.hidden, q * (2 if gated else 1) + 2 * kv, bias=bias_qkv)
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

    def expert_hidden(self) -> int:
        """The width routed experts run at: hidden_size, or a latent width (Kimi-K3 routed_expert_hidden_size)."""
        key = first_key(self.cfg, LATENT_EXPERT_KEYS)
        if key is None:
            return self.hidden
        latent = self.cfg.int(key)
        note = (f"latent MoE: routed experts run at {key} {latent} instead of hidden_size {self.hidden}; the "
                "projections into and out of that width are not listed")
        if note not in self.notes:
            self.notes.append(note)
        return latent

    def moe_activation(self) -> tuple[str, dict]:
        """(engine activation, activation_params) from hidden_act (any spelling) and its parameters."""
        if self._activation is None:
            self._activation = self._read_activation()
        return self._activation[0], dict(self._activation[1])

    def _read_activation(self) -> tuple[str, dict]:
        c = self.cfg
        key = first_key(c, ACTIVATION_KEYS) or "hidden_act"
        act = c.str(key, "silu")
        if act not in _ACTIVATIONS:
            raise c.error(key, f"MoE activation {act!r} is not supported; expected one of "
                          + ", ".join(sorted(_ACTIVATIONS)))
        params = {}
        for cfg_key, name in SITU_PARAMS.items():
            if c.raw(cfg_key) is not None:
                if act != "situ":
                    raise c.error(cfg_key, f"a SiTU parameter with {key} {act!r}; expected {key} 'situ'")
                value = c.float(cfg_key)
                if value <= 0:
                    raise c.error(cfg_key, f"expected a positive number, got {value}")
                params[name] = value
        for cfg_key, name in (("swiglu_limit", "limit"), ("swiglu_alpha", "alpha")):
            takes = ACTIVATION_PARAMS.get(_ACTIVATIONS[act], ())
            if c.raw(cfg_key) is not None and name not in takes:
                raise c.error(cfg_key, f"a SwiGLU parameter with {key} {act!r}, which takes "
                                       f"{', '.join(takes) or 'no parameters'}; expected no {cfg_key}")
        if act == "swigluoai":   # gpt-oss's clamped SwiGLU, named in the config (MiniMax-M3 style)
            params = {"limit": c.float("swiglu_limit", 7.0), "alpha": c.float("swiglu_alpha", 1.702), "beta": 1.0}
        return _ACTIVATIONS[act], params

    def mtp_note(self) -> None:
        key = first_key(self.cfg, MTP_KEYS)
        n = self.cfg.int(key, 0, minimum=0) if key else 0
        if n:
            self.notes.append(f"{n} multi-token-prediction layer(s) ({key}) not listed: "
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
    experts, key = expert_count(c)
    if experts:
        raise c.error(key, f"{experts} routed experts in a config of the dense architecture "
                      f"{c.raw('model_type')!r}; expected no experts (or a MoE model_type)")
    reject_unknown_moe_keys(c, f"the dense architecture {c.raw('model_type')!r}")
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
    experts, expert_key = expert_count(c)
    k = top_k(c) if experts else 0
    step = c.int("decoder_sparse_step", 1)
    mlp_only = set(c.int_list("mlp_only_layers", []))
    bias = c.bool("attention_bias", False)
    act, params = b.moe_activation()
    for i in range(c.int("num_hidden_layers")):
        b.gqa_attention(i, bias_qkv=qwen2 or bias, bias_o=bias and not qwen2)
        _qwen_mlp(b, i, moe=bool(experts) and i not in mlp_only and (i + 1) % step == 0,
                  experts=experts, expert_key=expert_key, k=k, act=(act, params))


def _qwen_mlp(b: Builder, i: int, *, moe: bool, experts: int, expert_key: str, k: int,
              act: tuple[str, dict]) -> None:
    """Qwen MoE block: router, routed experts, optional shared expert with its sigmoid gate; else a dense MLP."""
    c = b.cfg
    p = f"{b.layer_prefix(i)}.mlp"
    if not moe:
        b.gated_mlp(i, p, c.int("intermediate_size"), "intermediate_size")
        return
    b.router(i, f"{p}.gate", experts)
    _experts(b, i, f"{p}.experts", experts=experts, top_k=k, intermediate=c.int("moe_intermediate_size"),
             keys=(expert_key, "moe_intermediate_size"), activation=act[0], params=act[1])
    shared = c.int("shared_expert_intermediate_size", 0, minimum=0)
    if shared:
        b.gated_mlp(i, f"{p}.shared_expert", shared, "shared_expert_intermediate_size", role="shared_experts.")
        b.router(i, f"{p}.shared_expert_gate", 1, role="shared_expert_gate")


def qwen3_next(b: Builder) -> None:
    """qwen3_next / qwen3_5_moe: Gated DeltaNet layers with a gated full-attention layer every
    full_attention_interval (or as layer_types says), and a Qwen MoE block on every layer.

    DeltaNet projections are fused as vLLM loads them: in_proj_qkvz (q, k: key heads x key dim;
    v, z: value heads x value dim) and in_proj_ba (one b and one a per value head), both split
    over --tp by heads; out_proj row-parallel. Qwen3.5 checkpoints store the halves apart
    (in_proj_qkv + in_proj_z, in_proj_b + in_proj_a); Qwen3-Next stores them fused.
    """
    c = b.cfg
    layers = c.int("num_hidden_layers")
    kinds = _layer_kinds(c, layers)
    split_parts = str(c.raw("model_type", "")).startswith("qwen3_5")
    kh, vh = b.split(c.int("linear_num_key_heads"), "linear_num_key_heads"), \
        b.split(c.int("linear_num_value_heads"), "linear_num_value_heads")
    kd, vd = c.int("linear_key_head_dim"), c.int("linear_value_head_dim")
    experts, expert_key = expert_count(c)
    k = top_k(c) if experts else 0
    mlp_only = set(c.int_list("mlp_only_layers", []))
    step = c.int("decoder_sparse_step", 1)
    act = b.moe_activation()
    gated = c.bool("attn_output_gate", True)
    for i in range(layers):
        if kinds[i] == "linear":
            a = f"{b.layer_prefix(i)}.linear_attn"
            qkvz = [f"{a}.in_proj_qkv", f"{a}.in_proj_z"] if split_parts else [f"{a}.in_proj_qkvz"]
            ba = [f"{a}.in_proj_b", f"{a}.in_proj_a"] if split_parts else [f"{a}.in_proj_ba"]
            b.linear("linear_attn.in_proj_qkvz", i, f"{a}.in_proj_qkvz", qkvz, b.hidden, 2 * kh * kd + 2 * vh * vd)
            b.linear("linear_attn.in_proj_ba", i, f"{a}.in_proj_ba", ba, b.hidden, 2 * vh)
            b.linear("linear_attn.out_proj", i, f"{a}.out_proj", [f"{a}.out_proj"], vh * vd, b.hidden)
        else:
            b.gqa_attention(i, bias_qkv=c.bool("attention_bias", False), bias_o=False, gated=gated)
        _qwen_mlp(b, i, moe=bool(experts) and i not in mlp_only and (i + 1) % step == 0,
                  experts=experts, expert_key=expert_key, k=k, act=act)
    b.mtp_note()


def _layer_kinds(c: ConfigView, layers: int) -> list[str]:
    """'linear' / 'full' per layer from layer_types, else from full_attention_interval."""
    if c.raw("layer_types") is not None:
        raw = c.list("layer_types")
        kinds = [{"linear_attention": "linear", "full_attention": "full"}.get(v) for v in raw]
        if len(kinds) != layers or None in kinds:
            raise c.error("layer_types", f"expected {layers} entries of linear_attention/full_attention, got {raw!r}")
        return kinds  # type: ignore[return-value]
    every = c.int("full_attention_interval")
    return ["full" if (i + 1) % every == 0 else "linear" for i in range(layers)]


def mixtral(b: Builder) -> None:
    """mixtral / minimax_m2: routed experts (w1 gate, w3 up, w2 down) on every layer."""
    c = b.cfg
    bias = c.bool("attention_bias", False)
    for i in range(c.int("num_hidden_layers")):
        b.gqa_attention(i, bias_qkv=bias, bias_o=bias)
        _mixtral_moe(b, i)
    b.mtp_note()


def _mixtral_moe(b: Builder, i: int) -> None:
    c = b.cfg
    p = f"{b.layer_prefix(i)}.block_sparse_moe"
    experts, key = expert_count(c)
    if not experts:
        raise c.error(key, "required key is missing; expected the routed expert count")
    size_key = "moe_intermediate_size" if c.raw("moe_intermediate_size") is not None else "intermediate_size"
    act, params = b.moe_activation()
    b.router(i, f"{p}.gate", experts)
    _experts(b, i, f"{p}.experts", experts=experts, top_k=top_k(c),
             intermediate=c.int(size_key), keys=(key, size_key),
             parts=("w1", "w3", "w2"), activation=act, params=params)


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


def minimax_m3(b: Builder) -> None:
    """MiniMax-M3 (text_config of minimax_m3_vl): GQA attention whose sparse layers add the indexer's
    index_q_proj (sparse_num_index_heads x sparse_index_dim) and index_k_proj (one head) to the same
    input, fused with q/k/v into one qkv_proj GEMM as vLLM's MinimaxM3QKVParallelLinearWithIndexer does;
    a dense MLP (dense_intermediate_size) where moe_layer_freq is 0, else block_sparse_moe: router,
    routed experts w1/w3/w2 (intermediate_size) with the clamped SwiGLU, and shared experts
    (n_shared_experts x shared_intermediate_size)."""
    c = b.cfg
    layers = c.int("num_hidden_layers")
    moe = _per_layer_flags(c, "moe_layer_freq", layers)
    sparse_cfg = c.sub("sparse_attention_config")
    use_sparse = sparse_cfg is not None and sparse_cfg.bool("use_sparse_attention", False)
    sparse = _per_layer_flags(sparse_cfg, "sparse_attention_freq", layers) if use_sparse else [False] * layers
    heads = c.int("num_attention_heads")
    head_dim = c.int("head_dim", None) or b._implicit_head_dim(heads)
    n_kv = c.int("num_key_value_heads", heads)
    experts, key = expert_count(c)
    k = top_k(c) if experts else 0
    act, params = b.moe_activation()
    for i in range(layers):
        p = f"{b.layer_prefix(i)}.self_attn"
        q, kv = b.q_heads() * head_dim, b.kv_heads(n_kv) * head_dim
        parts = [f"{p}.q_proj", f"{p}.k_proj", f"{p}.v_proj"]
        n = q + 2 * kv
        if sparse[i]:
            assert sparse_cfg is not None
            idx_heads, idx_dim = sparse_cfg.int("sparse_num_index_heads"), sparse_cfg.int("sparse_index_dim")
            parts += [f"{p}.index_q_proj", f"{p}.index_k_proj"]
            n += b.kv_heads(idx_heads, "sparse_attention_config.sparse_num_index_heads") * idx_dim + idx_dim
        b.linear("qkv_proj", i, f"{p}.qkv_proj", parts, b.hidden, n)
        b.linear("o_proj", i, f"{p}.o_proj", [f"{p}.o_proj"], q, b.hidden)
        if moe[i]:
            m = f"{b.layer_prefix(i)}.block_sparse_moe"
            b.router(i, f"{m}.gate", experts)
            _experts(b, i, f"{m}.experts", experts=experts, top_k=k, intermediate=c.int("intermediate_size"),
                     keys=(key, "intermediate_size"), parts=("w1", "w3", "w2"), activation=act, params=params)
            shared = shared_count(c)
            if shared:
                b.gated_mlp(i, f"{m}.shared_experts", shared * c.int("shared_intermediate_size"),
                            "shared_intermediate_size", role="shared_experts.")
        else:
            b.gated_mlp(i, f"{b.layer_prefix(i)}.mlp", c.int("dense_intermediate_size"), "dense_intermediate_size")
    b.mtp_note()


def _per_layer_flags(c: ConfigView, key: str, layers: int) -> list[bool]:
    """A 0/1 list with one entry per layer (MiniMax-M3's moe_layer_freq, sparse_attention_freq)."""
    raw = c.int_list(key)
    if len(raw) != layers or any(v not in (0, 1) for v in raw):
        raise c.error(key, f"expected {layers} entries of 0 or 1 (one per layer), got {raw!r:.80}")
    return [bool(v) for v in raw]


def deepseek(b: Builder) -> None:
    """deepseek_v2/v3/v32, kimi_k2, glm_moe_dsa (GLM-5): MLA attention (+ the sparse-attention
    indexer when index_n_heads is set); dense MLP before first_k_dense_replace; shared experts."""
    c = b.cfg
    experts, _ = expert_count(c)
    first_dense = c.int("first_k_dense_replace", 0, minimum=0)
    freq = c.int("moe_layer_freq", 1)
    indexer = c.raw("index_n_heads") is not None
    for i in range(c.int("num_hidden_layers")):
        p = f"{b.layer_prefix(i)}.mlp"
        b.mla_attention(i)
        if indexer:
            _sparse_attention_indexer(b, i)
        if experts and i >= first_dense and i % freq == 0:
            _routed_with_shared(b, i, p)
        else:
            b.gated_mlp(i, p, c.int("intermediate_size"), "intermediate_size")
    b.mtp_note()


def _sparse_attention_indexer(b: Builder, i: int) -> None:
    """DeepSeek-V3.2 / GLM-5 sparse-attention indexer: small replicated GEMMs next to MLA.

    wq_b (q_lora_rank -> index heads x index dim), wk (hidden -> index dim) and the per-head
    weights projection, which GLM-5 checkpoints name `indexers_proj` (transformers:
    indexer.weights_proj).
    """
    c = b.cfg
    heads, dim = c.int("index_n_heads"), c.int("index_head_dim")
    a = f"{b.layer_prefix(i)}.self_attn"
    weights = f"{a}.indexers_proj" if c.raw("model_type") == "glm_moe_dsa" else f"{a}.indexer.weights_proj"
    b.linear("indexer.wq_b", i, f"{a}.indexer.wq_b", [f"{a}.indexer.wq_b"], c.int("q_lora_rank"), heads * dim,
             sharded=False)
    b.linear("indexer.wk", i, f"{a}.indexer.wk", [f"{a}.indexer.wk"], b.hidden, dim, sharded=False)
    b.linear("indexer.weights_proj", i, weights, [weights], b.hidden, heads, sharded=False)


def _routed_with_shared(b: Builder, i: int, p: str) -> None:
    c = b.cfg
    experts, key = expert_count(c)
    act, params = b.moe_activation()
    moe_size = c.int("moe_intermediate_size")
    b.router(i, f"{p}.gate", experts)
    _experts(b, i, f"{p}.experts", experts=experts, top_k=top_k(c),
             intermediate=moe_size, keys=(key, "moe_intermediate_size"), activation=act, params=params)
    shared = shared_count(c)
    if shared:
        b.gated_mlp(i, f"{p}.shared_experts", shared * moe_size, "moe_intermediate_size", role="shared_experts.",
                    what="shared expert size (n_shared_experts x moe_intermediate_size)")


def glm4_moe(b: Builder) -> None:
    """glm4_moe: GQA attention (q/k/v bias), DeepSeek-style routed + shared experts."""
    c = b.cfg
    experts, key = expert_count(c)
    if not experts:
        raise c.error(key, "required key is missing; expected the routed expert count")
    first_dense = c.int("first_k_dense_replace", 0, minimum=0)
    bias = c.bool("attention_bias", False)
    for i in range(c.int("num_hidden_layers")):
        p = f"{b.layer_prefix(i)}.mlp"
        b.gqa_attention(i, bias_qkv=bias, bias_o=False)
        if i >= first_dense:
            _routed_with_shared(b, i, p)
        else:
            b.gated_mlp(i, p, c.int("intermediate_size"), "intermediate_size")
    b.mtp_note()


def deepseek_v4(b: Builder) -> None:
    """deepseek_v4: DeepSeek's own checkpoint names (layers.N.attn / layers.N.ffn, embed, head).

    Attention: q low-rank (wq_a replicated, wq_b column-parallel over heads), one shared
    KV head (wkv, replicated), grouped low-rank output (wo_a: o_groups GEMMs of
    heads*head_dim/o_groups -> o_lora_rank, groups split over --tp; wo_b row-parallel).
    FFN: routed experts (w1 gate, w3 up, w2 down) with SwiGLU clamped at swiglu_limit,
    a shared expert, and a learned router except on the first num_hash_layers layers,
    which route by token id (no gate GEMM).
    """
    c = b.cfg
    heads, head_dim = c.int("num_attention_heads"), c.int("head_dim")
    q_rank, o_rank, groups = c.int("q_lora_rank"), c.int("o_lora_rank"), c.int("o_groups")
    if heads % groups:
        raise c.error("o_groups", f"{groups} output groups do not divide {heads} attention heads")
    if c.int("num_key_value_heads", 1) != 1:
        raise c.error("num_key_value_heads", "DeepSeek-V4 attention has one shared KV head; expected 1")
    groups_rank = b.split(groups, "o_groups", "o_groups")
    experts, key = expert_count(c)
    act, params = b.moe_activation()
    limit = c.float("swiglu_limit", None)
    if limit is not None:
        params = {**params, "limit": limit}
    hash_layers = c.int("num_hash_layers", 0, minimum=0)
    moe_size = c.int("moe_intermediate_size")
    layers = c.int("num_hidden_layers")
    ratios = c.list("compress_ratios", [])
    for i in range(layers):
        a, f = f"layers.{i}.attn", f"layers.{i}.ffn"
        b.linear("wq_a", i, f"{a}.wq_a", [f"{a}.wq_a"], b.hidden, q_rank, sharded=False)
        b.linear("wq_b", i, f"{a}.wq_b", [f"{a}.wq_b"], q_rank, b.q_heads() * head_dim)
        b.linear("wkv", i, f"{a}.wkv", [f"{a}.wkv"], b.hidden, head_dim, sharded=False)
        b.linear("wo_a", i, f"{a}.wo_a", [f"{a}.wo_a"], heads * head_dim // groups, groups_rank * o_rank)
        b.linear("wo_b", i, f"{a}.wo_b", [f"{a}.wo_b"], groups_rank * o_rank, b.hidden)
        if i >= hash_layers:
            b.router(i, f"{f}.gate", experts)
        _experts(b, i, f"{f}.experts", experts=experts, top_k=top_k(c), intermediate=moe_size,
                 keys=(key, "moe_intermediate_size"), parts=("w1", "w3", "w2"), activation=act, params=params)
        shared = shared_count(c)
        if shared:
            b.gated_mlp(i, f"{f}.shared_experts", shared * moe_size, "moe_intermediate_size",
                        role="shared_experts.", names=("w1", "w3", "w2"))
    compressed = sum(1 for r in ratios[:layers] if r)
    b.notes.append(f"deepseek_v4: the first {hash_layers} layers route by token hash (no router GEMM); "
                   f"the compressor/indexer projections of the {compressed} compressed-attention layers and "
                   "the hyper-connection mixers are small BF16 GEMMs and are not listed")
    b.mtp_note()


def gpt_oss(b: Builder) -> None:
    """gpt-oss: biased attention, biased router, biased experts with the clamped SwiGLU (swigluoai)."""
    c = b.cfg
    experts, key = expert_count(c)
    if not experts:
        raise c.error(key, "required key is missing; expected the routed expert count")
    k = top_k(c)
    limit = c.float("swiglu_limit")
    bias = c.bool("attention_bias", True)
    for i in range(c.int("num_hidden_layers")):
        p = f"{b.layer_prefix(i)}.mlp"
        b.gqa_attention(i, bias_qkv=bias, bias_o=bias)
        b.router(i, f"{p}.router", experts, bias=True)
        _experts(b, i, f"{p}.experts", experts=experts, top_k=k, intermediate=c.int("intermediate_size"),
                 keys=(key, "intermediate_size"), parts=("gate_up_proj", "down_proj"),
                 per_expert=False, activation="swigluoai",
                 params={"limit": limit, "alpha": 1.702, "beta": 1.0}, bias=True)


def llama4(b: Builder) -> None:
    """llama4: routed experts (router weight applied on the input) + a shared expert on MoE layers."""
    c = b.cfg
    layers = c.int("num_hidden_layers")
    if c.raw("moe_layers") is not None:
        moe_layers = set(c.int_list("moe_layers"))
    else:
        step = c.int("interleave_moe_layer_step", 1)
        moe_layers = set(range(step - 1, layers, step))
    experts, key = expert_count(c)
    act, params = b.moe_activation()
    bias = c.bool("attention_bias", False)
    for i in range(layers):
        p = f"{b.layer_prefix(i)}.feed_forward"
        b.gqa_attention(i, bias_qkv=bias, bias_o=bias)
        if i in moe_layers:
            b.router(i, f"{p}.router", experts)
            _experts(b, i, f"{p}.experts", experts=experts, top_k=top_k(c),
                     intermediate=c.int("intermediate_size"), keys=(key, "intermediate_size"),
                     activation=act, params=params, router_weight_on_input=True)
            b.gated_mlp(i, f"{p}.shared_expert", c.int("intermediate_size"), "intermediate_size",
                        role="shared_experts.")
        else:
            b.gated_mlp(i, p, c.int("intermediate_size_mlp"), "intermediate_size_mlp")


def generic(b: Builder) -> None:
    """Unknown architectures: GQA attention; routed experts on every layer if an expert count is given."""
    c = b.cfg
    bias = c.bool("attention_bias", False)
    experts, expert_key = expert_count(c)
    if not experts:
        reject_unknown_moe_keys(c, f"the generic reading of {c.raw('model_type')!r}")
        k_key = first_key(c, TOP_K_KEYS)
        if k_key and c.raw(k_key):
            raise c.error(k_key, f"experts per token given without an expert count; expected one of "
                          f"{', '.join(EXPERT_KEYS)}: reading the model as dense would be a guess")
    act, params = b.moe_activation() if experts else ("silu", {})
    for i in range(c.int("num_hidden_layers")):
        p = f"{b.layer_prefix(i)}.mlp"
        b.gqa_attention(i, bias_qkv=bias, bias_o=bias)
        if experts:
            size_key = "moe_intermediate_size" if "moe_intermediate_size" in c else "intermediate_size"
            b.router(i, f"{p}.gate", experts)
            _experts(b, i, f"{p}.experts", experts=experts, top_k=top_k(c),
                     intermediate=c.int(size_key), keys=(expert_key, size_key), activation=act, params=params)
        else:
            b.gated_mlp(i, p, c.int("intermediate_size"), "intermediate_size")


ARCHITECTURES: dict[str, Callable[[Builder], None]] = {
    "llama": dense, "mistral": dense, "qwen2": dense, "qwen3": dense,
    "qwen2_moe": qwen_moe, "qwen3_moe": qwen_moe,
    "mixtral": mixtral, "minimax_m2": mixtral, "minimax": minimax, "minimax_text_01": minimax,
    "deepseek_v2": deepseek, "deepseek_v3": deepseek, "kimi_k2": deepseek, "deepseek_v32": deepseek,
    "glm_moe_dsa": deepseek,
    "glm4_moe": glm4_moe, "gpt_oss": gpt_oss, "llama4_text": llama4, "llama4": llama4,
    "deepseek_v4": deepseek_v4,
    "qwen3_next": qwen3_next, "qwen3_5_moe_text": qwen3_next, "qwen3_5_moe": qwen3_next,
    "minimax_m3": minimax_m3,
}
#: Architectures whose checkpoints use their own top-level names for the embedding and head.
_NATIVE_NAMES = {"deepseek_v4": ("embed", "head")}
#: `architectures[0]` -> model_type, for configs that omit model_type.
CLASS_NAMES = {
    "LlamaForCausalLM": "llama", "MistralForCausalLM": "mistral", "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3", "Qwen2MoeForCausalLM": "qwen2_moe", "Qwen3MoeForCausalLM": "qwen3_moe",
    "MixtralForCausalLM": "mixtral", "MiniMaxM2ForCausalLM": "minimax_m2", "MiniMaxForCausalLM": "minimax",
    "MiniMaxText01ForCausalLM": "minimax", "MiniMaxM1ForCausalLM": "minimax",
    "DeepseekV2ForCausalLM": "deepseek_v2", "DeepseekV3ForCausalLM": "deepseek_v3",
    "Glm4MoeForCausalLM": "glm4_moe", "GptOssForCausalLM": "gpt_oss",
    "Llama4ForCausalLM": "llama4_text", "Llama4ForConditionalGeneration": "llama4",
    "DeepseekV4ForCausalLM": "deepseek_v4", "GlmMoeDsaForCausalLM": "glm_moe_dsa",
    "Qwen3NextForCausalLM": "qwen3_next", "Qwen3_5MoeForCausalLM": "qwen3_5_moe_text",
    "MiniMaxM3SparseForCausalLM": "minimax_m3", "MiniMaxM3SparseForConditionalGeneration": "minimax_m3",
}


def build_modules(cfg: ConfigView, model_type: str, tp: int, ep: int,
                  layout: Layout = TEXT_ONLY) -> tuple[list[Module], list[str], bool]:
    """All modules of one rank, in forward order: (modules, notes, generic fallback used)."""
    if tp < 1 or ep < 1:
        raise InputError(f"expected positive --tp and --ep, got {tp} and {ep}", field="--tp/--ep")
    arch = ARCHITECTURES.get(model_type)
    b = Builder(cfg, tp, ep, layout)
    embed, head = _NATIVE_NAMES.get(model_type, ("", ""))
    b.embeddings(embed)
    if arch is None:
        b.notes.append(f"architecture {model_type!r} is not known: layers were derived from the standard "
                       "keys (generic fallback: GQA attention, gated MLP or routed experts on every layer)")
    (arch or generic)(b)
    b.lm_head(head)
    return b.modules, b.notes, arch is None
