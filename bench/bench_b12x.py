"""Benchmark of the b12x plugin's decision costs, and (on a CUDA machine) its verdicts there.

Prints figures and ratios; asserts nothing. Usage: python bench/bench_b12x.py
  1. select_backend for b12x layers on a simulated SM120: cold (cache cleared) and cached.
  2. the YAML constraint evaluation of the b12x MoE kernel, per candidate.
  3. the optional planner check (ORACLE_B12X_PLANNER_CHECK=1): first call (imports b12x) and later calls.
  4. on a detected device: each layer's decision and the b12x rejection reason.
"""
from __future__ import annotations

import importlib.util
import time

from oracle import EmbeddingLayer, KernelConfig, LinearLayer, MoELayer, Platform, select_backend
from oracle.session import clear_cache
from oracle.rules import failing

LAYERS = [
    LinearLayer(name="qkv nvfp4", in_features=4096, out_features=6144, weight_format="nvfp4", activation_format="nvfp4"),
    LinearLayer(name="down fp8_block", in_features=12288, out_features=4096, weight_format="fp8_block"),
    MoELayer(name="experts mxfp4", num_experts=128, top_k=8, hidden_size=2880, intermediate_size=2880,
             weight_format="mxfp4", activation="swigluoai_uninterleave"),
    EmbeddingLayer(name="embed q8_0", num_embeddings=151936, embedding_dim=4096, weight_format="q8_0"),
]
CONFIG = KernelConfig(moe_backend="b12x")


def _per_call(fn, repeat: int) -> float:
    start = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - start) / repeat


def main() -> None:
    # Package versions stated: the bench measures decisions, whatever this machine has installed.
    sm120 = Platform.preset("rtx-pro-6000", packages={"b12x": "1.5.1", "triton": "3.7.1"})
    select_backend(LAYERS[0], sm120, CONFIG)            # load plugins once
    for layer in LAYERS:
        def cold(layer=layer):
            clear_cache()
            select_backend(layer, sm120, CONFIG)
        cold_s = _per_call(cold, 200)
        warm_s = _per_call(lambda layer=layer: select_backend(layer, sm120, CONFIG), 2000)
        d = select_backend(layer, sm120, CONFIG)
        print(f"select {layer.name:16s} -> {d.kernel}/{d.mode}: cold {cold_s * 1e6:8.1f} us, "
              f"cached {warm_s * 1e6:6.2f} us, ratio {cold_s / warm_s:6.1f}x")

    spec = select_backend(LAYERS[2], sm120, CONFIG).spec
    ctx = dict(LAYERS[2].rule_fields(), activation_format="mxfp8", mode="w4a8_mx", backend="b12x", kernel=spec.name)
    rules_s = _per_call(lambda: failing(spec.constraints, ctx), 20000)
    print(f"b12x.moe constraints ({len(spec.constraints)} rules): {rules_s * 1e6:.2f} us per candidate")

    if importlib.util.find_spec("b12x") is not None:
        from oracle_b12x.planner_check import planner_reason

        mode = next(m for m in spec.modes if m.name == "w4a16" and m.weight == "mxfp4")
        start = time.perf_counter()
        planner_reason(LAYERS[2], mode)
        first = time.perf_counter() - start
        later = _per_call(lambda: planner_reason(LAYERS[2], mode), 50)
        print(f"planner check: first call {first * 1e3:.0f} ms (imports b12x), later {later * 1e3:.2f} ms, "
              f"{later / rules_s:.0f}x the YAML rules")
    else:
        print("planner check: b12x is not installed here")

    detected = Platform.detect()
    print(f"detected platform: {detected.describe()}")
    if detected.vendor != "cpu":
        for layer in LAYERS:
            d = select_backend(layer, detected, KernelConfig())
            b12x = [c for c in d.candidates if c.backend == "b12x"]
            reason = b12x[0].reason if b12x else "(no b12x candidate)"
            print(f"  {layer.name:16s} -> {d.status} {d.kernel}; b12x: {reason}")


if __name__ == "__main__":
    main()
