"""`oracle run`: load a quantized checkpoint through oracle.hf, generate, and say what ran.

Prints the generated token ids (and text when the checkpoint has a tokenizer), the
per-layer decision summary, load time, peak memory and tokens/s. Exit 0 on success,
1 for bad input (a message naming file and tensor), 2 when some quantized layer has no
kernel on this machine. torch and transformers are imported only when the command runs.
"""
from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from ..errors import InputError, NoKernelError

NAME = "run"


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
    p.add_argument("--max-new-tokens", type=int, default=16, metavar="N")
    return p


def run(args: argparse.Namespace) -> int:
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as exc:
        print(f"error: oracle run needs the hf extra (pip install 'kernel-oracle[hf]'): {exc}", file=sys.stderr)
        return 1
    if args.max_new_tokens < 1:
        print(f"error: --max-new-tokens: expected a positive integer, got {args.max_new_tokens}", file=sys.stderr)
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

    from ..hf.loader import load_quantized

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise InputError(f"no CUDA device on this machine (torch {torch.__version__})", field="--device")
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    model = load_quantized(args.model, device=device)
    tokenizer = _tokenizer(args.model)
    ids = _prompt_ids(args, tokenizer).to(device)
    start = time.perf_counter()
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=args.max_new_tokens,
                             do_sample=False, pad_token_id=_pad(model))
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    new = out[0, ids.shape[1]:].tolist()
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
    print(f"speed     {len(new) / seconds:.1f} tokens/s ({len(new)} tokens in {seconds:.2f} s, greedy, batch 1)")
    return 0


def _tokenizer(path: str) -> Any:
    from pathlib import Path
    if not any((Path(path) / f).is_file() for f in ("tokenizer.json", "tokenizer.model", "tokenizer_config.json")):
        return None
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(path)


def _prompt_ids(args: argparse.Namespace, tokenizer: Any) -> Any:
    import torch
    if args.prompt is not None:
        if tokenizer is None:
            raise InputError("--prompt needs a tokenizer (tokenizer.json) in the checkpoint directory; "
                             "give --prompt-ids instead", source=args.model, field="--prompt")
        return tokenizer(args.prompt, return_tensors="pt").input_ids
    text = args.prompt_ids or "1"
    try:
        ids = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise InputError(f"expected comma-separated token ids, got {text!r}", field="--prompt-ids") from None
    if not ids or min(ids) < 0:
        raise InputError(f"expected non-negative token ids, got {text!r}", field="--prompt-ids")
    return torch.tensor([ids])


def _pad(model: Any) -> int:
    cfg = model.generation_config
    pad = cfg.pad_token_id if cfg.pad_token_id is not None else cfg.eos_token_id
    if isinstance(pad, list):
        pad = pad[0] if pad else None
    return 0 if pad is None else int(pad)


def _peak_mib(device: str) -> float:
    if device.startswith("cuda"):
        import torch
        return torch.cuda.max_memory_allocated() / 2 ** 20
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
