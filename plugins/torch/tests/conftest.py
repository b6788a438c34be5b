"""Fixtures for oracle-torch's tests; GPU tests skip cleanly (with the reason) without CUDA."""
from __future__ import annotations

import pytest
import torch

HERE = str(__file__).rsplit("/", 1)[0]


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (torch.cuda.is_available() is False)")
    for item in items:
        if "gpu" in item.keywords and str(item.fspath).startswith(HERE):
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
