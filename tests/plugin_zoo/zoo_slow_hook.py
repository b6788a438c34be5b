"""Registers a good kernel whose can_implement never returns in time."""
import time

from oracle import hookimpl

from _zoo import GOOD


@hookimpl
def register_kernels(register):
    register(GOOD)


@hookimpl
def can_implement(kernel, layer, mode):
    time.sleep(60)
