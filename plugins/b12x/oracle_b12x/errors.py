"""The one error every b12x access raises when b12x cannot be used here."""
from __future__ import annotations

from oracle.errors import OracleError


class B12xUnavailableError(OracleError, ImportError):
    """b12x (or one of its modules) cannot be used in this environment."""
