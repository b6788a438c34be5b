"""Environment switches, parsed strictly: documented values only, a warning for anything else.

`VLLM_B12X_MOE_FP4_FORCE_A16=banana` used to mean "off" without a word. Now a switch is
on for "1", off for "0", "" or unset, and any other value is off *with* an
`OracleEnvWarning` naming the variable, the value and the documented values. Kernel lists
(`ORACLE_DISABLED_KERNELS`) warn about names no plugin declares (with a did-you-mean).
The environment of the decision in progress is available to plugin hooks through
`decision_env()`, so a hook reads the `env=` the caller passed, not `os.environ`.

Every variable the engine reads is named here, once (the policy's force-A16 switches are data in
policies/default.yaml; a plugin's own switches live in that plugin).
"""
from __future__ import annotations

import contextvars
import os
import warnings
from typing import Any, Iterable, Mapping

from .names import suggestion

ON, OFF = "1", ("0", "")
DISABLED_KERNELS = "ORACLE_DISABLED_KERNELS"   # kernels never selected, beside the policy's list
MEASUREMENTS = "ORACLE_MEASUREMENTS"           # tuning files (path-separated) selection ranks by
LOAD_PLUGINS = "ORACLE_LOAD_PLUGINS"           # the plugin allow-list (unset: all; "": none)
DEBUG = "ORACLE_DEBUG"                         # "1": internal errors print their traceback
EAGER_GRAPHS = "ORACLE_EAGER_GRAPHS"           # "0": eager kernel calls never replay a private CUDA graph
ROUTER_TOPK = "ORACLE_ROUTER_TOPK"             # "0": compiled decode steps keep torch.topk (oracle.hf.topk)


class OracleEnvWarning(UserWarning):
    """An environment value that is not one of the documented values (it is ignored)."""


def flag(env: Mapping[str, str], name: str) -> bool:
    """Whether switch `name` is on: "1" on; "0", "" or unset off; anything else off, with a warning."""
    value = env.get(name)
    if value is None or value in OFF:
        return False
    if value == ON:
        return True
    warnings.warn(f"{name}={value!r} is not a documented value (1 = on; 0 or unset = off); treated as off",
                  OracleEnvWarning, stacklevel=2)
    return False


def kernel_list(env: Mapping[str, str], name: str, known: Iterable[str]) -> set[str]:
    """Comma-separated kernel names in `name`; unknown ones warn (with a hint) and are dropped."""
    value = env.get(name)
    if not value:
        return set()
    known = set(known)
    out: set[str] = set()
    for item in (part.strip() for part in value.split(",")):
        if not item:
            continue
        if item in known:
            out.add(item)
        else:
            warnings.warn(f"{name}: no registered kernel is named {item!r}, so it disables nothing"
                          f"{suggestion(item, known)}", OracleEnvWarning, stacklevel=2)
    return out


_current: contextvars.ContextVar[Mapping[str, str] | None] = contextvars.ContextVar("oracle_decision_env",
                                                                                    default=None)


def decision_env() -> Mapping[str, str]:
    """The environment of the decision being made (the caller's `env=`), else os.environ."""
    env = _current.get()
    return os.environ if env is None else env


def set_decision_env(env: Mapping[str, str]) -> Any:
    """Make `env` what `decision_env()` returns until `reset_decision_env(token)` (a plain pair, not a
    context manager: it runs once per uncached decision)."""
    return _current.set(env)


def reset_decision_env(token: Any) -> None:
    _current.reset(token)
