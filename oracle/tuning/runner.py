"""Timing every viable candidate of every distinct layer of a model on the live device.

For each distinct layer signature (the layers `oracle explain` derives, deduplicated)
and each (kernel, mode, activation format) that passes its requirements and constraints
on this device, from every plugin and tier: build the kernel (`Impl(layer, mode, spec)`,
as `Decision.instantiate` does), `process_weights` with synthetic checkpoint tensors,
then `apply` at each M, timed by `timing`. A candidate that raises, returns the wrong
shape or runs out of memory is recorded as failed with its error; the run goes on.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

from ..formats import torch_dtype
from ..objective import rank
from ..platform import memory_bandwidth_gbps
from . import synthetic
from .schema import Entry, Reference, layer_key
from .timing import time_cpu, time_cuda


@dataclass
class LayerGroup:
    """A distinct layer signature: the first layer that has it, and how many layers share it."""

    row: Any                 # oracle.models.ModelLayer
    count: int
    key: str = ""

    @property
    def layer(self) -> Any:
        return self.row.layer


@dataclass
class TuneResult:
    groups: list[LayerGroup]
    entries: list[Entry] = field(default_factory=list)
    references: list[Reference] = field(default_factory=list)
    candidates: dict[str, int] = field(default_factory=dict)   # layer key -> candidates timed


@dataclass
class Ranked:
    """One candidate of one layer as the summary and the plot show it."""

    key: tuple[str, str, str]        # kernel, mode, activation format
    score: float | None              # None: not ranked by measurement (failed, testing-only, unmeasured)
    points: list[tuple[int, float, str]]   # (M, median ms, method), by M
    error: str | None
    testing_only: bool


def ranking(result: TuneResult, group: LayerGroup, objective: Any, allow_testing_only: bool = False) -> list[Ranked]:
    """The group's candidates ranked at `objective` as the engine would rank them (pure; no torch)."""
    mine = [e for e in result.entries if e.layer_key == group.key]
    info: dict[tuple, Ranked] = {}
    for e in mine:
        r = info.setdefault((e.kernel, e.mode, e.activation_format),
                            Ranked((e.kernel, e.mode, e.activation_format), None, [], None, e.testing_only))
        if e.status == "ok" and e.median_ms is not None:
            r.points.append((e.m, e.median_ms, e.method or "eager"))
        elif r.error is None:
            r.error = e.error
    for r in info.values():
        r.points.sort()
    eligible = {k: {m: ms for m, ms, _ in r.points} for k, r in info.items()
                if allow_testing_only or not r.testing_only}
    weights = objective.weights_for({m for t in eligible.values() for m in t})
    out = []
    for key, s in rank(list(info), eligible, [k for k, r in info.items() if r.error], weights):
        info[key].score = s
        out.append(info[key])
    return out


def distinct_layers(model: Any) -> list[LayerGroup]:
    """Quantized layers of `model`, one per signature, in order of first appearance."""
    groups: dict[Any, LayerGroup] = {}
    for row in model.layers:
        if not row.quantized:
            continue
        sig = row.layer.signature
        if sig in groups:
            groups[sig].count += 1
        else:
            groups[sig] = LayerGroup(row, 1, layer_key(row.layer))
    return list(groups.values())


def candidates_for(engine: Any, layer: Any, platform: Any, config: Any, env: Any,
                   backends: Iterable[str] | None) -> list[tuple[Any, Any]]:
    wanted = set(backends) if backends else None
    return [(spec, mode) for spec, mode in engine.viable(layer, platform, config, env)
            if wanted is None or spec.backend in wanted]


def buffer_bytes(layer: Any, m: int) -> int:
    """A generous estimate of the bytes timing `layer` at M tokens holds at once: synthetic weights
    (fp32 before quantizing, and the quantized copy) plus inputs, outputs and fp32 intermediates."""
    if layer.op == "linear":
        k, n = layer.in_features, layer.out_features
        return 8 * n * k + 6 * m * (k + n)
    if layer.op == "moe":
        e = max(1, layer.num_experts // layer.ep_size)
        h, i = layer.hidden_size, layer.intermediate_size // layer.tp_size
        rows = layer.w13_rows
        top = min(layer.top_k, e)
        return 8 * e * (rows * h + h * i) + m * (6 * h + 4 * e + 4 * top * (rows + h))
    return 8 * layer.num_embeddings * layer.embedding_dim + 4 * m * layer.embedding_dim


def device_memory(platform: Any) -> int | None:
    """Total memory of the device `oracle tune` times on (GPU memory, else physical RAM), in bytes."""
    import os
    if platform.vendor in ("nvidia", "amd"):
        try:
            import torch
            if torch.cuda.is_available():
                return int(torch.cuda.mem_get_info()[1])
        except Exception:  # no usable GPU: timing falls back to the CPU below
            pass
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return None


class Runner:
    """Times candidates on one device (cuda or cpu); torch is imported here, not before."""

    def __init__(self, platform: Any, quantize: Callable[..., Any], repeats: int | None = None):
        """`quantize` makes the synthetic checkpoint tensors (a plugin's `quantize_weight` hook)."""
        import torch

        self.torch = torch
        self.cuda = platform.vendor in ("nvidia", "amd") and torch.cuda.is_available()
        self.device = torch.device("cuda" if self.cuda else "cpu")
        self.repeats = repeats or (30 if self.cuda else 5)
        self.quantize = quantize
        self.gbps = memory_bandwidth_gbps(platform) if self.cuda else None

    def _time(self, fn: Callable[[], Any], graphs: bool = True, capture_safe: bool = False) -> Any:
        if not self.cuda:
            return time_cpu(fn, self.repeats)
        return time_cuda(fn, self.repeats, graphs=graphs, capture_safe=capture_safe)

    def _free(self) -> None:
        if self.cuda:
            self.torch.cuda.empty_cache()

    def tune(self, groups: Sequence[LayerGroup], candidates: dict[str, list[tuple[Any, Any]]],
             ms: Sequence[int], progress: Any = None) -> TuneResult:
        result = TuneResult(list(groups))
        torch = self.torch
        for gi, group in enumerate(groups):
            layer, key = group.layer, group.key
            cands = candidates.get(key, [])
            result.candidates[key] = len(cands)
            if progress is not None:
                progress.set_description(f"layer {gi + 1}/{len(groups)} {group.row.role}")
            try:
                with torch.no_grad():
                    tensors = synthetic.weights(layer, self.device, self.quantize)
            except Exception as exc:  # even the quantizer failed (e.g. out of memory): every candidate fails
                self._free()
                for spec, mode in cands:
                    result.entries += self._failed(group, spec, mode, ms, f"synthetic weights: {_why(exc)}")
                    if progress is not None:
                        progress.update(len(ms))
                continue
            result.references += self._references(group, tensors, ms)
            for spec, mode in cands:
                if progress is not None:
                    progress.set_postfix_str(f"{spec.name} [{mode.name}]", refresh=False)
                result.entries += self._candidate(group, spec, mode, tensors, ms, progress)
            del tensors
            self._free()
        return result

    def _entry(self, group: LayerGroup, spec: Any, mode: Any, m: int, **values: Any) -> Entry:
        return Entry(layer_key=group.key, layer=group.layer.name, kernel=spec.name, backend=spec.backend,
                     mode=mode.name, activation_format=mode.activation, m=m,
                     testing_only=bool(spec.testing_only), **values)

    def _failed(self, group: LayerGroup, spec: Any, mode: Any, ms: Iterable[int], error: str) -> list[Entry]:
        return [self._entry(group, spec, mode, m, status="failed", error=error) for m in ms]

    def _candidate(self, group: LayerGroup, spec: Any, mode: Any, tensors: dict, ms: Sequence[int],
                   progress: Any) -> list[Entry]:
        torch = self.torch
        layer = group.layer
        out: list[Entry] = []
        try:
            kernel = spec.load_implementation()(layer, mode, spec)
            with torch.no_grad():
                kernel.process_weights(**tensors)
        except Exception as exc:
            self._free()
            if progress is not None:
                progress.update(len(ms))
            return self._failed(group, spec, mode, ms, f"process_weights: {_why(exc)}")
        for i, m in enumerate(ms):
            try:
                args = synthetic.inputs(layer, m, self.device)
                with torch.no_grad():
                    first = kernel.apply(*args)
                    problem = _check_output(first, synthetic.expected_shape(layer, m))
                    if problem:
                        raise _WrongOutput(problem)
                    del first
                    timing = self._time(lambda: kernel.apply(*args),
                                        capture_safe=bool(getattr(kernel, "capture_safe", False)))
                out.append(self._entry(group, spec, mode, m, status="ok", median_ms=timing.median_ms,
                                       min_ms=timing.min_ms, max_ms=timing.max_ms, iqr_ms=timing.iqr_ms,
                                       repeats=timing.repeats, method=timing.method))
            except Exception as exc:
                self._free()
                out.append(self._entry(group, spec, mode, m, status="failed", error=f"apply: {_why(exc)}"))
                if isinstance(exc, _WrongOutput) or _is_oom(exc):
                    # wrong results are wrong at every M; out of memory only grows with M
                    out += self._failed(group, spec, mode, ms[i + 1:], f"apply: {_why(exc)}")
                    if progress is not None:
                        progress.update(len(ms) - i)
                    break
            if progress is not None:
                progress.update(1)
        del kernel
        return out

    def _references(self, group: LayerGroup, tensors: dict, ms: Sequence[int]) -> list[Reference]:
        """BF16 x @ w.T beside linear layers, and the time to read the weights from HBM."""
        torch = self.torch
        layer = group.layer
        nbytes = synthetic.weight_bytes(tensors)
        hbm = nbytes / (self.gbps * 1e9) * 1e3 if self.gbps else None
        refs = []
        w = None
        try:
            if layer.op == "linear":
                w = synthetic.randn(layer.out_features, layer.in_features,
                                     device=self.device).to(torch_dtype(layer.dtype))
            for m in ms:
                bf16 = None
                if w is not None:
                    x = synthetic.inputs(layer, m, self.device)[0]
                    with torch.no_grad():
                        bf16 = self._time(lambda: x @ w.t()).median_ms
                refs.append(Reference(layer_key=group.key, m=m, bf16_ms=bf16, hbm_ms=hbm))
        except Exception:  # a reference is a nicety: out of memory there must not stop the run
            self._free()
        return refs


class _WrongOutput(Exception):
    pass


def _check_output(out: Any, shape: tuple[int, ...]) -> str | None:
    got = tuple(getattr(out, "shape", ()) or ())
    if not hasattr(out, "shape"):
        return f"returned {type(out).__name__}, expected a tensor of shape {list(shape)}"
    if got != shape:
        return f"returned shape {list(got)}, expected {list(shape)}"
    return None


def _is_oom(exc: BaseException) -> bool:
    return type(exc).__name__ == "OutOfMemoryError" or "out of memory" in str(exc).lower()


def _why(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    if _is_oom(exc):
        return f"out of memory ({text[:160]})"
    return f"{type(exc).__name__}: {text[:300]}" if text else type(exc).__name__


def progress_bar(total: int, enabled: bool | None = None) -> Any:
    """A tqdm bar on stderr (units: candidate x M) with ETA; None when not a terminal or tqdm is absent."""
    if enabled is None:
        enabled = sys.stderr.isatty()
    if not enabled:
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, unit="timing", file=sys.stderr, dynamic_ncols=True)
