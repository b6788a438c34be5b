"""Repository-wide pytest hook: tests marked `gpu` skip, with the reason, where CUDA is absent.

One place for every suite (engine and plugins); torch is imported only when such a test was collected.
"""
from __future__ import annotations

import pytest


def pytest_collection_modifyitems(config, items):
    gpu_items = [item for item in items if "gpu" in item.keywords]
    if not gpu_items:
        return
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (torch.cuda.is_available() is False)")
    for item in gpu_items:
        item.add_marker(skip)
