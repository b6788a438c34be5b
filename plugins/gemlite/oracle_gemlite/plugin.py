"""Entry point of oracle-gemlite (group `oracle.kernels`): registers kernels.yaml and the `peer` tier.

No torch or gemlite here: the engine imports an implementation only when a decision naming it
is instantiated. The `peer` tier (also placed by oracle-torch; an insertion that is already
there is not repeated) comes after the project's own `optimized` kernels.
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
