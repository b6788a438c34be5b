"""`oracle explain`'s report: every layer of a model, the kernel that would serve it, and why not the others.

`report` builds the data (one decision per layer), `grouping` folds identical layers
into groups, `describe` writes the shared one-liners, and `text`, `json_report` and
`markdown` render it. The command itself lives in `oracle.cli.explain`.
"""
from __future__ import annotations

import os
from typing import Any, Mapping

from ..config import KernelConfig
from ..session import measurement_set, session_for
from .grouping import Group, block_label, generic_note, group_layers
from .json_report import render_json, report_dict
from .markdown import render_markdown
from .report import Report
from .text import render_text

FORMATS = ("text", "json", "markdown")
RENDERERS = {"text": render_text, "json": render_json, "markdown": render_markdown}


def build_report(model: Any, platform: Any, config: Any = None, *, policy: Any = None,
                 env: Mapping[str, str] | None = None, registry: Any = None, measurements: Any = None) -> Report:
    """Decide every layer of `model` on `platform` with the session's engine for `policy` and `registry`."""
    engine = session_for(registry).engine(policy)
    return Report.build(model, engine, platform, config or KernelConfig(), os.environ if env is None else env,
                        measurement_set(measurements))


__all__ = ["FORMATS", "RENDERERS", "Group", "Report", "block_label", "build_report", "generic_note",
           "group_layers", "render_json", "render_markdown", "render_text", "report_dict"]
