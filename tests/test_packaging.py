"""What ships: `import oracle` stays light, and the wheel carries the policy and example files."""
from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_import_oracle_imports_no_heavy_module():
    code = ("import sys, oracle, oracle.cli, oracle.engine, oracle.cli.tune, oracle.tuning.measurements; "
            "print(','.join(m for m in ('torch','b12x','flashinfer','triton','cutlass') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == ""


def test_wheel_carries_default_policies_and_examples(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", str(tmp_path), str(ROOT)], check=True)
    (wheel,) = tmp_path.glob("kernel_oracle-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "oracle/_data/policies/default.yaml" in names
    assert "oracle/_data/policies/devices.yaml" in names
    assert any(n.startswith("oracle/_data/examples/") and n.endswith("config.json") for n in names)
    entry = next(n for n in names if n.endswith("entry_points.txt"))
    assert "oracle = oracle.cli:main" in zipfile.ZipFile(wheel).read(entry).decode()
