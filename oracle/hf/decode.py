"""Greedy decoding over a static KV cache, each decode step run eagerly or replayed from a CUDA graph
(of transformers' layers as they are, or compiled by torch.compile).

    dec = Decoder(model, batch=8, max_len=512, mode="graphs")
    tokens = dec.generate(ids, new_tokens=128)        # [batch, 128]

Why a decoder of our own rather than `model.generate`: every decode step must have the same
shapes and the same tensor addresses so one CUDA graph serves them all (an eager 48-layer MoE
model spends tens of milliseconds per token launching kernels; replay costs one launch).
transformers' static cache keeps the KV tensors and its write position on the device; the
token and position inputs live in buffers this class owns, and the captured step ends by
writing the next greedy token into the input buffer and advancing the position, so a replay
needs no host work at all. Eager mode runs the very same step without the graph (same cache,
same masks), so the two differ only in launch overhead. Compiled mode also routes the decoder
layers through one torch.compile'd step (oracle.hf.compiled) before capturing, so transformers'
own small kernels are fused as well; it changes rounding (fused BF16 ops), not the kernels.

Every layer uses a full-length static cache layer, sliding-window layers too: transformers'
sliding static layer keeps its position in a Python int (baked into a graph at capture time),
while the sliding window itself is enforced by the attention mask, which reads the position
from the device. The cost is attention over `max_len` keys instead of the window.
"""
from __future__ import annotations

import contextlib
import time
import warnings
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from ..errors import InputError

#: eager: every step launched from Python; graphs: the whole step replayed from one CUDA graph;
#: compiled: the decoder layers compiled with torch.compile (oracle.hf.compiled) and, on CUDA, the
#: whole step replayed from one CUDA graph (on the CPU the compiled layers run without one)
MODES = ("eager", "graphs", "compiled")


def static_cache(model: nn.Module, max_len: int) -> Any:
    """A transformers cache of one full-length static layer per decoder layer (allocated on first use)."""
    from transformers.cache_utils import Cache, StaticLayer

    layers = model.config.get_text_config(decoder=True).num_hidden_layers
    return Cache(layers=[StaticLayer(max_cache_len=max_len) for _ in range(layers)])


class Decoder:
    """Prefill a prompt into a static cache, then decode greedily one token per step (eager or graphs)."""

    def __init__(self, model: nn.Module, batch: int, max_len: int, mode: str = "graphs"):
        if mode not in MODES:
            raise InputError(f"expected one of {', '.join(MODES)}, got {mode!r}", field="--decode")
        device = _device(model)
        if mode == "graphs" and device.type != "cuda":
            raise InputError(f"CUDA graphs need a CUDA device; the model is on {device} (use --decode eager)",
                             field="--decode")
        self.model, self.batch, self.max_len, self.mode, self.device = model, batch, max_len, mode, device
        self.compiled = mode == "compiled"
        if self.compiled and not hasattr(model, "_oracle_compiled_layers"):   # a backend set by the caller stays
            from .compiled import compile_layers
            compile_layers(model)
        self.replay = device.type == "cuda" and mode in ("graphs", "compiled")
        if mode == "eager" and device.type == "cuda":   # kernel-only MLPs replay as one graph (oracle.hf.blocks)
            from .blocks import install
            self.blocks = install(model)
        self.cache = static_cache(model, max_len)
        self.token = torch.zeros(batch, 1, dtype=torch.long, device=device)     # next step's input
        self.pos = torch.zeros(batch, 1, dtype=torch.long, device=device)       # its position
        self.length = 0                                                         # tokens in the cache (host view)
        self.graph: Any = None
        self.logits: torch.Tensor | None = None        # the prefill's next-token logits
        self.step_logits: torch.Tensor | None = None   # the last decode step's
        self.fallback: str | None = None          # why graphs were asked for but steps run eagerly

    # ------------------------------------------------------------------ steps
    @torch.no_grad()
    def prefill(self, ids: torch.Tensor) -> torch.Tensor:
        """Run the prompt [batch, P] through an empty cache; the first new token is left in `self.token`."""
        if ids.dim() != 2 or ids.shape[0] != self.batch:
            raise InputError(f"expected prompt ids of shape [{self.batch}, P], got {list(ids.shape)}", field="ids")
        if ids.shape[1] >= self.max_len:
            raise InputError(f"a {ids.shape[1]}-token prompt leaves no room in a {self.max_len}-token cache",
                             field="max_len")
        self.cache.reset()
        p = ids.shape[1]
        pos = torch.arange(p, device=self.device).expand(self.batch, p)
        out = self.model(input_ids=ids.to(self.device), position_ids=pos, past_key_values=self.cache,
                         use_cache=True, logits_to_keep=1)
        self.logits = out.logits[:, -1]                    # [batch, vocab]: the prompt's next-token logits
        self.token.copy_(self.logits.argmax(-1, keepdim=True))
        self.pos.fill_(p)
        self.length = p
        return self.token

    @torch.no_grad()
    def step(self) -> torch.Tensor:
        """One decode step: feeds `self.token`, leaves the next greedy token there (no host synchronisation)."""
        if self.length + 1 > self.max_len:
            raise InputError(f"the {self.max_len}-token cache is full", field="max_len")
        if self.replay and self.graph is None:
            self._capture()
        if self.graph is not None:
            self.graph.replay()
        elif self.compiled:               # compiled code (no graph here) owns what its custom ops return
            self._forward()
        else:
            from ..integration.eager_graphs import borrowed_outputs
            with borrowed_outputs():      # each kernel's result is read within the step: no copies out
                self._forward()
        self.length += 1
        return self.token

    def _forward(self) -> None:
        from .compiled import active
        with active(self.model) if self.compiled else contextlib.nullcontext():
            out = self.model(input_ids=self.token, position_ids=self.pos, past_key_values=self.cache, use_cache=True)
        self.step_logits = out.logits[:, -1]          # [batch, vocab]; under graphs the replay's output buffer
        self.token.copy_(self.step_logits.argmax(-1, keepdim=True))
        self.pos.add_(1)

    def _capture(self) -> None:
        """Warm the step up on a side stream (kernels compile and plan there), put the state back, capture."""
        from ..integration.eager_graphs import capture_stream

        saved = self._state()
        side = capture_stream(self.device)    # one per device: each new stream would hold its own cuBLAS workspace
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            for _ in range(2):
                self._forward()
        torch.cuda.current_stream(self.device).wait_stream(side)
        self._restore(saved)
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph, stream=side):
                self._forward()
        except RuntimeError as exc:   # a layer whose kernel reads values back (emulation kernels on a GPU)
            torch.cuda.synchronize(self.device)
            self.replay, self.fallback = False, f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
            self.mode = "compiled (no graph)" if self.compiled else "eager"
            warnings.warn(f"CUDA-graph capture of the decode step failed ({self.fallback}); decoding without it",
                          RuntimeWarning, stacklevel=3)
        else:
            self.graph = graph
        self._restore(saved)          # capture records work, it runs none; restore for safety all the same

    def _state(self) -> list[torch.Tensor]:
        """The device state a step advances: input token, position, each cache layer's length."""
        state = [self.token, self.pos] + [layer.cumulative_length for layer in self.cache.layers]
        return [t.clone() for t in state]

    def _restore(self, saved: list[torch.Tensor]) -> None:
        state = [self.token, self.pos] + [layer.cumulative_length for layer in self.cache.layers]
        for t, s in zip(state, saved):
            t.copy_(s)

    # ------------------------------------------------------------------ whole generation
    @torch.no_grad()
    def generate(self, ids: torch.Tensor, new_tokens: int) -> torch.Tensor:
        """Greedy tokens [batch, new_tokens] after the prompt (the first from the prefill)."""
        if new_tokens < 1:
            raise InputError(f"expected a positive number of new tokens, got {new_tokens}", field="new_tokens")
        out = torch.empty(self.batch, new_tokens, dtype=torch.long, device=self.device)
        out[:, :1] = self.prefill(ids)
        for i in range(1, new_tokens):
            out[:, i:i + 1] = self.step()
        return out


def _device(model: nn.Module) -> torch.device:
    for p in model.parameters():
        return p.device
    return torch.device("cpu")


@dataclass
class Measurement:
    """Steady-state decode speed of one (batch, mode): what `oracle run --bench` and bench_decode.py print."""

    batch: int
    mode: str               # the mode that ran: "eager" where graphs were asked for but capture failed
    tok_s: float            # batch x steps / seconds of the timed steps
    ms_step: float
    prefill_ms: float
    warmup_s: float         # the warm-up generation: first calls, compiles (torch.compile, Triton), capture
    tokens: torch.Tensor    # [batch, steps + 1] greedy tokens (the first from the prefill), on the CPU
    logits: torch.Tensor    # [vocab] the prefill's next-token logits of row 0, fp32, on the CPU
    block_ms: list[float] = field(default_factory=list)   # ms per step of each timed block (repeats > 1)


def measure(model: nn.Module, ids: torch.Tensor, steps: int, mode: str, warmup: int = 16,
            repeats: int = 1) -> Measurement:
    """Warm up (kernels compile, the graph is captured) with `warmup` tokens, prefill `ids` [batch, P]
    again and time `steps` decode steps. The static cache gives every step the same shapes, so the
    timed steps meet nothing the warm-up did not (no first-call compiles or attention plans).
    `repeats` > 1 times that many blocks (each after its own prefill, the same decoder): the figures
    are the median block's, `block_ms` has every block's (the spread of one process's host)."""
    batch = ids.shape[0]
    dec = Decoder(model, batch, ids.shape[1] + max(steps, warmup) + 8, mode)
    sync = torch.cuda.synchronize if dec.device.type == "cuda" else (lambda: None)
    t = time.perf_counter()
    dec.generate(ids, warmup)
    sync()
    warmup_s = time.perf_counter() - t
    blocks: list[tuple[float, float, torch.Tensor]] = []      # (seconds, prefill seconds, tokens)
    for _ in range(max(1, repeats)):
        out = torch.empty(batch, steps + 1, dtype=torch.long, device=dec.device)
        sync()
        t = time.perf_counter()
        out[:, :1] = dec.prefill(ids)
        sync()
        prefill = time.perf_counter() - t
        t = time.perf_counter()
        for i in range(steps):
            out[:, i + 1:i + 2] = dec.step()
        sync()
        blocks.append((time.perf_counter() - t, prefill, out))
    seconds, prefill, out = sorted(blocks, key=lambda b: b[0])[(len(blocks) - 1) // 2]   # the median block
    return Measurement(batch, dec.mode, batch * steps / seconds, 1e3 * seconds / steps, 1e3 * prefill, warmup_s,
                       out.cpu(), dec.logits[0].float().cpu(), [1e3 * b[0] / steps for b in blocks])
