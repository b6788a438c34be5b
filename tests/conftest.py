"""Shared fixtures: a toy plugin registered in-process, and a clean process-wide registry."""
from __future__ import annotations

from pathlib import Path

import pytest

from oracle import hookimpl
from oracle.policy import load_policy
from oracle.registry import Registry
from oracle.session import reset_registry, set_registry

FIXTURES = Path(__file__).parent / "fixtures"


class ToyPlugin:
    """Declares tests/fixtures/toy_kernels.yaml (tier optimized) and a fallback tier."""

    def __init__(self, *files: str):
        self.files = files or ("toy_kernels.yaml", "toy_fallback.yaml")

    @hookimpl
    def register_kernels(self, register):
        for name in self.files:
            register(FIXTURES / name)


@pytest.fixture
def toy_plugin() -> ToyPlugin:
    """A fresh toy plugin object, for tests that build registries with other plugins beside it."""
    return ToyPlugin()


@pytest.fixture
def toy_registry() -> Registry:
    return Registry.from_plugins([("toy", ToyPlugin())])


@pytest.fixture
def toy_policy(toy_registry):
    return load_policy(registry=toy_registry)


@pytest.fixture
def select(toy_registry, toy_policy):
    """select_backend bound to the toy registry and default policy, with an empty environment."""
    from oracle import select_backend

    def run(layer, device="h200", config=None, env=None, policy=None):
        from oracle import Platform
        platform = device if not isinstance(device, str) else Platform.preset(device)
        return select_backend(layer, platform, config, policy=policy or toy_policy, registry=toy_registry,
                              env=env or {})
    return run


@pytest.fixture
def global_toy_registry(toy_registry):
    """Install the toy registry process-wide (for the CLI), and restore afterwards."""
    set_registry(toy_registry)
    yield toy_registry
    reset_registry()
