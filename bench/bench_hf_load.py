#!/usr/bin/env python3
"""Load time and peak memory of a ~0.5B checkpoint: oracle.hf (quantized) beside BF16 transformers.

Writes a random model with Qwen2.5-0.5B's geometry (24 layers, hidden 896, intermediate 4864,
vocab 151936: 0.49B parameters) as transformers saves it, and the same weights quantized by
compressed-tensors (a preset, W4A16 by default; tests/checkpoint_matrix.py's writer). Each load
then runs in a fresh process, so its peak RSS is its own: BF16 `AutoModelForCausalLM.from_pretrained`
and `oracle.hf.load_quantized` on the kernels selected for the device. Prints seconds, peak RSS
above the process after imports (Linux VmHWM, reset after the imports), and the checkpoint sizes.

    python bench/bench_hf_load.py [--scheme W4A16 [W8A8 ...]] [--device cpu|cuda] [--dir /tmp/bench-0.5b]
                                  [--layers 24] [--writer auto|compressed-tensors|plain] [--repeat 3]
                                  [--timeout S] [--write-only] [--no-bf16] [--json FILE]

On CUDA it also prints torch.cuda.max_memory_allocated during the load (the GPU peak) and what stays
allocated after it. On CPU, int4 and int8 layers run torch's CPU integer kernels (oracle-torch's
`torch.linear.int4_cpu`, `int8_weight_cpu`, `int8_cpu`), which keep the weights packed; other formats
run oracle-emulation. BENCH_THREADS=N sets torch's thread count in the load processes (a machine
shared with other jobs gives noisy times otherwise); BENCH_PROGRESS=1 shows the loader's progress bar on
stderr, BENCH_STACK_AT=S prints every thread's stack after S seconds of a load process (stderr; both are
printed when a load overruns --timeout). Figures: bench/results/hf_load.md.
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
import json, os, sys, time
began = time.perf_counter()
kind, path, device, forward = sys.argv[1:5]
if os.environ.get("BENCH_STACK_AT"):     # a load that overruns prints where it is (stderr, shown on a timeout)
    import faulthandler
    faulthandler.dump_traceback_later(float(os.environ["BENCH_STACK_AT"]), exit=False)
import torch, transformers, oracle.hf  # imports first: not part of the load
if os.environ.get("BENCH_THREADS"):
    torch.set_num_threads(int(os.environ["BENCH_THREADS"]))

def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
cuda = device.startswith("cuda")
if cuda:
    torch.zeros(1, device=device)            # the CUDA context first: not part of the load
    torch.cuda.reset_peak_memory_stats()
# a forked child inherits its parent's ru_maxrss: reset the kernel's high-water mark (VmHWM) instead
open("/proc/self/clear_refs", "w").write("5")
base = status("VmRSS")
start, cpu0 = time.perf_counter(), time.process_time()
print(f"imports and device ready after {start - began:.1f} s", file=sys.stderr, flush=True)
if kind == "bf16":
    model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16).to(device)
else:
    model = oracle.hf.load_quantized(path, device=device, progress=True if os.environ.get("BENCH_PROGRESS") else None)
if cuda:
    torch.cuda.synchronize()
out = {"seconds": time.perf_counter() - start, "cpu_seconds": time.process_time() - cpu0,
       "peak_mib": status("VmHWM") - base, "rss_mib": status("VmRSS") - base,
       "gpu_mib": torch.cuda.max_memory_allocated() / 2**20 if cuda else 0.0,
       "gpu_resident_mib": torch.cuda.memory_allocated() / 2**20 if cuda else 0.0}
if kind != "bf16":
    out["kernels"] = sorted({k.spec.name for k in model.oracle.kernels.values() if getattr(k, "spec", None)})
print(json.dumps(out), flush=True)
if forward == "1":
    with torch.no_grad():
        model(torch.tensor([[1, 2, 3]], device=device))
    if cuda:
        torch.cuda.synchronize()
    out["first_token_seconds"] = time.perf_counter() - start     # a mapped BF16 file is read by now
    out["forward_ok"] = True
    out["peak_mib"] = status("VmHWM") - base        # with every weight touched (a mapped BF16 file counts now)
    out["rss_mib"] = status("VmRSS") - base
    print(json.dumps(out), flush=True)
"""


def write(root: Path, scheme: str, layers: int, writer: str, bf16_needed: bool = True) -> tuple[Path, Path, str]:
    """The BF16 checkpoint (random, transformers' names) and a compressed-tensors `scheme` checkpoint of the same
    geometry: the BF16 one quantized by compressed-tensors itself (tests/checkpoint_matrix.py) or, without it,
    random codes written by bench/ct_w4a16.py (W4A16, W8A16, W8A8, FP8_DYNAMIC: the same bytes per weight,
    nothing to quantize)."""
    sys.path.insert(0, str(ROOT / "bench"))
    import ct_w4a16

    def config():                    # transformers is imported only when something is written (seconds)
        from transformers import Qwen2Config
        return Qwen2Config(**{**QWEN25_05B, "num_hidden_layers": layers})

    if writer == "auto":
        try:
            import compressed_tensors  # noqa: F401
            writer = "compressed-tensors"
        except ImportError:
            writer = "plain"
    if writer == "plain" and scheme not in ct_w4a16.SCHEMES:
        raise SystemExit(f"the plain writer (bench/ct_w4a16.py) writes {sorted(ct_w4a16.SCHEMES)}, not {scheme}")
    bf16, quant = root / "bf16", root / f"{scheme.lower()}-{writer}"
    if writer == "plain" and not (quant / "config.json").is_file():       # the quantized one first: a load
        ct_w4a16.write_random(quant, config(), scheme)                       # can start while BF16 is written
    if not (bf16 / "config.json").is_file() and (bf16_needed or writer != "plain"):
        ct_w4a16.write_random_bf16(bf16, config())
    if not (quant / "config.json").is_file():
        sys.path.insert(0, str(ROOT / "tests"))
        import checkpoint_matrix as cm
        cm.quantize_dir(bf16, quant, scheme)
    return bf16, quant, writer


def measure(kind: str, path: Path, device: str, forward: bool, timeout: float | None) -> dict:
    import os
    try:
        out = subprocess.run([sys.executable, "-c", _MEASURE, kind, str(path), device, "1" if forward else "0"],
                             capture_output=True, text=True, env={"TQDM_DISABLE": "1", **os.environ}, timeout=timeout)
        stdout, stderr, code = out.stdout, out.stderr, out.returncode
    except subprocess.TimeoutExpired as exc:
        stdout = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        err = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        stderr, code = f"timed out after {timeout} s; its stderr ended with:\n{err[-6000:]}", 0
    lines = [ln for ln in stdout.strip().splitlines() if ln.startswith("{")]
    if not lines:
        raise SystemExit(f"{kind} load failed (exit {code}):\n{stderr[-6500:]}")
    found = json.loads(lines[-1])
    if forward and not found.get("forward_ok"):
        found["forward_error"] = stderr.strip().splitlines()[-1][:300] if stderr.strip() else "no forward"
    return found


def size_mib(path: Path) -> float:
    return sum(f.stat().st_size for f in path.glob("*.safetensors")) / 2 ** 20


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scheme", nargs="+", default=["W4A16"],
                    help="compressed-tensors preset(s) (default W4A16); BF16 is loaded once beside them")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dir", default="/tmp/bench-hf-load-0.5b", help="where the checkpoints are written (kept)")
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--writer", choices=["auto", "compressed-tensors", "plain"], default="auto",
                    help="who writes the quantized checkpoint: compressed-tensors, or bench/ct_w4a16.py (torch + "
                         "safetensors only: W4A16, W8A16, W8A8, FP8_DYNAMIC); auto: compressed-tensors when installed")
    ap.add_argument("--repeat", type=int, default=1, help="loads of each kind, alternating; the fastest is shown")
    ap.add_argument("--no-forward", action="store_true", help="skip the one-token forward after each load")
    ap.add_argument("--write-only", action="store_true", help="write the checkpoints and stop")
    ap.add_argument("--no-bf16", action="store_true", help="load only the quantized checkpoints (a warm-up run)")
    ap.add_argument("--timeout", type=float, default=None, help="seconds allowed per load process")
    ap.add_argument("--json", type=Path, help="also write the figures here (JSON)")
    args = ap.parse_args()
    import os
    import time
    started = time.perf_counter()
    quants: dict[str, Path] = {}
    for scheme in args.scheme:
        bf16, quants[scheme], writer = write(Path(args.dir), scheme, args.layers, args.writer, not args.no_bf16)
        print(f"checkpoint {scheme} ready at {time.perf_counter() - started:.1f} s: {quants[scheme]}", flush=True)
    if args.write_only:
        return
    runs: dict[str, list[dict]] = {"bf16": [], **{s: [] for s in quants}}
    paths = {**quants, "bf16": bf16}
    for _ in range(args.repeat):
        kinds = [*quants]
        for kind in kinds[:1] + ([] if args.no_bf16 else ["bf16"]) + kinds[1:]:   # BF16 right after the first
                                                            # scheme (a killed run keeps the main comparison)
            try:
                found = measure("bf16" if kind == "bf16" else "oracle", paths[kind], args.device,
                                not args.no_forward, args.timeout)
            except SystemExit as failed:       # one kind failing must not lose the others' figures
                print(f"{kind}: {failed}", flush=True)
                continue
            runs[kind].append(found)
            print(f"{kind}: {json.dumps(found)}", flush=True)     # each load as it ends
    if not runs["bf16"]:
        raise SystemExit("no comparison: BF16 transformers " + ("not loaded (--no-bf16)" if args.no_bf16 else
                                                                "never loaded"))
    best = {}
    for kind, found in runs.items():       # memory: the largest peak of the repeats, not the fastest run's
        if found:
            best[kind] = {**min(found, key=lambda m: m["seconds"]), "peak_mib": max(m["peak_mib"] for m in found),
                          "gpu_mib": max(m["gpu_mib"] for m in found)}
    cuda = args.device.startswith("cuda")
    threads = os.environ.get("BENCH_THREADS", "torch default")
    print(f"Qwen2.5-0.5B geometry, {args.layers} layers, random weights, device {args.device}, checkpoints written by "
          f"{writer}, {args.repeat} load(s) each (fastest shown), torch threads: {threads}, "
          f"load average {os.getloadavg()[0]:.1f}")
    first = not args.no_forward
    print(f"{'load':<24} {'checkpoint MiB':>15} {'seconds':>9} {'CPU seconds':>12}"
          + (f" {'to 1st token':>13}" if first else "") + f" {'peak RSS MiB':>13}"
          + (f" {'GPU peak MiB':>13} {'GPU resident MiB':>17}" if cuda else "") + "  kernels")
    for kind, m in best.items():
        name = "transformers BF16" if kind == "bf16" else f"oracle.hf {kind}"
        print(f"{name:<24} {size_mib(paths[kind]):>15.0f} {m['seconds']:>9.2f} {m['cpu_seconds']:>12.2f}"
              + (f" {m.get('first_token_seconds', float('nan')):>13.2f}" if first else "") + f" {m['peak_mib']:>13.0f}"
              + (f" {m['gpu_mib']:>13.0f} {m['gpu_resident_mib']:>17.0f}" if cuda else "")
              + f"  {', '.join(m.get('kernels', []))}")
    if first:
        print("to 1st token: the load and one 3-token forward (transformers maps a BF16 file and reads its pages "
              "in that forward; the oracle reads every tensor during the load)")
    print("peak RSS: above the process after its imports, through the load" + ("" if args.no_forward else
          " and one 3-token forward (which touches every weight: a memory-mapped BF16 file counts from then)"))
    base = best["bf16"]
    for kind, ours in best.items():
        if kind == "bf16":
            continue
        size = size_mib(paths[kind])
        print(f"{kind}: oracle/BF16 load time {ours['seconds'] / base['seconds']:.2f}x, "
              f"peak RSS {ours['peak_mib'] / max(base['peak_mib'], 1):.2f}x, "
              + (f"GPU peak {ours['gpu_mib'] / max(base['gpu_mib'], 1):.2f}x BF16's and "
                 f"{ours['gpu_mib'] / size:.2f}x the checkpoint, GPU resident "
                 f"{ours['gpu_resident_mib'] / max(base['gpu_resident_mib'], 1):.2f}x, " if cuda else "")
              + f"checkpoint {size / size_mib(bf16):.2f}x")
    for kind, m in best.items():
        if m.get("forward_error"):
            print(f"{kind}: the forward after the load failed: {m['forward_error']}")
    if args.json:
        args.json.write_text(json.dumps({"device": args.device, "layers": args.layers, "writer": writer,
                                         "schemes": args.scheme, "runs": runs,
                                         "checkpoint_mib": {k: size_mib(p) for k, p in paths.items()}},
                                        indent=1))


if __name__ == "__main__":
    main()
