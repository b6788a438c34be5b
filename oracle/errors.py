"""Errors the engine raises on purpose; each message names what, where and what was expected.

The CLI prints `str(error)` on one line block and exits 1; a traceback means a bug.
"""
from __future__ import annotations


class OracleError(Exception):
    """Base of every deliberate error."""


class InputError(OracleError, ValueError):
    """Bad input: a file, field or value that is not what was expected."""

    def __init__(self, message: str, *, source: str | None = None, field: str | None = None):
        self.source = source
        self.field = field
        parts = [p for p in (source, field) if p]
        prefix = ": ".join(parts)
        super().__init__(f"{prefix}: {message}" if prefix else message)


class TensorError(InputError):
    """A tensor handed to a kernel or quantizer that is not what its format prescribes.

    Shared by every plugin (it needs no torch; `oracle.tensors` has the checks that raise it):
    the message names the kernel (`owner`, when given), the tensor, what was expected and what
    came, e.g. "w13_scale: expected shape [32, 5760, 90] ..., got [...]".
    """

    def __init__(self, tensor: str, expected: str, got: str, *, owner: str | None = None):
        self.tensor = tensor
        super().__init__(f"{tensor}: expected {expected}, got {got}", source=owner)


class PolicyError(InputError):
    """A policy or kernel declaration file that does not validate."""


class UnknownBackendError(InputError):
    """A backend name that no registered plugin provides."""


class NoKernelError(OracleError):
    """No candidate could serve a layer; the message lists every candidate and its reason."""

    def __init__(self, message: str, decision=None):
        self.decision = decision
        super().__init__(message)


class CaptureError(OracleError, RuntimeError):
    """Planning or allocation was attempted during CUDA-graph capture."""
