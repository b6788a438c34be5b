"""Shared bits of the zoo plugins: where their files are."""
from pathlib import Path

HERE = Path(__file__).parent
GOOD = HERE / "zoo_kernels.yaml"
