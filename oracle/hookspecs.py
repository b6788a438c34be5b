"""The whole plugin contract, as pluggy hook specifications.

A plugin is a module (or object) named by an entry point in the group
`oracle.kernels`; it implements any of the hooks below with `@oracle.hookimpl`.
In the style of simonw/llm, registration hooks receive a `register` callable::

    from oracle import hookimpl

    @hookimpl
    def register_kernels(register):
        register(Path(__file__).with_name("kernels.yaml"))

A plugin whose import fails or whose hook raises is recorded (`oracle kernels`
lists it) and skipped; the engine keeps working with the others.
"""
from __future__ import annotations

import pluggy

PROJECT = "oracle"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def register_kernels(register):
    """Declare kernels: call `register(source)` once per kernels file.

    `source` is a path to a YAML file (see `oracle.catalog`) or an already-loaded
    mapping of the same shape. Kernel names must be unique across all plugins.
    """


@hookspec
def register_policies(register):
    """Contribute policy files: call `register(path)` for each.

    Plugin policy files are merged above the built-in default and below the
    user's own files (`--policy`), in plugin load order.
    """


@hookspec
def can_implement(kernel, layer, mode):
    """A code check for what YAML cannot say, called only for this plugin's own kernels.

    Runs after the kernel's platform requirements and declarative constraints have
    passed. Return None to accept, or a human reason (str) to reject the candidate.
    Must be cheap and must not import heavy libraries for layers it cannot serve.
    """
