"""Checkpoint adapters: a quantized checkpoint's tensors -> the kernels' process_weights arguments.

`layouts.LAYOUTS` holds every layout fact (tensor suffix, dtype, shape, conversion) of
every dialect the model front end reads; `adapters.Adapter` applies them to one layer;
`source.TensorSource` reads safetensors shards lazily. Imports no torch at import time.
"""
from . import preflight
from .adapters import DIALECTS, Adapter, adapter_for
from .layouts import LAYOUTS, TensorLayout, render_markdown
from .source import CheckpointError, DictSource, TensorSource

__all__ = ["Adapter", "adapter_for", "DIALECTS", "LAYOUTS", "TensorLayout", "render_markdown",
           "CheckpointError", "DictSource", "TensorSource"]
