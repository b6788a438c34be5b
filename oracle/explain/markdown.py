"""The markdown rendering of an explain report: a table, one row per group."""
from __future__ import annotations

from typing import Any

from .describe import describe_config, describe_layer, describe_platform, rejections, verdict
from .report import Report
from .text import summary_lines
from ..ranking import measured_summary


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
        rejected = "<br>".join(_md(f"{c}: {'; '.join(r)}") for c, r in rejections(g.decision)) or "-"
        notes = "".join(f"<br>note: {_md(n)}" for n in g.decision.notes)
        measured = measured_summary(g.decision)
        notes = (f"<br>measured: {_md(measured)}" if measured else "") + notes
        out.append(f"| {g.label or '-'} | {g.role} | {_md(describe_layer(g.first.layer))} | "
                   f"{_md(verdict(g))}{notes} | {rejected} |")
    out += ["", *(_md(line) for line in summary_lines(report))]
    return "\n".join(out)

