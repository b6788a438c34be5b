"""The generated policy reference matches the models; the README's commands are the documented ones."""
from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

from oracle.reference import render

ROOT = Path(__file__).resolve().parents[1]


def test_policy_reference_is_current():
    current = (ROOT / "docs" / "policy-reference.md").read_text()
    assert current == render(), "regenerate: python -m oracle.reference > docs/policy-reference.md"


def test_readme_starts_with_the_two_commands():
    """The README's first two commands are the main job and the test command, and both are the real
    ones: the setup script is there, `oracle explain` with the README's arguments (through the console
    script pyproject.toml declares) exits 0 with its report, and the test command is what .ci/run runs."""
    commands = [line.strip() for line in (ROOT / "README.md").read_text().splitlines() if line.startswith("    ")]
    job, tests = commands[0], commands[1]
    setup = "./scripts/dev-setup && "
    assert job.startswith(setup) and tests.startswith(setup), (job, tests)
    assert os.access(ROOT / "scripts" / "dev-setup", os.X_OK)

    explain = shlex.split(job[len(setup):])
    assert explain[:2] == [".venv/bin/oracle", "explain"]
    assert 'oracle = "oracle.cli:main"' in (ROOT / "pyproject.toml").read_text()
    out = subprocess.run([sys.executable, "-m", "oracle.cli", *explain[1:]], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "summary: " in out.stdout and "0 without a kernel" in out.stdout

    test_command = tests[len(setup):]
    assert shlex.split(test_command) == [".venv/bin/python", "-m", "pytest"]
    ci = [line for line in (ROOT / ".ci" / "run").read_text().splitlines() if "-m pytest" in line]
    assert ci and ci[0].startswith(test_command + " "), ci   # CI adds only output options (-q -p ...)
