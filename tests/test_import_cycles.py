"""No import cycles anywhere in the engine or the shipped plugins.

grimp (the import-graph builder behind import-linter) reads every module's imports,
function-local ones included, since those form cycles just the same; the standard
library's graphlib then finds any cycle. Imports under `if TYPE_CHECKING:` never run
and are left out.
"""
from __future__ import annotations

import graphlib

import grimp
import pytest

PACKAGES = ("oracle", "oracle_emulation", "oracle_b12x", "oracle_torch")


def import_cycle(package: str) -> list[str] | None:
    graph = grimp.build_graph(package, exclude_type_checking_imports=True)
    edges = {m: graph.find_modules_directly_imported_by(m) for m in graph.modules}
    try:
        tuple(graphlib.TopologicalSorter(edges).static_order())
    except graphlib.CycleError as exc:
        return list(exc.args[1])
    return None


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_cycle(package):
    cycle = import_cycle(package)
    assert cycle is None, "import cycle: " + " -> ".join(reversed(cycle))


def test_the_check_sees_a_cycle(tmp_path, monkeypatch):
    pkg = tmp_path / "cyclic_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from . import b\n")   # function-local imports count too
    (pkg / "b.py").write_text("from .a import f\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert set(import_cycle("cyclic_pkg")) == {"cyclic_pkg.a", "cyclic_pkg.b"}


def test_every_engine_module_imports_without_heavy_packages():
    """Every oracle module imports (in a fresh interpreter, in name order) and none pulls in torch."""
    import subprocess
    import sys

    graph = grimp.build_graph("oracle", exclude_type_checking_imports=True)
    # the hf extra's loader and torch modules are torch code by nature; `import oracle.hf` and the
    # `oracle run` command stay torch-free (tests/test_checkpoints_layouts.py)
    optional = ("oracle.hf.loader", "oracle.hf.modules", "oracle.hf.decode", "oracle.integration.ops")
    modules = sorted(m for m in graph.modules if not m.endswith("__main__") and m not in optional)
    code = ("import importlib, sys\n"
            f"for name in {modules!r}:\n"
            "    importlib.import_module(name)\n"
            "print(sorted(m for m in ('torch', 'b12x', 'triton', 'flashinfer') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    assert len(modules) > 40
