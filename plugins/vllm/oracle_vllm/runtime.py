"""One vLLM model's oracle state in this process: settings, device, decisions, records.

Built on the first layer of a model (inside vLLM's model construction, where
`get_current_vllm_config()` holds the engine's configuration) and kept per VllmConfig, so
several engines in one process each get their own mode and records.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from oracle.integration import records as rec

from .config import OracleVllmConfig, parse
from .mapping import kernel_flags, platform_from_vllm

ENGINE = "vllm"
logger = logging.getLogger("vllm.kernel_oracle")

#: id(VllmConfig) -> (that config, its Run or None for mode off). The config is held so its id cannot be
#: reused by a later engine's config; a few per process at most (one per engine built in it).
_by_id: dict[int, tuple[Any, "Run | None"]] = {}


class Run:
    """The settings, device and kernel config one model is decided with, and the records it left."""

    def __init__(self, config: OracleVllmConfig, vllm_config: Any, warnings: list[str]):
        from oracle.session import load_policy

        self.config = config
        self.mode = config.mode
        self.platform = platform_from_vllm(config.device)
        linear, moe, notes = kernel_flags(getattr(vllm_config, "kernel_config", None))
        self.kernel_config = config.kernel_config(linear, moe)
        self.notes = notes
        self.policy = load_policy(config.policy) if config.policy else None
        self.measurements = tuple(config.measurements) or None
        self.records: list[dict[str, Any]] = []
        self.summarized = False
        for line in warnings + notes:
            logger.warning("kernel-oracle: %s", line)
        logger.info("kernel-oracle: mode %s on %s, kernel config %s", self.mode, self.platform.describe(),
                    self.kernel_config.describe())

    def takes(self, op: str) -> bool:
        """Whether enforce may run the oracle's kernel for layers of `op`."""
        return self.mode == "enforce" and op in self.config.ops

    def decide(self, layer: Any) -> Any:
        from oracle.session import select_backend
        return select_backend(layer, self.platform, self.kernel_config, policy=self.policy,
                              measurements=self.measurements)

    def emit(self, record: dict[str, Any]) -> None:
        self.records.append(record)
        line = rec.dumps(record)
        logger.info("%s", line)
        if self.config.log:
            with Path(self.config.log).open("a") as fh:
                fh.write(line + "\n")

    def summarize(self) -> None:
        if self.summarized or not self.records:
            return
        self.summarized = True
        self.emit(rec.summary_record(self.records, engine=ENGINE, mode=self.mode))


def current() -> Run | None:
    """This model's Run (None: mode off). A bad configuration raises ConfigError (one line)."""
    from vllm.config import get_current_vllm_config_or_none

    vllm_config = get_current_vllm_config_or_none()
    if vllm_config is None:
        return None
    known = _by_id.get(id(vllm_config))
    if known is not None and known[0] is vllm_config:
        return known[1]
    config, warnings = parse(getattr(vllm_config, "additional_config", None) or {})
    run = Run(config, vllm_config, warnings) if config.mode != "off" else None
    _by_id[id(vllm_config)] = (vllm_config, run)
    return run


def latest() -> Run | None:
    """The most recently built Run (the model vLLM is loading now)."""
    for _, run in reversed(list(_by_id.values())):
        if run is not None:
            return run
    return None
