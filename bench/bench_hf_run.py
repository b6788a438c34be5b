#!/usr/bin/env python3
"""oracle.hf against plain BF16 transformers: load time, peak memory and greedy tokens/s.

Writes a random transformers-FP8 (or gpt-oss MXFP4) checkpoint with scripts/make_tiny_checkpoint.py
(optionally with a real model's geometry cut to a few layers), loads it with oracle.hf on the
kernels selected for this machine, generates, then runs the same weights (dequantized with
the emulation plugin's public codecs) as a BF16 transformers model. Prints both and the ratios.

    python bench/bench_hf_run.py --config examples/qwen3-30b-a3b-fp8/config.json --layers 2 --device cuda
"""
from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _peak(device: str) -> float:
    if device.startswith("cuda"):
        return torch.cuda.max_memory_allocated() / 2 ** 30
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20


def _reset(device: str) -> None:
    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def generate(model, ids, tokens: int, device: str) -> tuple[float, list[int]]:
    with torch.no_grad():
        model.generate(ids, max_new_tokens=2, min_new_tokens=2, do_sample=False)      # warm-up
        _sync(device)
        start = time.perf_counter()
        out = model.generate(ids, max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False)
        _sync(device)
    return tokens / (time.perf_counter() - start), out[0, ids.shape[1]:].tolist()


def bf16_model(path: Path, device: str):
    """The same checkpoint as a plain BF16 transformers model (weights dequantized by the emulation codecs)."""
    import json

    from safetensors import safe_open
    from transformers import AutoConfig, AutoModelForCausalLM

    from oracle_emulation.formats import codec_for

    cfg = AutoConfig.from_pretrained(str(path))
    del cfg.quantization_config
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    index = json.loads((path / "model.safetensors.index.json").read_text())["weight_map"]
    handles = {f: safe_open(str(path / f), "pt", device="cpu") for f in set(index.values())}

    def get(name: str) -> torch.Tensor:
        t = handles[index[name]].get_tensor(name)
        if t.dtype == torch.float8_e4m3fn:
            scale = handles[index[name + "_scale_inv"]].get_tensor(name + "_scale_inv")
            t = codec_for("fp8_block").dequantize(t, scale, "fp8_block")
        elif name + "_blocks" in index:
            pass
        return t

    with torch.no_grad():
        for name, p in model.named_parameters():
            base, _, leaf = name.rpartition(".")
            if name in index:
                p.copy_(get(name))
            elif name + "_blocks" in index:
                blocks = handles[index[name + "_blocks"]].get_tensor(name + "_blocks")
                scales = handles[index[name + "_scales"]].get_tensor(name + "_scales")
                w = codec_for("mxfp4").dequantize(blocks.flatten(-2), scales, "mxfp4")
                p.copy_(w.transpose(1, 2))
            else:                                   # fused experts from per-expert tensors
                parts = ("gate_proj", "up_proj") if leaf == "gate_up_proj" else ("down_proj",)
                for e in range(p.shape[0]):
                    p[e].copy_(torch.cat([get(f"{base}.{e}.{q}.weight") for q in parts]))
    return model.eval()


def main() -> None:
    import make_tiny_checkpoint as mk

    import oracle.hf

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("/tmp/bench-hf-run"))
    ap.add_argument("--kind", default="qwen3-moe-fp8", choices=sorted(mk.TINY))
    ap.add_argument("--config", help="a config.json whose geometry to use")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = ap.parse_args()

    t = time.perf_counter()
    mk.write(args.out, args.kind, args.config, args.layers)
    print(f"checkpoint  {args.out} ({args.kind}, {args.layers} layers) written in {time.perf_counter() - t:.1f} s")
    size = sum(f.stat().st_size for f in args.out.glob("*.safetensors")) / 2 ** 30
    print(f"            {size:.2f} GiB of safetensors")
    ids = torch.tensor([[1, 2, 3, 4, 5, 6, 7, 8]], device=args.device)

    _reset(args.device)
    model = oracle.hf.load_quantized(args.out, device=args.device)
    load_q, mem_load_q = model.oracle.load_seconds, _peak(args.device)
    for line in model.oracle.summary_lines():
        print(f"  {line}")
    with torch.no_grad():
        logits_q = model(ids).logits.float()
    tps_q, tok_q = generate(model, ids, args.tokens, args.device)
    mem_q = _peak(args.device)
    del model
    _reset(args.device)

    t = time.perf_counter()
    ref = bf16_model(args.out, args.device)
    load_b, mem_load_b = time.perf_counter() - t, _peak(args.device)
    with torch.no_grad():
        logits_b = ref(ids).logits.float()
    tps_b, tok_b = generate(ref, ids, args.tokens, args.device)
    mem_b = _peak(args.device)

    unit = "GiB GPU allocated" if args.device.startswith("cuda") else "GiB process RSS"
    err = float((logits_q - logits_b).norm() / logits_b.norm())
    print(f"{'':12}{'oracle.hf':>12}{'bf16':>12}{'ratio':>8}")
    print(f"{'load s':12}{load_q:12.2f}{load_b:12.2f}{load_q / load_b:8.2f}")
    print(f"{'peak load':12}{mem_load_q:12.2f}{mem_load_b:12.2f}{mem_load_q / mem_load_b:8.2f}   ({unit})")
    print(f"{'peak gen':12}{mem_q:12.2f}{mem_b:12.2f}{mem_q / mem_b:8.2f}   ({unit})")
    print(f"{'tokens/s':12}{tps_q:12.1f}{tps_b:12.1f}{tps_q / tps_b:8.2f}   (greedy, batch 1, {args.tokens} tokens)")
    same = sum(a == b for a, b in zip(tok_q, tok_b))
    print(f"logits rel. error vs BF16 {err:.4f}; greedy tokens equal to BF16's: {same}/{len(tok_q)}")


if __name__ == "__main__":
    main()
