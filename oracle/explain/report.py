"""The report of `oracle explain`: one decision per layer of a model, grouped, with a summary.

A pure function of what it is given (model, engine, platform, config, environment);
`oracle.explain.build_report` is the convenience that takes the engine from the session.
Exit codes: 0 when every quantized layer has a kernel, 2 when some has none, 1 when the
checkpoint declares quantization but no derived layer is quantized (printed too).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from .describe import is_testing_only
from .grouping import Group, group_layers


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
    def testing_only(self) -> list[Group]:
        """Groups served by a kernel meant for testing (a fallback worth a warning)."""
        return [g for g in self.groups if g.decision.status == "selected" and is_testing_only(g.decision)]

    @property
    def exit_code(self) -> int:
        if self.coverage_error:
            return 1
        return 2 if self.no_kernel else 0

    @property
    def coverage_error(self) -> str | None:
        """The model declares quantization but no derived layer is quantized (models.coverage)."""
        coverage = getattr(self.model, "coverage", None)
        return coverage.error if coverage is not None else None

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
                                    for g in self.testing_only],
            "without_kernel": [{"role": g.role, "layers": g.label, "count": g.count} for g in self.no_kernel],
            "coverage": self.model.coverage.to_dict() if getattr(self.model, "coverage", None) else None,
            "exit_code": self.exit_code,
        }


    @classmethod
    def build(cls, model: Any, engine: Any, platform: Any, config: Any, env: Mapping[str, str],
              measurements: Any = None) -> "Report":
        """Decide every layer of `model` with `engine`; layers sharing a signature share one decision."""
        decisions = [engine.select(row.layer, platform, config, env, measurements) for row in model.layers]
        report = cls(model=model, platform=platform, config=config, policy_files=list(engine.policy.files),
                     decisions=decisions, plugin_errors=[str(f) for f in engine.registry.failures],
                     environment=engine.environment(platform))
        report.groups = group_layers(model.layers, decisions)
        return report
