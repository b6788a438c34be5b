"""vLLM's entry point (`vllm.general_plugins`): runs in every vLLM process, never raises.

It re-registers vLLM's compressed-tensors config under its own name (the class delegates
to vLLM's until the settings in `--additional-config` ask for shadow or enforce: in the
front end, where this runs, no VllmConfig exists yet to read them from) and wraps the
model loader's post-load step so each model's summary record is written when loading ends.
Anything that goes wrong is logged on one line and leaves vLLM as it was.
"""
from __future__ import annotations

import logging
import sys

logger = logging.getLogger("vllm.kernel_oracle")
_done = False


def register() -> None:
    """Install the plugin in this process (idempotent). Never raises: vLLM calls it unguarded."""
    global _done
    if _done:
        return
    try:
        _install()
        _done = True
    except Exception as exc:  # noqa: BLE001 - an exception here would abort vLLM (plugins/__init__.py:90)
        text = str(exc).strip().splitlines()
        logger.warning("kernel-oracle: not installed in this process (%s: %s); vLLM runs unchanged",
                       type(exc).__name__, text[0] if text else "")


def _install() -> None:
    from vllm.model_executor.layers.quantization import register_quantization_config

    from .quant_config import NAME, OracleCompressedTensorsConfig
    register_quantization_config(NAME)(OracleCompressedTensorsConfig)
    _wrap_post_load()


def _wrap_post_load() -> None:
    """Every binding of model_loader.utils.process_weights_after_loading: call it, then write the summary."""
    from vllm.model_executor.model_loader import utils

    original = getattr(utils.process_weights_after_loading, "__wrapped__", utils.process_weights_after_loading)

    def process_weights_after_loading(*args, **kwargs):
        try:
            return original(*args, **kwargs)
        finally:                     # also when a layer fails: the report up to there is the useful part
            from . import runtime
            run = runtime.latest()
            if run is not None:
                run.summarize()

    process_weights_after_loading.__wrapped__ = original  # type: ignore[attr-defined]
    for module in list(sys.modules.values()):
        if getattr(module, "__name__", "").startswith("vllm") and \
                getattr(module, "process_weights_after_loading", None) is original:
            module.process_weights_after_loading = process_weights_after_loading
