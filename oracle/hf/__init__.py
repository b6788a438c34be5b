"""oracle.hf: quantized checkpoints -> transformers models whose quantized modules run oracle kernels.

The optional extra `kernel-oracle[hf]` (transformers, safetensors); transformers is imported
only inside this package, and only when `load_quantized` runs.
"""
from __future__ import annotations

from typing import Any


def load_quantized(path: Any, **kwargs: Any) -> Any:
    """See oracle.hf.loader.load_quantized."""
    from .loader import load_quantized as _load
    return _load(path, **kwargs)


__all__ = ["load_quantized"]
