"""The layout table is the one place layout facts live: the user guide's copy is generated from it."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from oracle.checkpoints import LAYOUTS, render_markdown
from oracle.checkpoints.adapters import CONVERTERS, DIALECTS

ROOT = Path(__file__).resolve().parents[1]


def test_user_guide_table_is_generated_from_the_layouts():
    text = (ROOT / "docs" / "user-guide.md").read_text()
    begin, end = "<!-- layouts:begin -->\n", "\n<!-- layouts:end -->"
    assert begin in text and end in text
    current = text.split(begin, 1)[1].split(end, 1)[0]
    assert current == render_markdown(), "regenerate: python -m oracle.checkpoints.layouts (docs/user-guide.md)"


def test_every_dialect_of_the_front_end_has_rows_and_shapes_evaluate():
    from oracle.models.quant import KNOWN_METHODS
    assert set(KNOWN_METHODS) == set(DIALECTS)
    assert {r.dialect for r in LAYOUTS} == set(DIALECTS)
    for row in LAYOUTS:
        for shape in row.shapes(512, 1024, 128, 4):
            assert all(isinstance(d, int) and d > 0 for d in shape), row
    assert {d for d, _ in CONVERTERS} <= set(DIALECTS)


def test_importing_the_adapters_imports_no_torch():
    code = "import sys, oracle.checkpoints, oracle.hf, oracle.cli.run; print('torch' in sys.modules, 'transformers' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]
