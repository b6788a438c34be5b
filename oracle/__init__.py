"""kernel-oracle: declarative, pluggable, explainable kernel selection for quantized layers.

`import oracle` is cheap: it imports neither torch nor any plugin. Plugins load on the
first selection (or `oracle.session.get_registry()`); `oracle.session` holds every piece
of process-wide state.
"""
from .config import KernelConfig
from .errors import InputError, NoKernelError, OracleError, PolicyError, UnknownBackendError
from .hookspecs import hookimpl
from .layer import EmbeddingLayer, LinearLayer, MoELayer
from .platform import Platform
from .session import reload, select_backend, select_backend_or_raise
from .trace import Candidate, Decision

from .version import __version__
__all__ = [
    "Candidate", "Decision", "EmbeddingLayer", "InputError", "KernelConfig", "LinearLayer", "MoELayer",
    "NoKernelError", "OracleError", "Platform", "PolicyError", "UnknownBackendError", "hookimpl", "reload",
    "select_backend", "select_backend_or_raise", "__version__",
]
