#!/usr/bin/env python3
"""Load time and peak memory of a ~0.5B checkpoint: oracle.hf (quantized) beside BF16 transformers.

Writes a random model with Qwen2.5-0.5B's geometry (24 layers, hidden 896, intermediate 4864,
vocab 151936: 0.49B parameters) as transformers saves it, and the same weights quantized by
compressed-tensors (a preset, W4A16 by default; tests/checkpoint_matrix.py's writer). Each load
then runs in a fresh process, so its peak RSS is its own: BF16 `AutoModelForCausalLM.from_pretrained`
and `oracle.hf.load_quantized` on the kernels selected for the device. Prints seconds, peak RSS
above the process after imports (Linux VmHWM, reset after the imports), and the checkpoint sizes.

    python bench/bench_hf_load.py [--scheme W4A16] [--device cpu] [--dir /tmp/bench-0.5b] [--layers 24]

On CPU the kernels are the emulation plugin's, which keep a dequantized BF16 copy of every weight
(they are the testing path): expect memory near BF16 size there; the quantized size is what GPU
kernels keep.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
QWEN25_05B = dict(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                  num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=4096,
                  tie_word_embeddings=True, rope_theta=1000000.0)

_MEASURE = r"""
import json, sys, time
kind, path, device = sys.argv[1:4]
import torch, transformers, oracle.hf  # imports first: not part of the load

def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
# a forked child inherits its parent's ru_maxrss: reset the kernel's high-water mark (VmHWM) instead
open("/proc/self/clear_refs", "w").write("5")
base = status("VmRSS")
start = time.perf_counter()
if kind == "bf16":
    model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16).to(device)
else:
    model = oracle.hf.load_quantized(path, device=device)
seconds = time.perf_counter() - start
with torch.no_grad():
    model(torch.tensor([[1, 2, 3]], device=device))
gpu = torch.cuda.max_memory_allocated() / 2**20 if device.startswith("cuda") else 0.0
print(json.dumps({"seconds": seconds, "peak_mib": status("VmHWM") - base, "gpu_mib": gpu}))
"""


def write(root: Path, scheme: str, layers: int) -> tuple[Path, Path]:
    """The BF16 checkpoint (transformers' save_pretrained) and its compressed-tensors `scheme` twin."""
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config

    bf16, quant = root / "bf16", root / scheme.lower()
    if not (bf16 / "config.json").is_file():
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(Qwen2Config(**{**QWEN25_05B, "num_hidden_layers": layers}),
                                                 dtype=torch.bfloat16)
        model.save_pretrained(bf16)
        del model
    if not (quant / "config.json").is_file():
        sys.path.insert(0, str(ROOT / "tests"))
        import checkpoint_matrix as cm
        cm.quantize_dir(bf16, quant, scheme)
    return bf16, quant


def measure(kind: str, path: Path, device: str) -> dict:
    out = subprocess.run([sys.executable, "-c", _MEASURE, kind, str(path), device], capture_output=True, text=True,
                         env={"TQDM_DISABLE": "1", **__import__("os").environ})
    if out.returncode:
        raise SystemExit(f"{kind} load failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def size_mib(path: Path) -> float:
    return sum(f.stat().st_size for f in path.glob("*.safetensors")) / 2 ** 20


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scheme", default="W4A16", help="compressed-tensors preset (default W4A16)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dir", default="/tmp/bench-hf-load-0.5b", help="where the checkpoints are written (kept)")
    ap.add_argument("--layers", type=int, default=24)
    args = ap.parse_args()
    bf16, quant = write(Path(args.dir), args.scheme, args.layers)
    rows = [("transformers BF16", bf16, measure("bf16", bf16, args.device)),
            (f"oracle.hf {args.scheme}", quant, measure("oracle", quant, args.device))]
    print(f"Qwen2.5-0.5B geometry, {args.layers} layers, random weights, device {args.device}")
    print(f"{'load':<22} {'checkpoint MiB':>15} {'seconds':>9} {'peak RSS MiB':>13}"
          + (f" {'GPU MiB':>9}" if args.device.startswith("cuda") else ""))
    for name, path, m in rows:
        print(f"{name:<22} {size_mib(path):>15.0f} {m['seconds']:>9.2f} {m['peak_mib']:>13.0f}"
              + (f" {m['gpu_mib']:>9.0f}" if args.device.startswith("cuda") else ""))
    base, ours = rows[0][2], rows[1][2]
    print(f"ratio oracle/BF16: load time {ours['seconds'] / base['seconds']:.2f}x, "
          f"peak RSS {ours['peak_mib'] / max(base['peak_mib'], 1):.2f}x, "
          f"checkpoint {size_mib(quant) / size_mib(bf16):.2f}x")


if __name__ == "__main__":
    main()
