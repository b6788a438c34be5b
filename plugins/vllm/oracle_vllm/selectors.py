"""Wrappers around vLLM's MoE backend selectors: capture the layer's QuantKeys, and in enforce
turn "vLLM has no kernel" into a recorded fact (enforce: the oracle serves the layer; shadow:
vLLM's error is raised after loading, once every layer is in the report).

vLLM's MoE methods compute their weight/activation QuantKeys as locals of `__init__` and pass
them to `select_*_moe_backend`; the wrapper keeps the last call's keys for the layer being
built. Some selectors raise when no backend fits (WNA16: NotImplementedError on CPU); for an op
enforce takes over, the wrapper returns a placeholder backend instead, so the layer reaches the
oracle rather than aborting engine start. Every `from x import select_...` binding in vLLM's
loaded modules is replaced (vLLM has no hook registry).
"""
from __future__ import annotations

import sys
import threading
from typing import Any, Callable

_local = threading.local()
_installed = False

#: selector name -> (module of the original, placeholder factory returning (backend, experts_cls))
SELECTORS: dict[str, tuple[str, Callable[[], tuple[Any, Any]]]] = {}


def _fp8_placeholder() -> tuple[Any, Any]:
    from vllm.model_executor.layers.fused_moe.oracle.fp8 import Fp8MoeBackend
    return Fp8MoeBackend.NONE, None


def _wna16_placeholder() -> tuple[Any, Any]:
    from vllm.model_executor.layers.fused_moe.oracle.int_wna16 import WNA16MoEBackend
    return WNA16MoEBackend.EMULATION, None      # not Marlin: no Marlin-only checks in the method's __init__


SELECTORS.update({
    "select_fp8_moe_backend": ("vllm.model_executor.layers.fused_moe.oracle.fp8", _fp8_placeholder),
    "select_wna16_moe_backend": ("vllm.model_executor.layers.fused_moe.oracle.int_wna16", _wna16_placeholder),
})


class Capture:
    """What one MoE method's construction told its selector (set around vLLM's get_quant_method)."""

    def __init__(self, tolerate: bool):
        self.tolerate = tolerate        # record vLLM's "no backend" and go on (see LayerState.tolerates)
        self.weight_key: Any = None
        self.activation_key: Any = None
        self.group_size: int | None = None
        self.error: str | None = None


def capturing(capture: Capture | None) -> None:
    _local.capture = capture


def _wrap(name: str, original: Callable, placeholder: Callable[[], tuple[Any, Any]]) -> Callable:
    def selector(*args: Any, **kwargs: Any) -> Any:
        capture: Capture | None = getattr(_local, "capture", None)
        if capture is not None:
            capture.weight_key = kwargs.get("weight_key")
            capture.activation_key = kwargs.get("activation_key")
            qc = kwargs.get("quant_config")
            capture.group_size = getattr(qc, "group_size", None)
        try:
            return original(*args, **kwargs)
        except Exception as exc:
            if capture is None or not capture.tolerate:
                raise
            capture.error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            return placeholder()

    selector.__wrapped__ = original  # type: ignore[attr-defined]
    selector.__name__ = name
    return selector


def install() -> None:
    """Replace every binding of each selector in vLLM's loaded modules (idempotent)."""
    global _installed
    if _installed:
        return
    import importlib
    for name, (module_name, placeholder) in SELECTORS.items():
        module = importlib.import_module(module_name)
        original = getattr(module, name)
        original = getattr(original, "__wrapped__", original)
        wrapped = _wrap(name, original, placeholder)
        for mod in list(sys.modules.values()):
            if getattr(mod, "__name__", "").startswith("vllm") and getattr(mod, name, None) is original:
                setattr(mod, name, wrapped)
    _installed = True
