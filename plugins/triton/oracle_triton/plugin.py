"""Entry point of oracle-triton (group `oracle.kernels`): registers kernels.yaml.

No torch or triton here: the engine imports an implementation only when a decision naming
it is instantiated, and the device probe in `runtime` runs only on a detected device.
"""
from __future__ import annotations

from pathlib import Path

from oracle.hookspecs import hookimpl

KERNELS_FILE = Path(__file__).with_name("kernels.yaml")


@hookimpl
def register_kernels(register):
    register(KERNELS_FILE)
