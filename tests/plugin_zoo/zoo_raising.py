"""Every hook raises."""
from oracle import hookimpl


@hookimpl
def register_kernels(register):
    raise RuntimeError("register_kernels exploded")


@hookimpl
def register_policies(register):
    raise ValueError("register_policies exploded")
