"""Shared fixtures. b12x (through cutlass) creates cache folders under $TMPDIR at import,
so TMPDIR is pinned to a throw-away folder before any test module can import it."""
from __future__ import annotations

import os
import shutil
import tempfile

import pytest

_SCRATCH = tempfile.mkdtemp(prefix="oracle-b12x-tests-")
os.environ["TMPDIR"] = _SCRATCH
os.environ.setdefault("B12X_COMPILE_CACHE_DIR", os.path.join(_SCRATCH, "b12x-compile"))
tempfile.tempdir = _SCRATCH

from b12x_test_helpers import CONFORMANCE_COUNTS, load_specs


@pytest.fixture(scope="session")
def b12x_specs():
    """The plugin's KernelSpecs, loaded the way the engine loads them."""
    return load_specs()


def pytest_terminal_summary(terminalreporter):
    """Conformance counts, with the b12x provider they were measured against."""
    if not CONFORMANCE_COUNTS:
        return
    import json

    try:
        from oracle_b12x.provider import active_provider
        where = active_provider().describe()
    except Exception as exc:  # noqa: BLE001 - report, never fail the summary
        where = f"unavailable ({exc})"
    report = {"b12x_provider": where, **CONFORMANCE_COUNTS}
    terminalreporter.write_line("b12x conformance counts: " + json.dumps(report))
    path = os.environ.get("ORACLE_CONFORMANCE_COUNTS")
    if path:
        with open(path, "w") as fh:
            json.dump(report, fh, indent=2)


def pytest_sessionfinish(session, exitstatus):
    """Remove the scratch folder (and the caches b12x made in it)."""
    shutil.rmtree(_SCRATCH, ignore_errors=True)
