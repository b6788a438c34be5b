"""vLLM's compressed-tensors config, re-registered under its own name so each layer passes through
`methods`: `get_quant_method` returns vLLM's method, wrapped (shadow, enforce) or as is (off).

The front end pickles the config to the engine-core process before that process loads
plugins; `__reduce__` rebuilds it from this module's class, which delegates to vLLM's until
the plugin's settings say otherwise, so the pickle is valid in any process.
"""
from __future__ import annotations

from typing import Any

from vllm.model_executor.layers.quantization.compressed_tensors.compressed_tensors import CompressedTensorsConfig

from . import runtime, selectors
from .mapping import moe_backend_of
from .methods import LayerState, OracleLinearMethod, OracleMoEMethod, wrap

NAME = "compressed-tensors"


def _rebuild(state: dict[str, Any]) -> "OracleCompressedTensorsConfig":
    obj = OracleCompressedTensorsConfig.__new__(OracleCompressedTensorsConfig)
    obj.__dict__.update(state)
    return obj


def _moe_backend_name(method: Any) -> str | None:
    """vLLM's MoE choice: the `*MoeBackend` enum member a method keeps, with its experts class."""
    from enum import Enum
    backend = next((v for v in vars(method).values() if isinstance(v, Enum) and "backend" in type(v).__name__.lower()),
                   None)
    experts = getattr(method, "experts_cls", None)
    if backend is None and experts is None:
        return None
    value = getattr(backend, "value", None)
    if value in (None, "NONE") and experts is None:
        return None
    return f"{type(backend).__name__}.{value}" + (f" ({experts.__name__})" if experts is not None else "")


class OracleCompressedTensorsConfig(CompressedTensorsConfig):
    """vLLM's CompressedTensorsConfig whose quantized linear and MoE methods report to (and, in
    enforce, run) the oracle."""

    def __reduce__(self) -> Any:
        return _rebuild, (dict(self.__dict__),)

    def get_quant_method(self, layer: Any, prefix: str) -> Any:
        run = runtime.current()
        if run is None:
            return super().get_quant_method(layer, prefix)
        from vllm.model_executor.layers.fused_moe import RoutedExperts
        from vllm.model_executor.layers.fused_moe.fused_moe_method_base import FusedMoEMethodBase
        from vllm.model_executor.layers.linear import LinearBase, UnquantizedLinearMethod

        capture = None
        if isinstance(layer, RoutedExperts):
            selectors.install()
            capture = selectors.Capture(tolerate=run.mode == "shadow" or run.takes("moe"))
        selectors.capturing(capture)
        try:
            method = super().get_quant_method(layer, prefix)
        finally:
            selectors.capturing(None)
        if isinstance(layer, LinearBase) and method is not None and getattr(layer, "scheme", None) is not None \
                and not isinstance(method, UnquantizedLinearMethod) and hasattr(method, "create_weights"):
            if type(method).__name__ != "CompressedTensorsLinearMethod":
                return method          # transforms (e.g. Hadamard-rotated layers) stay vLLM's, unreported
            return wrap(method, OracleLinearMethod, LayerState(run, "linear", prefix))
        if capture is not None and isinstance(method, FusedMoEMethodBase) and capture.weight_key is not None:
            state = LayerState(run, "moe", getattr(layer, "layer_name", prefix) or prefix)
            state.capture = capture
            state.engine_error = capture.error          # set: the backend it keeps is our placeholder
            state.engine_kernel = None if capture.error else _moe_backend_name(method)
            backend = next((v for v in vars(method).values() if "backend" in type(v).__name__.lower()), None)
            state.engine_backend = moe_backend_of(backend) if state.engine_kernel else None
            return wrap(method, OracleMoEMethod, state)
        return method
