"""Fixtures for oracle-torch's tests; GPU tests skip without CUDA through the repository's conftest.py."""
from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
