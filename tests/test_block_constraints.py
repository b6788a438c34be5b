"""The kernels files' block-divisibility constraints agree with oracle.formats, the one home of
each format's block size.

The four kernels files write their block rules as numbers, each with its own reason (45 rules
such as `require: {field: K, divisible_by: 32}`); this checks them against FORMAT_FACTS: for a
format whose scales (or codec blocks) tile K -- OCP MX, NVFP4, the GGML codecs -- every kernel of
every installed plugin refuses a K (a MoE hidden size) half a block off an aligned one, by a rule
the aligned one passes. fp8_block is left out (its scales are ceil(K/128): ragged K is
fine) and int4 too (the group size is the layer's own).
"""
from __future__ import annotations

import pytest

from oracle.formats import FORMAT_FACTS
from oracle.layer import LinearLayer, MoELayer
from oracle.rules import failing
from oracle.session import get_registry

TILED = sorted(f for f, facts in FORMAT_FACTS.items()
               if facts.quantized and facts.block and facts.block[1] > 1 and f not in ("fp8_block", "int4"))


def _layer(op: str, fmt: str, k: int):
    if op == "linear":
        return LinearLayer(name="x", in_features=k, out_features=4096, weight_format=fmt)
    return MoELayer(name="x", num_experts=8, top_k=2, hidden_size=k, intermediate_size=4096, weight_format=fmt)


def _broken(spec, mode, layer) -> list[str]:
    ctx = dict(layer.rule_fields())
    ctx.update(activation_format=mode.activation, mode=mode.name, backend=spec.backend, kernel=spec.name)
    return [rule.render(ctx) for rule in failing(spec.constraints, ctx)]


CASES = [(spec, mode) for spec in get_registry().kernels if spec.op in ("linear", "moe")
         for mode in spec.modes if mode.weight in TILED]


def test_the_check_covers_every_plugin_with_tiled_formats():
    assert {"mxfp4", "mxfp8", "nvfp4", "q8_0", "iq2_xs"} <= set(TILED)
    assert {spec.plugin for spec, _ in CASES} >= {"b12x", "emulation"}


@pytest.mark.parametrize("spec, mode", CASES, ids=[f"{s.name}[{m.name}]" for s, m in CASES])
def test_a_k_off_the_formats_block_is_refused(spec, mode):
    """Moving K half a block off an aligned value makes some rule fail that did not (other rules, e.g.
    about activations, may fail either way)."""
    block = FORMAT_FACTS[mode.weight].block[1]
    aligned = 256 * block                      # a multiple of every block and of the kernels' tiles
    on = set(_broken(spec, mode, _layer(spec.op, mode.weight, aligned)))
    off = set(_broken(spec, mode, _layer(spec.op, mode.weight, aligned + block // 2)))
    assert off - on, f"{spec.name} [{mode.name}] accepts K off the {block}-wide {mode.weight} blocks"
