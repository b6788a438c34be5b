"""Returns things instead of calling register; can_implement returns a list."""
from oracle import hookimpl

from _zoo import GOOD, HERE


@hookimpl
def register_kernels(register):
    register(GOOD)
    return [str(HERE / "zoo_missing_impl.yaml")]


@hookimpl
def register_policies(register):
    register(HERE / "zoo_bad_policy.yaml")


@hookimpl
def can_implement(kernel, layer, mode):
    return ["not", "a", "reason"]
