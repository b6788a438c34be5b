"""Eager launches without Triton's per-call binding: the compiled kernel of an earlier launch with
the same specialization is started directly.

Why: `kernel[grid](...)` binds and specializes every argument, hashes a cache key and checks the
kernel's globals on every call; on the H200 machine's host that costs tens of microseconds, more
than a few-row dense product takes on the GPU. The compiled object Triton returns from the first
launch can be started again with the same argument list (Triton >= 3.3 passes every argument,
constexprs included, to its launcher), which is what `JITFunction.run` itself does after its
checks, hooks included. The caller supplies the key that stands for the specialization: the launch
parameters, the dtypes, and what Triton specializes values on (16-byte pointer alignment, integers
equal to 1 or divisible by 16); a call whose key was not seen takes Triton's own path.
"""
from __future__ import annotations

from typing import Any, Hashable


def spec(*values: Any) -> tuple:
    """What Triton specializes these runtime values on: tensors by dtype and 16-byte alignment,
    integers by being 1 and by divisibility by 16, other values as they are."""
    out = []
    for v in values:
        if hasattr(v, "data_ptr"):
            out.append((v.dtype, v.data_ptr() % 16 == 0))
        elif isinstance(v, int) and not isinstance(v, bool):
            out.append((v == 1, v % 16 == 0))
        else:
            out.append(v)
    return tuple(out)


def hooked() -> bool:
    """Is a launch hook installed (a profiler wants Triton's launch metadata)? Triton >= 3.5 keeps
    an always-present chain of hooks (empty: none); older ones None."""
    from triton import knobs
    hook = knobs.runtime.launch_enter_hook
    return hook is not None and bool(getattr(hook, "calls", True))


def current_stream() -> int:
    """The current CUDA stream of the current device, as Triton's launcher takes it."""
    from triton.runtime import driver
    return driver.active.get_current_stream(driver.active.get_current_device())


class FastLaunch:
    """One @triton.jit kernel and its compiled objects by specialization key."""

    def __init__(self, fn: Any):
        self.fn = fn
        self.names = list(fn.arg_names)
        params = getattr(fn, "params", None)       # the interpreter's kernels have none (and never go fast)
        self.defaults = {p.name: p.default for p in params if p.has_default} if params is not None else {}
        self.compiled: dict[Hashable, Any] = {}
        self.enabled = params is not None

    def __call__(self, grid: tuple[int, int, int], key: Hashable | None, options: dict[str, int], **args: Any) -> None:
        """Launch fn over grid with `args` (by name) and `options` (num_warps, num_stages); key None:
        always Triton's path (nothing cached)."""
        ck = self.compiled.get(key) if key is not None and self.enabled else None
        if ck is not None:
            from triton import knobs
            values = [args[n] if n in args else self.defaults[n] for n in self.names]
            stream = current_stream()
            enter, leave = knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook
            meta = ck.launch_metadata(grid, stream, *values) if hooked() else None
            ck.run(grid[0], grid[1], grid[2], stream, ck.function, ck.packed_metadata, meta, enter, leave, *values)
            return
        ck = self.fn[grid](**args, **options)
        if key is not None and self.enabled and hasattr(ck, "packed_metadata"):   # the interpreter returns none
            self.compiled[key] = ck
