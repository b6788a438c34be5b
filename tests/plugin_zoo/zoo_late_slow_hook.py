"""Registers a good kernel whose can_implement answers at once, then (after ZOO_FAST_CALLS calls) slowly."""
import os
import time

from oracle import hookimpl

from _zoo import GOOD

calls = []


@hookimpl
def register_kernels(register):
    register(GOOD)


@hookimpl
def can_implement(kernel, layer, mode):
    calls.append(layer.in_features)
    if len(calls) > int(os.environ.get("ZOO_FAST_CALLS", "3")):
        time.sleep(0.8)
