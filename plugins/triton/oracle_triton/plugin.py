"""Entry point of oracle-triton (group `oracle.kernels`): registers kernels.yaml and the `peer`
tier its gemlite peer sits in (after `optimized`, as oracle-torch's tinygemm: a second insertion
of the same tier is a no-op).

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


@hookimpl
def register_tiers(insert):
    insert("peer", after="optimized", ops=["linear"])
