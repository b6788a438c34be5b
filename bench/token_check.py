"""Greedy tokens and per-layer hidden states of oracle.hf against its emulation run, and how fast the
same random model diverges from itself under a perturbation far below BF16 rounding.

Why: over a deep random model the oracle kernels' greedy tokens leave the emulation's after a few
steps. Whether that is a kernel error or the model amplifying any rounding difference shows in
two numbers side by side: the relative error of each layer's hidden state (last prompt position)
of oracle against emulation, and of emulation against itself with its input embeddings multiplied
by (1 + 1e-3 x standard normal noise), a quarter of a BF16 step. If the perturbed emulation drifts as
fast over depth and loses the greedy tokens as early, the model is chaotic at that depth and the
token mismatch says nothing about the kernels; the layer-1 error is then the kernels' own.
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterator

import torch

#: relative size of the input-embedding perturbation (BF16 has 8 significant bits: a step of 2^-8)
NOISE = 1e-3
#: layers whose error the table prints (those up to the depth)
DEPTHS = (1, 2, 4, 8, 16, 24, 32, 48, 61)


@contextlib.contextmanager
def perturbed(model: Any, rel: float, seed: int = 0) -> Iterator[None]:
    """Within the block, the input embeddings are multiplied by (1 + rel x noise), a fixed noise per shape."""
    if not rel:
        yield
        return
    noise: dict[tuple, torch.Tensor] = {}

    def hook(module: Any, args: Any, out: torch.Tensor) -> torch.Tensor:
        key = tuple(out.shape)
        if key not in noise:
            gen = torch.Generator(device=out.device).manual_seed(seed + len(noise))
            noise[key] = 1 + rel * torch.randn(out.shape, generator=gen, device=out.device)
        return (out.float() * noise[key]).to(out.dtype)

    handle = model.get_input_embeddings().register_forward_hook(hook)
    try:
        yield
    finally:
        handle.remove()


@torch.no_grad()
def layer_states(model: Any, ids: torch.Tensor) -> torch.Tensor:
    """[layers, hidden] fp32: each decoder layer's output at the last position of row 0, one forward."""
    from oracle.hf.compiled import decoder_layers

    states: list[torch.Tensor] = []

    def hook(module: Any, args: Any, out: Any) -> None:
        h = out[0] if isinstance(out, tuple) else out
        states.append(h[0, -1].float().cpu())

    handles = [layer.register_forward_hook(hook) for layer in decoder_layers(model)]
    try:
        model(input_ids=ids[:1], use_cache=False, logits_to_keep=1)
    finally:
        for h in handles:
            h.remove()
    return torch.stack(states)


def run(model: Any, ids: torch.Tensor, tokens: int, rel: float = 0.0) -> dict[str, Any]:
    """Greedy tokens (row 0, eager, static cache) and per-layer states, perturbed by `rel` if non-zero."""
    from oracle.hf.decode import Decoder

    with perturbed(model, rel):
        states = layer_states(model, ids)
        out = Decoder(model, 1, ids.shape[1] + tokens + 1, "eager").generate(ids[:1], tokens)
    return {"tokens": out[0].tolist(), "states": states}


def relative_errors(a: torch.Tensor, ref: torch.Tensor) -> list[float]:
    return [float((x - y).norm() / y.norm()) for x, y in zip(a, ref)]


def agree(a: list[int], b: list[int]) -> int:
    """How many leading tokens two greedy runs share."""
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def report(oracle: dict[str, Any], emulation: dict[str, Any], perturbed_run: dict[str, Any]) -> list[str]:
    """Table lines: token agreement and per-layer relative errors (oracle vs emulation, emulation vs perturbed)."""
    n = len(emulation["tokens"])
    depth = len(emulation["states"])
    shown = [d for d in DEPTHS if d <= depth] + ([depth] if depth not in DEPTHS else [])
    ours = relative_errors(oracle["states"], emulation["states"])
    chaos = relative_errors(perturbed_run["states"], emulation["states"])
    return [
        f"greedy tokens (batch 1, first {n}): oracle equal to emulation for the first "
        f"{agree(oracle['tokens'], emulation['tokens'])}; emulation with its input embeddings x (1 + {NOISE:g} "
        f"noise) equal to emulation for the first {agree(perturbed_run['tokens'], emulation['tokens'])}",
        "",
        "| hidden state after layer | " + " | ".join(str(d) for d in shown) + " |",
        "|---|" + "---|" * len(shown),
        "| oracle vs emulation, relative error | " + " | ".join(f"{ours[d - 1]:.1e}" for d in shown) + " |",
        f"| emulation x (1 + {NOISE:g} noise) vs emulation | " + " | ".join(f"{chaos[d - 1]:.1e}" for d in shown) + " |",
    ]
