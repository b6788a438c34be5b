"""One-line descriptions of layers, configs and verdicts, shared by every renderer."""
from __future__ import annotations

from typing import Any

from .grouping import Group, generic_note


def is_testing_only(decision: Any) -> bool:
    """A selected kernel its plugin declares meant for testing (`testing_only: true`), whichever plugin."""
    return bool(getattr(decision, "testing_only", False))


def describe_layer(layer: Any) -> str:
    """A one-line shape of a layer as the kernel sees it on one rank."""
    if layer.op == "linear":
        text = f"linear K={layer.in_features} N={layer.out_features}"
        if layer.has_bias:
            text += " +bias"
    elif layer.op == "moe":
        text = f"moe E={layer.num_experts} top-{layer.top_k} H={layer.hidden_size} I={layer.intermediate_size}"
        if layer.tp_size > 1:
            text += f" ({layer.intermediate_size // layer.tp_size}/rank)"
        if layer.ep_size > 1:
            text += f" ep={layer.ep_size} ({layer.num_experts // layer.ep_size} experts/rank)"
        act = layer.activation
        if layer.activation_params:
            act += "(" + ", ".join(f"{k}={v:g}" for k, v in sorted(layer.activation_params.items())) + ")"
        text += f" {act}"
        if layer.has_bias:
            text += " +bias"
        if layer.apply_router_weight_on_input:
            text += " router-weight-on-input"
    else:
        text = f"embedding {layer.num_embeddings}x{layer.embedding_dim}"
    text += f", {layer.weight_format}"
    block = getattr(layer, "weight_block", None)
    group = getattr(layer, "group_size", None)
    if group and layer.quantized:
        text += f" g{group}"
    if block:
        text += f" ({block[0]}x{block[1]} blocks)"
    declared = getattr(layer, "activation_format", None)
    if layer.quantized and layer.op != "embedding":
        text += f", checkpoint activations {declared or 'none declared'}"
        if declared == "fp8":
            text += f" ({(layer.activation_scale or 'unknown').replace('_', ' ')} scales)"
    return text


def describe_platform(platform: Any, environment: list[str] | None = None) -> str:
    """The platform, plus what plugins found in this environment (e.g. which b12x implementation runs)."""
    return "; ".join([platform.describe(), *(environment or [])])


def describe_config(config: Any, model: Any) -> str:
    def show(v: Any) -> str:
        return ",".join(f"{k}={n}" for k, n in v.items()) if isinstance(v, dict) else str(v)
    return (f"linear={show(config.linear_backend)} moe={show(config.moe_backend)} "
            f"embedding={show(config.embedding_backend)}; tp={model.tp} ep={model.ep}")


def rejections(decision: Any) -> list[tuple[str, list[str]]]:
    """(candidate, [reason (rule), ...]) for each rejected candidate, in the order tried."""
    out = []
    for c in decision.rejected:
        mode = f" [{c.mode}]" if c.mode else ""
        act = f" activations {c.activation_format}" if c.activation_format else ""
        pairs = zip(c.reasons, c.rules) if len(c.reasons) > 1 else [(c.reason, c.rule)]
        out.append((f"{c.kernel}{mode}{act}", [f"{r} ({s})" for r, s in pairs]))
    return out


def verdict(group: Group) -> str:
    d = group.decision
    if d.status == "unquantized":
        why = generic_note(group.first)
        return "unquantized" + (f" ({why})" if why else "")
    if d.status == "no_kernel":
        return "NO KERNEL"
    text = f"{d.kernel} (backend {d.backend}), mode {d.mode}, activations {d.activation_format}"
    if is_testing_only(d):
        text += "  [TESTING-ONLY FALLBACK]"
    return text

