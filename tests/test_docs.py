"""The generated policy reference matches the models; the README's commands are the documented ones."""
from __future__ import annotations

from pathlib import Path

from oracle.reference import render

ROOT = Path(__file__).resolve().parents[1]


def test_policy_reference_is_current():
    current = (ROOT / "docs" / "policy-reference.md").read_text()
    assert current == render(), "regenerate: python -m oracle.reference > docs/policy-reference.md"


def test_readme_starts_with_the_two_commands():
    lines = [l for l in (ROOT / "README.md").read_text().splitlines() if l.strip()]
    commands = [l for l in lines[:12] if l.startswith("    ") or l.startswith("./")]
    assert any("oracle explain" in c for c in commands)
    assert any("pytest" in c for c in commands)
    assert (ROOT / ".ci" / "run").read_text().count("pytest") >= 1
