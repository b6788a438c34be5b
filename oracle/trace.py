"""Decisions and their traces: what was chosen, and why every other candidate was not."""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Literal

import structlog

from .errors import NoKernelError

Verdict = Literal["selected", "rejected"]
Stage = Literal["platform", "constraint", "policy", "measurement"]
Status = Literal["selected", "unquantized", "no_kernel"]
#: How the kernel was chosen: the caller named its backend, measured time ranked it first, or the
#: policy's ordering reached it.
SelectedBy = Literal["explicit", "measured", "policy"]

_stdlib_logger = logging.getLogger("oracle.decisions")
# A library logs; the application decides where it goes (`oracle --log-decisions` does).
logging.getLogger("oracle").addHandler(logging.NullHandler())
_log = structlog.wrap_logger(
    _stdlib_logger,
    processors=[
        structlog.stdlib.filter_by_level,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso"),
        structlog.processors.JSONRenderer(sort_keys=True),
    ],
    wrapper_class=structlog.stdlib.BoundLogger,
).bind()  # bind once: the lazy proxy would build a new logger on every call


@dataclass(frozen=True, slots=True)
class Candidate:
    """One (kernel, mode) the engine considered, and its verdict."""

    backend: str
    kernel: str
    mode: str | None
    activation_format: str | None
    verdict: Verdict
    stage: Stage | None
    reason: str
    rule: str
    reasons: tuple[str, ...] = ()      # every failing reason (reason is the first)
    rules: tuple[str, ...] = ()
    #: measured times from tuning files: (M, median ms, "graph" | "eager"), by M
    timings: tuple[tuple[int, float, str], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out = {"backend": self.backend, "kernel": self.kernel, "mode": self.mode,
               "activation_format": self.activation_format, "verdict": self.verdict,
               "stage": self.stage, "reason": self.reason, "rule": self.rule}
        if len(self.reasons) > 1:
            out["reasons"] = [{"reason": r, "rule": s} for r, s in zip(self.reasons, self.rules)]
        if self.timings:
            out["measured"] = [{"m": m, "ms": ms, "method": how} for m, ms, how in self.timings]
        return out

    def line(self) -> str:
        mode = f" [{self.mode}]" if self.mode else ""
        act = f" A={self.activation_format}" if self.activation_format else ""
        stage = f"{self.stage}: " if self.stage else ""
        text = "; ".join(self.reasons) if len(self.reasons) > 1 else self.reason
        return f"{self.kernel}{mode}{act}: {stage}{text} ({self.rule})"


@dataclass(frozen=True)
class Decision:
    """The engine's answer for one layer signature; pure data, shared by every layer with that signature.

    It deliberately holds no layer: one cached Decision serves all layers of a signature, so
    anything that names a layer (`explain`, `instantiate`) takes the layer from the caller.
    """

    status: Status
    op: str
    weight_format: str
    backend: str | None = None
    kernel: str | None = None
    mode: str | None = None
    activation_format: str | None = None
    candidates: tuple[Candidate, ...] = ()
    notes: tuple[str, ...] = ()
    requested_backend: str = "auto"
    #: how the kernel was chosen: an explicit backend request, the policy order, or measured time
    selected_by: SelectedBy | None = None   # None unless status is "selected"
    platform: Any = field(default=None, repr=False, compare=False)
    spec: Any = field(default=None, repr=False, compare=False)
    mode_spec: Any = field(default=None, repr=False, compare=False)

    @property
    def ok(self) -> bool:
        return self.status != "no_kernel"

    @property
    def rejected(self) -> tuple[Candidate, ...]:
        return tuple(c for c in self.candidates if c.verdict == "rejected")

    @property
    def testing_only(self) -> bool:
        return bool(self.spec is not None and self.spec.testing_only)

    def instantiate(self, layer: Any) -> Any:
        """Import the chosen kernel's implementation and build it for `layer` (the one asked about)."""
        if self.status != "selected":
            raise NoKernelError(f"cannot instantiate a decision with status {self.status!r}:\n"
                                f"{self.explain(layer)}", self)
        cls = self.spec.load_implementation()
        return cls(layer, self.mode_spec, self.spec)

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "op": self.op, "weight_format": self.weight_format,
                "backend": self.backend, "kernel": self.kernel, "mode": self.mode,
                "activation_format": self.activation_format, "requested_backend": self.requested_backend,
                "selected_by": self.selected_by, "candidates": [c.to_dict() for c in self.candidates],
                "notes": list(self.notes)}

    def explain(self, layer: Any = None) -> str:
        """The decision as text, headed by `layer`'s name (or "layer" when none is given)."""
        name = getattr(layer, "name", "") or "layer"
        head = f"{name} ({self.op}, {self.weight_format} weights): "
        if self.status == "selected":
            head += f"{self.kernel} [{self.mode}] activations {self.activation_format}"
        elif self.status == "unquantized":
            head += "unquantized, no quantized kernel needed"
        else:
            head += "NO KERNEL"
        lines = [head]
        lines += [f"  - {c.line()}" for c in self.rejected]
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.explain()


def log_decision(decision: Decision, layer: Any) -> None:
    """One event per decision (named after the layer that caused it); each rejected candidate at debug level."""
    if not _stdlib_logger.isEnabledFor(logging.WARNING if decision.status == "no_kernel" else logging.DEBUG):
        return
    name = getattr(layer, "name", "")
    for c in decision.rejected:
        _log.debug("candidate_rejected", layer=name, kernel=c.kernel, mode=c.mode, stage=c.stage,
                   reason=c.reason, rule=c.rule)
    level = _log.warning if decision.status == "no_kernel" else _log.info
    level("decision", layer=name, op=decision.op, weight_format=decision.weight_format,
          status=decision.status, backend=decision.backend, kernel=decision.kernel, mode=decision.mode,
          activation_format=decision.activation_format, selected_by=decision.selected_by,
          rejected=len(decision.rejected),
          notes=list(decision.notes))
