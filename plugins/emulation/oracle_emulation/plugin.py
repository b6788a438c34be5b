"""Entry point of oracle-emulation (group `oracle.kernels`): registers kernels.yaml and offers
the reference quantizers (`quantize_weight`) that `oracle tune` makes its synthetic weights with.

Imports neither torch nor the kernel modules; the engine imports an implementation
only when a decision that names it is instantiated.
"""
from __future__ import annotations

from pathlib import Path

from oracle.hookspecs import hookimpl

KERNELS_FILE = Path(__file__).with_name("kernels.yaml")


@hookimpl
def register_kernels(register):
    register(KERNELS_FILE)


@hookimpl
def quantize_weight(weight, weight_format, group_size):
    """The reference codec of `weight_format` (torch, imported here), or None for a format it lacks."""
    from .formats import codec_for
    try:
        codec = codec_for(weight_format)
    except KeyError:
        return None
    if group_size is not None:
        return codec.quantize(weight, weight_format, group_size=group_size)
    return codec.quantize(weight, weight_format)


@hookimpl
def can_implement(layer, mode):
    """INT4 group size must divide K: the one fact the rule language cannot say (K % group_size).

    Called only for the kernels whose kernels.yaml entry says `can_implement: true`, and given
    only the arguments declared here.
    """
    if mode.weight != "int4":
        return None
    group = getattr(layer, "group_size", None)
    k = layer.in_features if layer.op == "linear" else None
    if group is not None and k is not None and k % group:
        return f"INT4 groups of {group} must tile K = {k} exactly"
    if group is not None and layer.op == "moe":
        for name, size in (("hidden_size", layer.hidden_size),
                           ("per-rank intermediate size", layer.intermediate_size // layer.tp_size)):
            if size % group:
                return f"INT4 groups of {group} must tile the {name} ({size}) exactly"
    return None
