"""Declares kernels whose implementation class is missing / not a Kernel."""
from oracle import hookimpl

from _zoo import HERE


@hookimpl
def register_kernels(register):
    register(HERE / "zoo_missing_impl.yaml")
