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
#: Most tokens `oracle run` generates (it is a smoke test, not a server).
MAX_NEW_TOKENS = 4096
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
    return p


def run(args: argparse.Namespace) -> int:
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as exc:
        print(f"error: oracle run needs the hf extra (pip install 'kernel-oracle[hf]'): {exc}", file=sys.stderr)
        return 1
    if not 1 <= args.max_new_tokens <= MAX_NEW_TOKENS:
        print(f"error: --max-new-tokens: expected a whole number from 1 to {MAX_NEW_TOKENS}, got "
              f"{args.max_new_tokens}", file=sys.stderr)
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

    device = torch_device(args.device)
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    tokenizer = _tokenizer(args.model)
    ids = _prompt_ids(args, tokenizer)
    model = load_quantized(args.model, device=device)
    vocab = int(getattr(model.config.get_text_config(), "vocab_size", 0) or 0)
    if vocab and int(ids.max()) >= vocab:
        raise InputError(f"token id {int(ids.max())} is outside the vocabulary (vocab_size {vocab}: ids 0 to "
                         f"{vocab - 1})", source=args.model, field="--prompt-ids" if args.prompt is None else "--prompt")
    ids = ids.to(device)
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


def torch_device(text: str | None) -> str:
    """--device as torch names it (cpu, cuda, cuda:N with N below the device count), else InputError."""
    import torch
    if text is None:
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(text.strip())
    except (RuntimeError, ValueError, TypeError):
        device = None
    if device is None or device.type not in ("cpu", "cuda"):
        raise InputError(f"expected cpu, cuda or cuda:N, got {text!r}", field="--device")
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if not count:
            raise InputError(f"no CUDA device on this machine (torch {torch.__version__})", field="--device")
        if device.index is not None and device.index >= count:
            raise InputError(f"{text!r}: this machine has {count} CUDA device(s), cuda:0 to cuda:{count - 1}",
                             field="--device")
    return str(device)


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
    text = args.prompt_ids or "1"
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items or not all(t.isascii() and t.isdigit() and len(t) <= 12 for t in items):
        raise InputError(f"expected comma-separated non-negative token ids, got {text[:60]!r}", field="--prompt-ids")
    if len(items) > MAX_PROMPT_IDS:
        raise InputError(f"at most {MAX_PROMPT_IDS} token ids, got {len(items)}", field="--prompt-ids")
    return torch.tensor([[int(t) for t in items]])


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
