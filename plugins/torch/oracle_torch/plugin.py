"""Entry point of oracle-torch (group `oracle.kernels`): registers kernels.yaml.

No torch here: the engine imports an implementation only when a decision naming it is
instantiated, and the device probes in `runtime` run only on a detected device.
Peers (torch's tinygemm INT4) join the `peer` tier, placed after `optimized` here.
`can_implement` adds the per-layer facts YAML cannot say: whether the probed device's
blockwise scaling takes K-block counts that are not multiples of 4, and (tinygemm's int4
kernels, grouped int8 on a CPU) whether the layer's groups tile K.
It asks only about a detected platform (the engine passes it); a simulated one has no probe.
"""
from __future__ import annotations

from pathlib import Path

from oracle.hookspecs import hookimpl

KERNELS_FILE = Path(__file__).with_name("kernels.yaml")


@hookimpl
def register_kernels(register):
    register(KERNELS_FILE)


#: The ordering tier of peers' kernels (torch's tinygemm): after the project's own optimized
#: kernels, so that they are taken automatically only where measurements say they are faster.
PEER_TIER = "peer"


@hookimpl
def register_tiers(insert):
    insert(PEER_TIER, after="optimized", ops=["linear"])


#: kernels with groups along K (tinygemm's int4, CUDA and CPU; grouped int8 W8A16 on a CPU): the groups
#: must tile K, which YAML cannot say
GROUPED_KERNELS = ("torch.linear.int4_tinygemm", "torch.linear.int4_cpu", "torch.linear.int8_weight_cpu")


@hookimpl
def can_implement(kernel, layer, platform):
    """Called for the kernels kernels.yaml marks: torch.linear.fp8_block and the GROUPED_KERNELS."""
    if kernel.name in GROUPED_KERNELS:
        group = getattr(layer, "group_size", None)
        if group is not None and layer.in_features % group:
            return f"{layer.weight_format.upper()} groups of {group} must tile K = {layer.in_features} exactly"
        return None
    if platform.simulated:
        return None
    from .block_layout import PROBED_BLOCK_LAYOUTS  # no torch at import; filled by the device probe

    if "l4-only" not in PROBED_BLOCK_LAYOUTS.values():
        return None
    if (layer.in_features // 128) % 4:
        return ("torch blockwise FP8 on this device takes only K/128 divisible by 4 (runtime probe), "
                f"got K={layer.in_features}")
    return None
