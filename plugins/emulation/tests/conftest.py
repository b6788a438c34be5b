"""Fixtures for the emulation plugin's tests; GPU tests skip cleanly without CUDA."""
from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture(scope="session")
def emulation_specs():
    """The plugin's KernelSpecs by name, loaded from its shipped kernels.yaml as the engine does."""
    from emulation_helpers import load_specs
    return load_specs()
