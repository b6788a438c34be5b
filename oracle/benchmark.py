"""Selection speed, printed with ratios (targets: cached < 1 us, uncached < 50 us per layer).

Used by `oracle bench` and bench/bench_select.py. Targets are stated here and printed,
never asserted in unit tests: timings on a shared 2-core machine are too noisy for that.
"""
from __future__ import annotations

import subprocess
import sys
import time
from typing import Callable

from .layer import LinearLayer, MoELayer
from .platform import Platform
from .session import clear_cache, get_registry, select_backend

CACHED_TARGET_US = 1.0
UNCACHED_TARGET_US = 50.0


def _per_call_us(fn: Callable[[], object], repeats: int) -> float:
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(repeats):
            fn()
        best = min(best, (time.perf_counter() - start) / repeats * 1e6)
    return best


def import_check() -> list[str]:
    """Heavy modules that `import oracle` pulls in (must be empty), in a fresh interpreter."""
    code = ("import sys, oracle; print(','.join(m for m in ('torch','b12x','flashinfer','triton') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return [m for m in out.strip().split(",") if m]


def import_time_ms() -> float:
    code = "import time; t=time.perf_counter(); import oracle; print((time.perf_counter()-t)*1e3)"
    runs = [float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                 check=True).stdout) for _ in range(3)]
    return min(runs)


def print_selection_benchmark(repeats: int = 200_000) -> dict[str, float]:
    registry = get_registry()
    platform = Platform.preset("rtx-pro-6000")
    env: dict[str, str] = {}
    moe = MoELayer(name="model.layers.0.mlp.experts", num_experts=128, top_k=8, hidden_size=4096,
                   intermediate_size=1536, weight_format="nvfp4", activation_format="nvfp4")
    select_backend(moe, platform)
    cached = _per_call_us(lambda: select_backend(moe, platform), repeats)  # env read from os.environ

    table = {moe.signature: 1}
    dict_lookup = _per_call_us(lambda: table.get(moe.signature), repeats)

    n = 2000
    layers = [LinearLayer(name=f"l{i}", in_features=128 * (i + 1), out_features=4096, weight_format="fp8_block")
              for i in range(n)] + \
             [MoELayer(name=f"m{i}", num_experts=64, top_k=4, hidden_size=256 * (i + 1), intermediate_size=1024,
                       weight_format="mxfp4") for i in range(n)]
    uncached = float("inf")
    for _ in range(3):  # best of three, every cache cleared (layer signatures rebuilt too)
        clear_cache()
        fresh = [layer.model_copy() for layer in layers]
        start = time.perf_counter()
        for layer in fresh:
            select_backend(layer, platform, env=env)
        uncached = min(uncached, (time.perf_counter() - start) / len(fresh) * 1e6)

    leaked = import_check()
    import_ms = import_time_ms()
    print(f"kernels registered: {len(registry.kernels)} from {len(registry.plugins)} plugin(s)")
    print(f"import oracle: {import_ms:.1f} ms; heavy modules imported: {', '.join(leaked) or 'none'}")
    print(f"plain dict lookup (layer signature):  {dict_lookup:8.3f} us")
    print(f"select_backend, cached:               {cached:8.3f} us  "
          f"(x{cached / dict_lookup:.1f} a dict lookup; target < {CACHED_TARGET_US} us: "
          f"{'met' if cached < CACHED_TARGET_US else 'MISSED'})")
    print(f"select_backend, uncached (per layer): {uncached:8.3f} us  "
          f"(x{uncached / dict_lookup:.0f} a dict lookup; target < {UNCACHED_TARGET_US} us: "
          f"{'met' if uncached < UNCACHED_TARGET_US else 'MISSED'})")
    return {"cached_us": cached, "uncached_us": uncached, "dict_us": dict_lookup}
