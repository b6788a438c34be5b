"""The plugin's settings: `--additional-config '{"kernel_oracle": {...}}'`, validated.

vLLM hashes `additional_config` into its compile-cache key, so a shadow and an enforce run
never share a compiled graph; that is why the mode is read from there. Environment mirrors
(`ORACLE_VLLM_MODE`, `ORACLE_VLLM_LOG`) exist for development only: they apply when
additional_config has no `kernel_oracle` entry, and an environment `enforce` is downgraded to
`shadow` with a warning (an environment variable is not in the cache key).
"""
from __future__ import annotations

import os
from typing import Any, Literal, Mapping

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from oracle.config import KernelConfig

KEY = "kernel_oracle"
MODE_ENV = "ORACLE_VLLM_MODE"
LOG_ENV = "ORACLE_VLLM_LOG"


class ConfigError(ValueError):
    """A bad `kernel_oracle` entry: one line naming the field and what is expected."""


class OracleVllmConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: Literal["off", "shadow", "enforce"] = "off"
    #: oracle user policy files (as `oracle explain --policy`)
    policy: list[str] = Field(default_factory=list)
    #: oracle backends (names or per-format maps, as KernelConfig); "auto" defers to vLLM's own
    #: --linear-backend/--moe-backend where those name an oracle backend, else to the policy
    linear_backend: str | dict[str, str] = "auto"
    moe_backend: str | dict[str, str] = "auto"
    #: oracle tuning files (measured selection)
    measurements: list[str] = Field(default_factory=list)
    #: what enforce may take over
    ops: list[Literal["linear", "moe"]] = Field(default_factory=lambda: ["linear", "moe"])
    #: a layer the oracle cannot serve or whose parameters cannot be converted: keep vLLM's kernel, or stop
    on_unconvertible: Literal["keep_vllm", "error"] = "keep_vllm"
    #: JSON-lines file the per-layer records are appended to (they also go to vLLM's log)
    log: str | None = None
    #: shadow only: decide for a named device (an oracle preset such as "h200") instead of vLLM's
    device: str | None = None

    @field_validator("linear_backend", "moe_backend")
    @classmethod
    def _backend(cls, value: Any, info: Any) -> Any:
        KernelConfig(**{info.field_name: value})      # the oracle's own rules for names and per-format maps
        return value

    def kernel_config(self, linear: str | dict[str, str] | None = None,
                      moe: str | dict[str, str] | None = None) -> KernelConfig:
        return KernelConfig(linear_backend=linear if self.linear_backend == "auto" and linear else self.linear_backend,
                            moe_backend=moe if self.moe_backend == "auto" and moe else self.moe_backend)


def parse(additional_config: Mapping[str, Any] | None, env: Mapping[str, str] = os.environ
          ) -> tuple[OracleVllmConfig, list[str]]:
    """The settings and the warnings about them; ConfigError (one line) for a bad entry."""
    warnings: list[str] = []
    raw = (additional_config or {}).get(KEY)
    if raw is None:
        mode = env.get(MODE_ENV, "").strip() or "off"
        if mode == "enforce":
            warnings.append(f"{MODE_ENV}=enforce is not in vLLM's compile-cache key; running shadow. Pass "
                            f"--additional-config '{{\"{KEY}\": {{\"mode\": \"enforce\"}}}}' to enforce")
            mode = "shadow"
        raw = {"mode": mode}
        if env.get(LOG_ENV):
            raw["log"] = env[LOG_ENV]
        where = MODE_ENV
    else:
        where = f"--additional-config {KEY}"
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: expected a JSON object such as {{\"mode\": \"shadow\"}}, "
                          f"got {type(raw).__name__}")
    try:
        config = OracleVllmConfig.model_validate(dict(raw))
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"]) or "entry"
        raise ConfigError(f"{where}: {field}: {err['msg']} (got {err.get('input')!r:.80})") from None
    if config.device and config.mode == "enforce":
        raise ConfigError(f"{where}: device: a named device describes another machine; it is for shadow "
                          "reports only (enforce runs on vLLM's device)")
    return config, warnings
