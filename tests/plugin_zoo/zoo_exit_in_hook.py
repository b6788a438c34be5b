"""Registers a good kernel, but its hooks call sys.exit / raise KeyboardInterrupt."""
import sys

from oracle import hookimpl

from _zoo import GOOD


@hookimpl
def register_kernels(register):
    register(GOOD)


@hookimpl
def register_policies(register):
    sys.exit(5)


@hookimpl
def can_implement(kernel, layer, mode):
    raise KeyboardInterrupt("plugin pretends Ctrl-C")
