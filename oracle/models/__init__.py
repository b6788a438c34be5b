"""Model front end: a Hugging Face config.json -> the layers one rank asks kernels for.

`load_model("path/or/example-name", tp=1, ep=1)` returns a `Model` whose `layers` are
`ModelLayer`s pairing each `oracle.layer` spec with its block index and role, and whose
`coverage` says whether every name the quantization config uses exists among them. See
`architectures` for the fusion and parallelism choices, `meta` for model types outside the
tables (transformers' own classes on the meta device), `quant` for the dialects,
`checkpoint_names` for which checkpoint names stand for each module (shared with checkpoint
loading) and `coverage` for the check.
"""
from .build import load_model, model_from_files
from .checkpoint_names import CheckpointNames
from .coverage import Coverage, Unmatched
from .model import Model, ModelLayer, Module, Quant
from .source import example_names, load_model_files

__all__ = ["load_model", "model_from_files", "CheckpointNames", "Coverage", "Unmatched", "Model", "ModelLayer", "Module", "Quant",
           "example_names", "load_model_files"]
