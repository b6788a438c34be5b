"""Fixtures for the emulation plugin's tests; GPU tests skip cleanly without CUDA."""
from __future__ import annotations

import pytest
import torch


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (torch.cuda.is_available() is False)")
    for item in items:
        if "gpu" in item.keywords and str(item.fspath).startswith(str(__file__).rsplit("/", 1)[0]):
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture(scope="session")
def emulation_specs():
    """The plugin's KernelSpecs by name, loaded from its shipped kernels.yaml as the engine does."""
    from emulation_helpers import load_specs
    return load_specs()
