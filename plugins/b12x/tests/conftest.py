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

from b12x_test_helpers import load_specs


@pytest.fixture(scope="session")
def b12x_specs():
    """The plugin's KernelSpecs, loaded the way the engine loads them."""
    return load_specs()


def pytest_sessionfinish(session, exitstatus):
    """Remove the scratch folder (and the caches b12x made in it)."""
    shutil.rmtree(_SCRATCH, ignore_errors=True)
