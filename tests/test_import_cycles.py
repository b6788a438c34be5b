"""No import loop in the engine or any plugin: not between packages, not between the engine's parts,
not between files.

grimp (the import-graph builder behind import-linter) reads every module's imports, function-local
ones included, since those form loops just the same; the standard library's graphlib then finds any
loop. Imports under `if TYPE_CHECKING:` never run and are left out. The plugin packages are found
in the checkout (plugins/*/oracle_*), so a new plugin is covered without editing this file.

Three levels, each printed (`pytest -s tests/test_import_cycles.py`):
  packages  oracle and each plugin package: the engine never imports a plugin
  parts     oracle's top-level modules and subpackages (oracle.cli, oracle.engine, ...), each plugin
            as one part: the layering docs/architecture.md describes
  files     every module
"""
from __future__ import annotations

import graphlib
import os
from pathlib import Path

import pytest

if os.environ.get("CI"):
    import grimp  # scripts/dev-setup installs it: CI never skips this file
else:  # e.g. the lent GPU machine, where scripts/gpu-check collects every test module for `-m gpu`
    grimp = pytest.importorskip("grimp", reason="grimp builds the import graph (scripts/dev-setup installs it)")

ROOT = Path(__file__).resolve().parents[1]
PLUGIN_PACKAGES = tuple(sorted(p.parent.name for p in ROOT.glob("plugins/*/oracle_*/__init__.py")))
PACKAGES = ("oracle", *PLUGIN_PACKAGES)


def build(*packages: str) -> grimp.ImportGraph:
    # no cache: grimp's cache keys on file times, which a checkout or a `git mv` can leave stale
    return grimp.build_graph(*packages, exclude_type_checking_imports=True, cache_dir=None)


def part(module: str) -> str:
    """The package of a plugin module; `oracle.x` for a module or subpackage of the engine."""
    head, *rest = module.split(".")
    return f"{head}.{rest[0]}" if head == "oracle" and rest else head


def package(module: str) -> str:
    return module.split(".")[0]


def edges_at(graph: grimp.ImportGraph, level) -> dict[str, set[str]]:
    """Who imports whom, with modules merged by `level` (a module -> node function)."""
    edges: dict[str, set[str]] = {}
    for module in graph.modules:
        node = level(module)
        edges.setdefault(node, set())
        for imported in graph.find_modules_directly_imported_by(module):
            if level(imported) != node:
                edges[node].add(level(imported))
    return edges


def cycle_in(edges: dict[str, set[str]]) -> list[str] | None:
    try:
        tuple(graphlib.TopologicalSorter(edges).static_order())
    except graphlib.CycleError as exc:
        return list(reversed(exc.args[1]))
    return None


def layers(edges: dict[str, set[str]]) -> list[list[str]]:
    """Nodes in layers: each imports only nodes of the layers before it."""
    sorter = graphlib.TopologicalSorter(edges)
    sorter.prepare()
    out = []
    while sorter.is_active():
        ready = sorted(sorter.get_ready())
        out.append(ready)
        sorter.done(*ready)
    return out


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return build(*PACKAGES)


def test_every_plugin_in_the_checkout_is_covered():
    assert {"oracle_emulation", "oracle_b12x", "oracle_torch", "oracle_triton"} <= set(PLUGIN_PACKAGES)


@pytest.mark.parametrize("name, level", [("packages", package), ("parts", part), ("files", lambda m: m)])
def test_no_import_loop(graph, name, level):
    edges = edges_at(graph, level)
    loop = cycle_in(edges)
    assert loop is None, f"import loop between {name}: " + " -> ".join(loop)
    print(f"\n{name}: {len(edges)} nodes, each importing only nodes of the lines above it")
    for i, nodes in enumerate(layers(edges)):
        if name == "files":
            print(f"  {i:2d}: {len(nodes)} modules")
            continue
        print(f"  {i:2d}: " + "; ".join(f"{n} -> {', '.join(sorted(edges[n])) or '-'}" for n in nodes))


def test_the_engine_imports_no_plugin(graph):
    engine = {m for m in graph.modules if package(m) == "oracle"}
    found = {(m, i) for m in engine for i in graph.find_modules_directly_imported_by(m) if package(i) != "oracle"}
    assert not found, f"oracle imports plugin code: {sorted(found)}"


def test_commands_are_the_top_layer(graph):
    """Only oracle.cli (and the package root, the public API) import a command; no library module does."""
    importers = {m for m in graph.modules for i in graph.find_modules_directly_imported_by(m)
                 if part(i) == "oracle.cli"}
    assert {part(m) for m in importers} <= {"oracle.cli"}


def test_the_check_sees_loops_at_every_level(tmp_path, monkeypatch):
    for pkg, files in {"loopy_a": {"x.py": "from loopy_b import y\n"},
                       "loopy_b": {"y.py": "def f():\n    import loopy_a.z\n"},   # function-local: still a loop
                       "loopy_c": {"p.py": "from loopy_c.q import g\n", "q.py": "def g():\n    from loopy_c import p\n"}
                       }.items():
        (tmp_path / pkg).mkdir()
        (tmp_path / pkg / "__init__.py").write_text("")
        for name, text in files.items():
            (tmp_path / pkg / name).write_text(text)
    (tmp_path / "loopy_a" / "z.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    both = build("loopy_a", "loopy_b", "loopy_c")
    assert set(cycle_in(edges_at(both, package))) == {"loopy_a", "loopy_b"}
    assert cycle_in(edges_at(both, lambda m: m)) in (["loopy_c.p", "loopy_c.q", "loopy_c.p"],
                                                     ["loopy_c.q", "loopy_c.p", "loopy_c.q"])


def test_every_engine_module_imports_without_heavy_packages(graph):
    """Every oracle module imports (in a fresh interpreter, in name order) and none pulls in torch."""
    import subprocess
    import sys

    # torch code by nature: the hf extra's loader, modules and eager MLP graphs, the torch custom ops; `import oracle.hf`
    # and the `oracle run` command stay torch-free (tests/test_checkpoints_layouts.py)
    optional = ("oracle.hf.loader", "oracle.hf.modules", "oracle.hf.decode", "oracle.hf.compiled", "oracle.hf.topk",
                "oracle.hf.topk_triton", "oracle.hf.blocks",
                "oracle.integration.ops")
    modules = sorted(m for m in graph.modules if package(m) == "oracle" and not m.endswith("__main__")
                     and m not in optional)
    code = ("import importlib, sys\n"
            f"for name in {modules!r}:\n"
            "    importlib.import_module(name)\n"
            "print(sorted(m for m in ('torch', 'b12x', 'triton', 'flashinfer') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    assert len(modules) > 40
