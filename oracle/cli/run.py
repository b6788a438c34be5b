"""`oracle run`: load a quantized checkpoint through oracle.hf, generate, and say what ran.

Prints the generated token ids (and text when the checkpoint has a tokenizer), the
per-layer decision summary, load time, peak memory and tokens/s. Decoding runs over a static
KV cache, each step replayed from one CUDA graph (`--decode graphs`, the default on CUDA), run
eagerly (`--decode eager`), or with the decoder layers compiled by torch.compile and replayed
(`--decode compiled`); `--bench` adds the steady-state table of bench/bench_decode.py. Exit 0 on success,
1 for bad input (a message naming file and tensor), 2 when some quantized layer has no
kernel on this machine. torch and transformers are imported only when the command runs.
"""
from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from ..errors import InputError, NoKernelError
from .options import add_choice_options

NAME = "run"
#: Most tokens `oracle run` generates (it is a smoke test, not a server).
MAX_NEW_TOKENS = 4096
#: Largest --batch of --bench.
MAX_BATCH = 1024
#: Most prompt token ids.
MAX_PROMPT_IDS = 8192


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        NAME, help="load a quantized checkpoint onto the selected kernels and generate tokens",
        description="Load a quantized Hugging Face checkpoint directory (config.json + safetensors) into a "
                    "transformers model whose quantized layers run the kernels oracle selects for this machine, "
                    "generate greedily, and print tokens, decisions, load time, peak memory and tokens/s. "
                    "Needs the hf extra (pip install 'kernel-oracle[hf]').")
    p.add_argument("--model", required=True, metavar="DIR", help="the checkpoint directory")
    p.add_argument("--device", default=None, metavar="TORCH_DEVICE",
                   help="where to run: cpu, cuda, cuda:1 ... (default: cuda when there is one, else cpu); "
                        "kernels are selected for this machine's GPU")
    prompt = p.add_mutually_exclusive_group()
    prompt.add_argument("--prompt", metavar="TEXT", help="text prompt (needs a tokenizer in DIR)")
    prompt.add_argument("--prompt-ids", metavar="1,2,3", help="token ids of the prompt (default: 1)")
    p.add_argument("--max-new-tokens", type=int, default=16, metavar="N",
                   help=f"tokens to generate, 1 to {MAX_NEW_TOKENS} (default 16)")
    p.add_argument("--decode", choices=("eager", "graphs", "compiled"), default=None,
                   help="decode steps over a static KV cache: run eagerly, replayed from one CUDA graph, or "
                        "compiled (decoder layers compiled by torch.compile, which fuses transformers' small "
                        "kernels, then replayed from one CUDA graph; the first steps pay the compile) "
                        "(default: graphs on CUDA, eager on the CPU)")
    p.add_argument("--bench", action="store_true",
                   help="also measure steady-state decode: a 128-token prompt, 16 warm-up tokens, then "
                        "--bench-steps timed steps, for each --batch size and decode mode (eager, and graphs "
                        "and compiled on CUDA); prints tokens/s, ms per step, warm-up time and peak memory")
    p.add_argument("--batch", type=int, nargs="+", default=[1, 8], metavar="N", help="batch sizes for --bench")
    p.add_argument("--bench-steps", type=int, default=128, metavar="N")
    add_choice_options(p)
    p.add_argument("--dtype", choices=("bfloat16", "float16", "float32"), default=None,
                   help="dtype of the unquantized weights and activations (default: the checkpoint's)")
    p.add_argument("--requantize-fused", action="store_true",
                   help="fuse q/k/v and gate/up parts whose per-tensor scales differ into one GEMM by "
                        "requantizing to the largest scale (vLLM's way); default: one kernel per part, exact")
    return p


def run(args: argparse.Namespace) -> int:
    from ..hf.requirements import require_transformers
    try:
        require_transformers()
    except InputError as exc:
        print(f"error: oracle run {exc}", file=sys.stderr)
        return 1
    for field, value, most in (("--max-new-tokens", [args.max_new_tokens], MAX_NEW_TOKENS),
                               ("--batch", args.batch, MAX_BATCH), ("--bench-steps", [args.bench_steps], MAX_NEW_TOKENS)):
        bad = next((v for v in value if not 1 <= v <= most), None)
        if bad is not None:
            print(f"error: {field}: expected a whole number from 1 to {most}, got {bad}", file=sys.stderr)
            return 1
    try:
        return _run(args)
    except NoKernelError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


def _run(args: argparse.Namespace) -> int:
    import torch

    from ..hf.decode import Decoder
    from ..hf.loader import load_quantized

    device = torch_device(args.device)
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    mode = args.decode or ("graphs" if device.startswith("cuda") else "eager")
    tokenizer = _tokenizer(args.model)
    ids = _prompt_ids(args, tokenizer)
    _check_vocabulary(ids, args)          # before the model is built
    model = load_quantized(args.model, device=device, dtype=args.dtype, **choices_from_args(args),
                           requantize_fused=args.requantize_fused)
    ids = ids.to(device)
    start = time.perf_counter()
    decoder = Decoder(model, 1, ids.shape[1] + args.max_new_tokens + 1, mode)
    out = decoder.generate(ids, args.max_new_tokens)
    if decoder.fallback:
        mode = f"{decoder.mode} (graph capture failed: {decoder.fallback})"
    new = _until_eos(out[0].tolist(), model)
    seconds = time.perf_counter() - start
    print(f"model     {args.model} ({model.oracle.report.model.dialect_detail})")
    print(f"prompt    {ids[0].tolist()}")
    print(f"tokens    {new}")
    if tokenizer is not None:
        print(f"text      {tokenizer.decode(new)!r}")
    print("layers")
    for line in model.oracle.summary_lines():
        print(f"  {line}")
    print(f"load      {model.oracle.load_seconds:.2f} s")
    print(f"memory    peak {_peak_mib(device):.1f} MiB ({'GPU allocated' if device.startswith('cuda') else 'process RSS'})")
    print(f"speed     {len(new) / seconds:.1f} tokens/s ({len(new)} tokens in {seconds:.2f} s including prefill "
          f"and warm-up, greedy, batch 1, decode {mode})")
    if args.bench:
        _bench(model, ids, args, device)
    return 0


def choices_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """load_quantized's config / policy / env from the kernel-choice options (as `oracle explain` reads them)."""
    from .explain import config_from_args
    from .options import env_from_args, policy_from_args
    return {"config": config_from_args(args), "policy": policy_from_args(args), "env": env_from_args(args)}


def torch_device(text: str | None) -> str:
    """--device as torch names it (cpu, cuda, cuda:N with N below the device count), else InputError."""
    from ..hf.loader import resolve_device
    return resolve_device(text, field="--device")


def _bench(model: Any, ids: Any, args: argparse.Namespace, device: str) -> None:
    """Steady-state decode table (bench/bench_decode.py's oracle row, for this checkpoint)."""
    from ..hf.decode import measure

    prompt = ids.repeat(1, -(-128 // ids.shape[1]))[:, :128]          # the user's prompt, repeated to 128
    modes = ("eager", "graphs", "compiled") if device.startswith("cuda") else ("eager",)
    print(f"bench     128-token prompt, 16 warm-up tokens, {args.bench_steps} timed decode steps, static KV cache")
    print(f"  {'batch':>5} {'decode':>9} {'tokens/s':>10} {'ms/step':>9} {'prefill ms':>11} {'warm-up s':>10}")
    for batch in args.batch:
        for mode in modes:
            m = measure(model, prompt.repeat(batch, 1), args.bench_steps, mode)
            print(f"  {batch:>5} {m.mode:>9} {m.tok_s:>10.1f} {m.ms_step:>9.2f} {m.prefill_ms:>11.1f} "
                  f"{m.warmup_s:>10.1f}")
    print(f"  peak memory {_peak_mib(device) / 1024:.2f} GiB "
          f"({'GPU allocated' if device.startswith('cuda') else 'process RSS'}, weights, caches and graphs)")


def _until_eos(tokens: list[int], model: Any) -> list[int]:
    """The generated tokens up to and including the first end-of-sequence token."""
    eos = model.generation_config.eos_token_id
    stops = set(eos if isinstance(eos, list) else [] if eos is None else [eos])
    for i, t in enumerate(tokens):
        if t in stops:
            return tokens[:i + 1]
    return tokens


def _check_vocabulary(ids: Any, args: argparse.Namespace) -> None:
    """Every prompt id below the config's vocab_size (of the text model, when nested)."""
    from pathlib import Path

    from ..checkpoints import preflight
    cfg = preflight.sidecar(Path(args.model), "config.json") or {}
    text = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else cfg
    vocab = text.get("vocab_size", cfg.get("vocab_size"))
    if type(vocab) is int and vocab > 0 and int(ids.max()) >= vocab:
        raise InputError(f"token id {int(ids.max())} is outside the vocabulary (vocab_size {vocab}: ids 0 to "
                         f"{vocab - 1})", source=args.model, field="--prompt-ids" if args.prompt is None else "--prompt")


def _tokenizer(path: str) -> Any:
    from pathlib import Path

    from ..checkpoints import preflight
    root = Path(path)
    if not any((root / f).is_file() for f in ("tokenizer.json", "tokenizer.model", "tokenizer_config.json")):
        return None
    if not root.is_dir():
        return None
    preflight.refuse_remote_code(root)
    preflight.check_sidecars(root)
    from transformers import AutoTokenizer
    return preflight.transformers_call(AutoTokenizer.from_pretrained, root / "tokenizer_config.json")


def _prompt_ids(args: argparse.Namespace, tokenizer: Any) -> Any:
    import torch
    if args.prompt is not None:
        if tokenizer is None:
            raise InputError("--prompt needs a tokenizer (tokenizer.json) in the checkpoint directory; "
                             "give --prompt-ids instead", source=args.model, field="--prompt")
        ids = tokenizer(args.prompt, return_tensors="pt").input_ids
        if ids.numel() == 0 or ids.shape[-1] > MAX_PROMPT_IDS:
            raise InputError(f"the prompt is {ids.shape[-1]} tokens; expected 1 to {MAX_PROMPT_IDS}",
                             source=args.model, field="--prompt")
        return ids
    text = args.prompt_ids if args.prompt_ids is not None else "1"   # an explicit empty list is an error
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items or not all(t.isascii() and t.isdigit() and len(t) <= 12 for t in items):
        raise InputError(f"expected comma-separated non-negative token ids, got {text[:60]!r}", field="--prompt-ids")
    if len(items) > MAX_PROMPT_IDS:
        raise InputError(f"at most {MAX_PROMPT_IDS} token ids, got {len(items)}", field="--prompt-ids")
    return torch.tensor([[int(t) for t in items]])


def _peak_mib(device: str) -> float:
    if device.startswith("cuda"):
        import torch
        return torch.cuda.max_memory_allocated() / 2 ** 20
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
