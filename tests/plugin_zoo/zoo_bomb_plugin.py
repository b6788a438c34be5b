"""Registers a 'billion laughs' kernels file and policy file."""
from oracle import hookimpl

from _zoo import HERE


@hookimpl
def register_kernels(register):
    register(HERE / "zoo_bomb.yaml")


@hookimpl
def register_policies(register):
    register(HERE / "zoo_bomb.yaml")
