"""The text rendering of an explain report, for a person at a terminal."""
from __future__ import annotations

from .describe import describe_config, describe_layer, describe_platform, rejections, verdict
from .report import Report
from ..ranking import measured_summary


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
        out.append(f"  -> {verdict(g)}")
        measured = measured_summary(g.decision)
        if measured:
            out.append(f"     measured: {measured}")
        for candidate, reasons in rejections(g.decision):
            if len(reasons) == 1:
                out.append(f"     - {candidate}: {reasons[0]}")
            else:
                out.append(f"     - {candidate}:")
                out += [f"         {r}" for r in reasons]
        for note in g.decision.notes:
            out.append(f"     note: {note}")
    out.append("")
    out += summary_lines(report)
    return "\n".join(out)


def summary_lines(report: Report) -> list[str]:
    s = report.summary()
    parts = [f"{n} {b}" for b, n in s["by_backend"].items()]
    parts.append(f"{s['unquantized']} unquantized")
    parts.append(f"{s['no_kernel']} without a kernel")
    lines = [f"summary: {s['layers']} layers: " + ", ".join(parts)]
    for g in report.testing_only:
        where = f" {g.label}" if g.label else ""
        note = g.decision.spec.note if g.decision.spec is not None and g.decision.spec.note else "meant for testing"
        lines.append(f"WARNING: fallback to a testing-only kernel: {g.role}{where} -> {g.decision.kernel} ({note})")
    for g in report.no_kernel:
        where = f" {g.label}" if g.label else ""
        lines.append(f"ERROR: no kernel for {g.role}{where} ({g.decision.op}, {g.decision.weight_format})")
    coverage = getattr(report.model, "coverage", None)
    if coverage is not None:
        lines += [f"WARNING: {w}" for w in coverage.warnings]
        lines += [f"ERROR: {coverage.error}"] if coverage.error else []
    return lines
