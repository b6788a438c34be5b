"""The bench/ scripts run only on a GPU, so CI would not notice when an engine or plugin name they
import moves or goes away (a function-local import fails only when that benchmark runs). Every
`from oracle... import name` in them, at module level or inside a function, must name something
that exists."""
from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
OURS = ("oracle", "oracle_emulation", "oracle_torch", "oracle_triton", "oracle_b12x")


def _imports():
    for script in sorted(BENCH.glob("*.py")):
        for node in ast.walk(ast.parse(script.read_text(), str(script))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in OURS:
                for alias in node.names:
                    yield pytest.param(node.module, alias.name, id=f"{script.name}:{node.lineno}:{alias.name}")


@pytest.mark.parametrize("module, name", list(_imports()))
def test_bench_scripts_import_names_that_exist(module, name):
    mod = importlib.import_module(module)
    assert hasattr(mod, name) or importlib.util.find_spec(f"{module}.{name}") is not None, \
        f"{module} has no {name}"
