"""`oracle explain`: every layer of a model, the kernel that would serve it, and why not the others.

`build_report` turns a Model (oracle.models) into decisions through `select_backend`;
the renderers print it as text (for a person), json (one object) or markdown. Layers
with the same role and the same decision are grouped ("layers 3-60 (x58)"), so a
61-layer model reads as a dozen groups. Exit codes: 0 when every quantized layer has
a kernel, 2 when some has none (everything is still printed), 1 on bad input.
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from typing import Any, Mapping

from .errors import InputError, OracleError

FORMATS = ("text", "json", "markdown")
EMULATION = "emulation"


# ---------------------------------------------------------------- the report
@dataclass
class Group:
    """Layers of one role with the same layer signature and decision."""

    role: str
    blocks: list[int | None]
    rows: list[Any]                      # ModelLayer
    decision: Any                        # Decision

    @property
    def first(self) -> Any:
        return self.rows[0]

    @property
    def label(self) -> str:
        return block_label(self.blocks)

    @property
    def count(self) -> int:
        return len(self.rows)


@dataclass
class Report:
    model: Any                           # oracle.models.Model
    platform: Any                        # Platform
    config: Any                          # KernelConfig
    policy_files: list[str]
    decisions: list[Any]                 # one Decision per model.layers entry
    groups: list[Group] = field(default_factory=list)
    plugin_errors: list[str] = field(default_factory=list)
    environment: list[str] = field(default_factory=list)   # what kernels' environment checks found

    @property
    def no_kernel(self) -> list[Group]:
        return [g for g in self.groups if g.decision.status == "no_kernel"]

    @property
    def emulation(self) -> list[Group]:
        return [g for g in self.groups if g.decision.status == "selected" and _is_emulation(g.decision)]

    @property
    def exit_code(self) -> int:
        return 2 if self.no_kernel else 0

    def summary(self) -> dict[str, Any]:
        by_backend: dict[str, int] = {}
        unquantized = no_kernel = 0
        for d in self.decisions:
            if d.status == "unquantized":
                unquantized += 1
            elif d.status == "no_kernel":
                no_kernel += 1
            else:
                by_backend[d.backend] = by_backend.get(d.backend, 0) + 1
        return {
            "layers": len(self.decisions), "unquantized": unquantized,
            "quantized": len(self.decisions) - unquantized, "by_backend": dict(sorted(by_backend.items())),
            "no_kernel": no_kernel,
            "emulation_fallbacks": [{"role": g.role, "layers": g.label, "count": g.count, "kernel": g.decision.kernel}
                                    for g in self.emulation],
            "without_kernel": [{"role": g.role, "layers": g.label, "count": g.count} for g in self.no_kernel],
            "exit_code": self.exit_code,
        }


def _is_emulation(decision: Any) -> bool:
    return decision.backend == EMULATION or bool(getattr(decision, "testing_only", False))


def build_report(model: Any, platform: Any, config: Any = None, *, policy: Any = None,
                 env: Mapping[str, str] | None = None) -> Report:
    """Decide every layer of `model` on `platform`; decisions are cached per layer signature."""
    from .config import KernelConfig
    from .engine import get_engine, select_backend
    from .registry import get_registry

    config = config or KernelConfig()
    decisions = [select_backend(m.layer, platform, config, policy=policy, env=env) for m in model.layers]
    registry = get_registry()
    if policy is None:
        from .policy import default_policy
        policy = default_policy(registry)
    report = Report(model=model, platform=platform, config=config, policy_files=list(policy.files),
                    decisions=decisions, plugin_errors=[str(f) for f in registry.failures],
                    environment=get_engine(policy, registry).environment(platform))
    report.groups = group_layers(model.layers, decisions)
    return report


def group_layers(rows: list[Any], decisions: list[Any]) -> list[Group]:
    """Group by (role, layer signature, decision, why unquantized), in order of first appearance."""
    groups: dict[tuple, Group] = {}
    for row, decision in zip(rows, decisions):
        key = (row.role, row.layer.signature, id(decision), generic_note(row), tuple(decision.notes))
        group = groups.get(key)
        if group is None:
            groups[key] = Group(row.role, [row.block], [row], decision)
        else:
            group.blocks.append(row.block)
            group.rows.append(row)
    return list(groups.values())


def generic_note(row: Any) -> str:
    """Why a layer is unquantized, with its own layer index written N, so per-layer entries group."""
    note = row.quant_note
    if note and row.block is not None:
        note = note.replace(f".layers.{row.block}.", ".layers.N.")
    return note


def block_label(blocks: list[int | None]) -> str:
    """[3, 4, ..., 60] -> 'layers 3-60 (x58)'; [None] -> '' (model-level layers)."""
    indices = sorted(b for b in blocks if b is not None)
    if not indices:
        return ""
    if len(indices) == 1:
        return f"layer {indices[0]}"
    step = indices[1] - indices[0]
    if len(indices) > 2 and step > 1 and all(b - a == step for a, b in zip(indices, indices[1:])):
        return f"layers {indices[0]}-{indices[-1]} step {step} (x{len(indices)})"
    runs: list[str] = []
    start = prev = indices[0]
    for b in indices[1:] + [None]:  # type: ignore[list-item]
        if b is not None and b == prev + 1:
            prev = b
            continue
        runs.append(f"{start}-{prev}" if prev > start else f"{start}")
        if b is not None:
            start = prev = b
    return f"layers {','.join(runs)} (x{len(indices)})"


# ---------------------------------------------------------------- describing things
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


def _rejections(decision: Any) -> list[tuple[str, list[str]]]:
    """(candidate, [reason (rule), ...]) for each rejected candidate, in the order tried."""
    out = []
    for c in decision.rejected:
        mode = f" [{c.mode}]" if c.mode else ""
        act = f" activations {c.activation_format}" if c.activation_format else ""
        pairs = zip(c.reasons, c.rules) if len(c.reasons) > 1 else [(c.reason, c.rule)]
        out.append((f"{c.kernel}{mode}{act}", [f"{r} ({s})" for r, s in pairs]))
    return out


def _verdict(group: Group) -> str:
    d = group.decision
    if d.status == "unquantized":
        why = generic_note(group.first)
        return "unquantized" + (f" ({why})" if why else "")
    if d.status == "no_kernel":
        return "NO KERNEL"
    text = f"{d.kernel} (backend {d.backend}), mode {d.mode}, activations {d.activation_format}"
    if _is_emulation(d):
        text += "  [EMULATION FALLBACK]"
    return text


# ---------------------------------------------------------------- text
def render_text(report: Report) -> str:
    m = report.model
    out = [
        f"model     {m.name}: {m.architecture} (model_type {m.model_type}), {len(m.layers)} layers per rank"
        + ("  [shipped example]" if m.example else ""),
        f"files     {', '.join(m.files)}",
        f"quant     {m.dialect}: {m.dialect_detail}",
        f"platform  {describe_platform(report.platform, report.environment)}",
        f"config    {describe_config(report.config, m)}",
        f"policy    {' < '.join(report.policy_files)}",
    ]
    out += [f"note      {n}" for n in m.notes]
    out += [f"plugin    error: {e}" for e in report.plugin_errors]
    for g in report.groups:
        where = f"{g.label}  " if g.label else ""
        out.append("")
        out.append(f"{where}{g.role}: {describe_layer(g.first.layer)}")
        out.append(f"  -> {_verdict(g)}")
        for candidate, reasons in _rejections(g.decision):
            if len(reasons) == 1:
                out.append(f"     - {candidate}: {reasons[0]}")
            else:
                out.append(f"     - {candidate}:")
                out += [f"         {r}" for r in reasons]
        for note in g.decision.notes:
            out.append(f"     note: {note}")
    out.append("")
    out += _summary_lines(report)
    return "\n".join(out)


def _summary_lines(report: Report) -> list[str]:
    s = report.summary()
    parts = [f"{n} {b}" for b, n in s["by_backend"].items()]
    parts.append(f"{s['unquantized']} unquantized")
    parts.append(f"{s['no_kernel']} without a kernel")
    lines = [f"summary: {s['layers']} layers: " + ", ".join(parts)]
    for g in report.emulation:
        where = f" {g.label}" if g.label else ""
        lines.append(f"WARNING: fallback to emulation: {g.role}{where} -> {g.decision.kernel}, "
                     "a slow dequantize-to-BF16 path meant for testing")
    for g in report.no_kernel:
        where = f" {g.label}" if g.label else ""
        lines.append(f"ERROR: no kernel for {g.role}{where} ({g.decision.op}, {g.decision.weight_format})")
    return lines


# ---------------------------------------------------------------- json
def report_dict(report: Report) -> dict[str, Any]:
    m, p = report.model, report.platform
    layers = []
    for row, d in zip(m.layers, report.decisions):
        layer = row.layer
        layers.append({
            "name": layer.name, "block": row.block, "role": row.role, "op": layer.op,
            "weight_format": layer.weight_format,
            "activation_format": d.activation_format,
            "checkpoint_activation_format": getattr(layer, "activation_format", None),
            "status": d.status, "backend": d.backend, "kernel": d.kernel, "mode": d.mode,
            "candidates": [c.to_dict() for c in d.candidates], "notes": list(d.notes),
            "unquantized_reason": row.quant_note or None, "parts": list(row.parts),
            "shape": layer.model_dump(exclude={"name", "op", "weight_format", "activation_format"}),
        })
    return {
        "model": {"name": m.name, "files": m.files, "architecture": m.architecture, "model_type": m.model_type,
                  "dialect": m.dialect, "quantization": m.dialect_detail, "generic_fallback": m.generic,
                  "example": m.example, "tp": m.tp, "ep": m.ep, "notes": m.notes},
        "platform": {"description": p.describe(), "vendor": p.vendor, "device_name": p.device_name,
                     "capability": list(p.capability) if p.capability else None, "simulated": p.simulated,
                     "preset": p.preset_name, "environment": report.environment},
        "config": {**report.config.describe(), "tp": m.tp, "ep": m.ep, "policy_files": report.policy_files},
        "plugin_errors": report.plugin_errors,
        "layers": layers,
        "summary": report.summary(),
    }


def render_json(report: Report) -> str:
    return json.dumps(report_dict(report), indent=1)


# ---------------------------------------------------------------- markdown
def _md(text: Any) -> str:
    return str(text).replace("|", "\\|")


def render_markdown(report: Report) -> str:
    m = report.model
    out = [f"# oracle explain: {m.name}", "",
           f"- **model**: {m.architecture} (model_type `{m.model_type}`), {len(m.layers)} layers per rank",
           f"- **files**: {', '.join(f'`{f}`' for f in m.files)}",
           f"- **quantization**: {m.dialect}: {_md(m.dialect_detail)}",
           f"- **platform**: {_md(describe_platform(report.platform, report.environment))}",
           f"- **config**: {_md(describe_config(report.config, m))}",
           f"- **policy**: {' < '.join(f'`{f}`' for f in report.policy_files)}"]
    out += [f"- **note**: {_md(n)}" for n in m.notes]
    out += [f"- **plugin error**: {_md(e)}" for e in report.plugin_errors]
    out += ["", "| layers | role | layer | decision | rejected candidates |", "|---|---|---|---|---|"]
    for g in report.groups:
        rejected = "<br>".join(_md(f"{c}: {'; '.join(r)}") for c, r in _rejections(g.decision)) or "-"
        notes = "".join(f"<br>note: {_md(n)}" for n in g.decision.notes)
        out.append(f"| {g.label or '-'} | {g.role} | {_md(describe_layer(g.first.layer))} | "
                   f"{_md(_verdict(g))}{notes} | {rejected} |")
    out += ["", *(_md(line) for line in _summary_lines(report))]
    return "\n".join(out)


RENDERERS = {"text": render_text, "json": render_json, "markdown": render_markdown}


# ---------------------------------------------------------------- command line
def add_parser(subparsers: Any) -> None:
    """Add `explain` (with every option) to the `oracle` command's subparsers."""
    p = subparsers.add_parser(
        "explain", help="which kernel serves each layer of a model, and why not the others",
        description="List every layer of a Hugging Face model (folder, config.json or shipped example name), "
                    "the kernel that would serve it on the chosen GPU, and why every other candidate was "
                    "rejected. Exit 0: every quantized layer has a kernel; 2: some has none; 1: bad input.")
    p.add_argument("--model", required=True, metavar="PATH|NAME",
                   help="a model folder, its config.json, or a shipped example name (e.g. gpt-oss-20b)")
    from .cli import add_platform_options  # --device | --detect, --with-package: as every subcommand has them
    add_platform_options(p)
    p.add_argument("--tp", default="1", metavar="N", help="tensor-parallel size (per-rank shapes)")
    p.add_argument("--ep", default="1", metavar="N", help="expert-parallel size for routed experts")
    for op in ("linear", "moe", "embedding"):
        p.add_argument(f"--{op}-backend", default="auto", metavar="NAME|FMT=NAME,...",
                       help=f"{op} backend: one name, or per-format pairs such as nvfp4=b12x,default=auto")
    p.add_argument("--policy", action="extend", nargs="+", default=[], metavar="FILE",
                   help="policy files merged above the defaults (later wins)")
    p.add_argument("--env", action="extend", nargs="+", default=[], metavar="KEY=VALUE",
                   help="environment switches for the decision, e.g. VLLM_B12X_MOE_FP4_FORCE_A16=1")
    p.add_argument("--format", choices=FORMATS, default="text")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print the report; 0 all served, 2 some layer has no kernel, 1 bad input."""
    try:
        report = report_from_args(args)
        text = RENDERERS[args.format](report)
    except OracleError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(text)
    return report.exit_code


def report_from_args(args: argparse.Namespace) -> Report:
    from .cli import env_from_args, platform_from_args, policy_from_args
    from .models import load_model

    tp = _positive(args.tp, "--tp")
    ep = _positive(args.ep, "--ep")
    model = load_model(args.model, tp=tp, ep=ep)
    config = config_from_args(args)
    platform = platform_from_args(args)
    policy = policy_from_args(args) if args.policy else None
    env = env_from_args(args)
    return build_report(model, platform, config, policy=policy, env=env)


def config_from_args(args: argparse.Namespace) -> Any:
    from pydantic import ValidationError

    from .config import KernelConfig
    values = {f"{op}_backend": getattr(args, f"{op}_backend") for op in ("linear", "moe", "embedding")}
    try:
        config = KernelConfig(**values)
    except ValidationError as exc:
        err = exc.errors()[0]
        name = str(err["loc"][0]) if err["loc"] else "backend"
        message = str(err.get("ctx", {}).get("error", err["msg"]))
        raise InputError(message.split(": ", 1)[-1], field="--" + name.replace("_", "-")) from None
    _check_backend_names(config)
    return config


def _check_backend_names(config: Any) -> None:
    """Every backend named on the command line must exist, even one no layer of this model asks for."""
    from .registry import get_registry
    registry = get_registry()
    for op in ("linear", "moe", "embedding"):
        choice = getattr(config, f"{op}_backend")
        names = choice.values() if isinstance(choice, dict) else [choice]
        for name in names:
            registry.require_backend(name, field=f"--{op}-backend")


def _positive(value: Any, flag: str) -> int:
    try:
        number = int(str(value))
    except ValueError:
        raise InputError(f"expected a positive integer, got {value!r}", field=flag) from None
    if number < 1:
        raise InputError(f"expected a positive integer, got {number}", field=flag)
    return number
