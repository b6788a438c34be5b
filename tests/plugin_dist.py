"""A throwaway plugin distribution, built and pip-installed the way a third party ships one.

Both the entry-point tests and the tuning tests take this road: a package with the given files,
a pyproject.toml declaring an `oracle.kernels` entry point `<entry> = "<package>.plugin"`, installed
with pip into a private target folder (no network, no build isolation).
"""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

REGISTER_KERNELS_YAML = """\
from pathlib import Path
from oracle import hookimpl

@hookimpl
def register_kernels(register):
    register(Path(__file__).with_name("kernels.yaml"))
"""


def write_distribution(src: Path, name: str, package: str, entry: str, files: dict[str, str]) -> Path:
    """`src`/pyproject.toml + `src`/`package`/{__init__.py, files...}; returns `src`."""
    pkg = src / package
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    for filename, text in files.items():
        (pkg / filename).write_text(textwrap.dedent(text))
    (src / "pyproject.toml").write_text(textwrap.dedent(f"""\
        [build-system]
        requires = ["setuptools>=61"]
        build-backend = "setuptools.build_meta"
        [project]
        name = "{name}"
        version = "0.1"
        [project.entry-points."oracle.kernels"]
        {entry} = "{package}.plugin"
        [tool.setuptools]
        packages = ["{package}"]
        [tool.setuptools.package-data]
        {package} = ["kernels.yaml"]
        """))
    return src


def pip_install(src: Path, target: Path) -> Path:
    """Install the distribution at `src` into `target` (a folder for sys.path / PYTHONPATH); returns it."""
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                    "--no-build-isolation", "--target", str(target), str(src)], check=True)
    return target
