"""kernel-oracle: declarative, pluggable, explainable kernel selection for quantized layers.

`import oracle` is cheap: it imports neither torch nor any plugin. Plugins load on the
first selection (or `oracle.registry.get_registry()`).
"""
from .config import KernelConfig
from .engine import reload, select_backend, select_backend_or_raise
from .errors import InputError, NoKernelError, OracleError, PolicyError, UnknownBackendError
from .hookspecs import hookimpl
from .layer import EmbeddingLayer, LinearLayer, MoELayer
from .platform import Platform
from .trace import Candidate, Decision

__version__ = "0.1.0"
__all__ = [
    "Candidate", "Decision", "EmbeddingLayer", "InputError", "KernelConfig", "LinearLayer", "MoELayer",
    "NoKernelError", "OracleError", "Platform", "PolicyError", "UnknownBackendError", "hookimpl", "reload",
    "select_backend", "select_backend_or_raise", "__version__",
]
