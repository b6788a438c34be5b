"""The whole plugin contract, as pluggy hook specifications.

A plugin is a module (or object) named by an entry point in the group
`oracle.kernels`; it implements any of the hooks below with `@oracle.hookimpl`.
In the style of simonw/llm, registration hooks receive a `register` callable::

    from oracle import hookimpl

    @hookimpl
    def register_kernels(register):
        register(Path(__file__).with_name("kernels.yaml"))

The contract is pluggy's: an implementation may declare any subset of a hook's
arguments (it receives only those), a hook name no spec declares is reported as a
plugin error when the plugin registers (`check_pending`), and an implementation that
asks for an argument the spec lacks is refused at registration. Every call goes
through pluggy's caller (`firstresult` holds; wrappers and tracing see it). The
registration hooks are called once per plugin, in load order (entry-point name), one
plugin's implementation at a time: a plugin whose import fails (or calls sys.exit) or
whose hook raises is recorded (`oracle kernels` lists it) and skipped; the engine keeps
working with the others. Plugin code runs inline and unbounded; `oracle verify
--timeout` finds code that hangs.
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
    mapping of the same shape. A backend belongs to the first plugin that declares it;
    a kernel for another plugin's backend, or a kernel name already taken, is this
    plugin's error and is skipped.
    """


@hookspec
def register_policies(register):
    """Contribute policy files: call `register(path)` for each.

    Plugin policy files are merged above the built-in default and below the
    user's own files (`--policy`), in plugin load order. Lists replace lists: to add
    a tier to the ordering beside other plugins', use `register_tiers` instead.
    """


@hookspec
def register_tiers(insert):
    """Place a tier or backend in the automatic ordering without replacing anyone's list.

    `insert(name, after="optimized")` (or `before=`; optional `ops=[...]`,
    `formats=[...]` restrict it) adds `name` next to the anchor in every ordering list
    that holds the anchor and not yet `name`. Insertions apply above the default and
    plugin policy files and below the user's files; two plugins inserting after the
    same anchor keep load order. `oracle policy show` cites the insert() call's file:line.
    """


@hookspec
def register_commands(register):
    """Add `oracle` subcommands: call `register(command)` for each.

    `command` is any object (a module works) with `NAME` (str), `add_parser(subparsers)`
    returning the argparse parser it added, and `run(args) -> int` (the exit code). A
    name that a built-in or another plugin's command already has is this plugin's error.
    """


@hookspec(firstresult=True)
def quantize_weight(weight, weight_format, group_size):
    """Quantize a float weight (torch tensor [..., N, K]) to `weight_format`'s checkpoint tensors.

    Return a dict named as in `oracle.kernel` (`weight`, `weight_scale`, ...), or None for a
    format this plugin does not quantize; the first answer wins. `oracle tune` times kernels on
    weights made this way, so the reference codecs (oracle-emulation's) are the ones to offer.
    `group_size` is None except for grouped formats (int4).
    """


@hookspec(firstresult=True)
def can_implement(kernel, layer, mode, platform):
    """A code check for what YAML cannot say, called only for this plugin's own kernels
    that declare it (`can_implement: true` in the kernels file, on the kernel or the file;
    a file that says nothing: every kernel of a plugin that implements this hook).

    Runs after the kernel's platform requirements and declarative constraints have
    passed; only the declaring plugin's implementation is called (pluggy's
    `subset_hook_caller`), so it need not check which kernel it was handed. Return None to accept, or a human reason (str) to reject the candidate.
    Must be cheap and must not import heavy libraries for layers it cannot serve.
    `platform` is the `oracle.Platform` being decided for (simulated or detected).
    """
