"""Benchmark: the oracle's dense GEMMs and fused MoE beside the kernels a user would pick instead.

One run, one process, weights served from HBM (the H200's L2 is 60 MB):
  dense (issue 26): per shape N x K and M, INT4 W4A16 g128 [oracle-triton, torch's tinygemm, gemlite],
    MXFP4 / NVFP4 W4A16 [oracle-triton, gemlite], FP8 W8A8 per-channel [oracle-triton, oracle-torch,
    torch._scaled_mm on codes quantized outside the timing (the GEMM alone), gemlite], FP8 W8A16 block
    [oracle-triton], and BF16 cuBLAS (x @ w.T). Each kernel is built on its own copies of the weights
    until the copies exceed 256 MB; the timed calls cycle through the copies.
  MoE (issue 25): per model and M, the oracle's fused MoE, the same fused MoE in its BF16 mode on
    unquantized experts (oracle-bf16), and those BF16 experts through torch._grouped_mm (bf16; routing
    sorted outside the timing), and vLLM 0.32's own Triton fused MoE (vllm-triton on the FP8-block experts,
    vllm-triton-bf16 on the BF16 ones; vllm_moe_peer.py, from vLLM's sources: --vllm-src, skipped with a line
    where they are not at hand). A layer's experts exceed 256 MB, so instead of copies the
    timed calls cycle through routings whose experts differ (M = 1: disjoint expert sets) until the
    experts touched exceed 256 MB.
MoE candidates are warmed on their own calls first (--moe-warm-s, 0.3 s: a BF16-GEMM warm-up power-capped the GPU
for the next timing, see SETTLE_S) and timed three times at M = 1 (--moe-repeat; the median, all printed).
--moe-rounds N (N > 1) then times "oracle", its --moe-variants and "oracle-bf16" once each in N interleaved rounds
(order flipped every round, ABBA...) and prints each round's ratio to the BF16 mode, its median and worst: the
BF16 mode and the shipped entry at 4096 tokens drift differently between processes (Qwen3-235B's BF16 mode timed
3103.6 and 3566.0 us on the same H200 in two processes, R108a / R108c), so neither one sequential pass nor two
processes settle a ratio near 1.0; in interleaved rounds the drift within the process falls on both sides alike.
Per candidate: graph (us per call under CUDA-graph replay), eager (back-to-back calls, CUDA events),
host (Python time per eager call), the relative error against oracle-emulation (a peer whose
numerics disagree is flagged, not ranked), and launches per raw call (torch.profiler). HBM: bytes
read per call / measured copy bandwidth. A peer that is not installed is skipped with a line.

    python bench/bench_peers.py [--only dense|moe] [--m 1 16 256 4096] [--shapes ...] [--json out.json]
"""
from __future__ import annotations

import contextlib
import json
import math
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from unittest import mock

import torch
from bench_triton import _bf16_moe, _quant, dense_reference
from gpu_timing import (copy_bandwidth, graph_ms, keep_shapes, rel, sm_clock, start, table_args, warm_calls,
                        warm_clocks)

from oracle import LinearLayer, MoELayer
from oracle.catalog import Mode

ROTATE = 256 << 20
DEADLINE = [math.inf]        # --budget-s: the MoE table starts no new model or M after this
MOE_M: dict[str, list[int]] = {}     # --moe-m: a model's own token counts instead of --m
#: --moe-variants: per model, {label: config} of the oracle's fused MoE timed in the same row beside the shipped
#: choice (ONLY_M: at that M only; SET: {"module.NAME": value} module switches held for that variant only, e.g.
#: oracle_triton.moe.ALIGN_WIDE; an entry with no launch keys: the shipped choice under its switches), as peers
#: "oracle:LABEL"
MOE_VARIANTS: dict[str, dict] = {}
#: --moe-bf16-variants: {model: {label: config}} of the BF16 mode (the baseline "oracle-bf16") timed beside it, so a
#: launch config that helps the quantized MoE's BF16 GEMMs (DEQUANT_MM) is measured on the baseline too
MOE_BF16_VARIANTS: dict[str, dict] = {}
#: --moe-experts: (model, M) -> an extra row after that M's, on routings that touch exactly this many experts
MOE_TOUCH: dict[tuple[str, int], int] = {}
MOE_REPEAT = [3]                    # --moe-repeat: each M=1 MoE candidate timed this many times (median; the spread)
MOE_REPEAT_UPTO = [1]               # --moe-repeat-upto: ... and each candidate of a row up to this M
MOE_WARM = [0.3]                    # --moe-warm-s: each MoE candidate's own calls run this long before its timings
MOE_LAUNCHES = [False]              # --moe-launches: every oracle candidate's launches and device times, at every M
#: --moe-rounds: N > 1 times each row's "oracle", "oracle:LABEL" and "oracle-bf16" in N interleaved rounds after the
#: row's figures (interleaved_rounds; the module docstring says why); 1: none, the table as before
MOE_ROUNDS = [1]
BF16_MODE = "oracle-bf16"           # the baseline of the rounds' ratios: this fused MoE in its BF16 mode
#: --dense-repeat / --dense-warm-s: each dense candidate (BF16 included) runs its own calls this long, then is
#: timed this many times (the median; all printed with the SM clock before each). Ninth pass: the MoE table's
#: power-cap artifact (SETTLE_S) checked on the dense table, where every candidate used to be timed once
#: right after the previous one, so a ratio could carry the clock state the previous candidate left.
DENSE_REPEAT = [3]
DENSE_WARM = [0.3]
#: --dense-variants: per shape, {label: config} of oracle-triton's GEMM timed in each row beside the shipped
#: choice (peers "oracle:LABEL"); "BASE": 1 lays the rest over the configuration the layer chooses at that M
#: (e.g. {"BASE": 1, "PDL": 1}); "RULES": 1 over the shape rules' choice instead (what a device without a tuned
#: entry, its own or a sibling's, runs); "ONLY_M": that M only
DENSE_VARIANTS: dict[str, dict] = {}
#: --vllm-src: vLLM's source tree for the "vllm-triton" MoE peer (vllm_moe_peer.find_tree; None: $ORACLE_VLLM_SRC or
#: an installed vllm)
VLLM_SRC: list = [None]
VLLM_PEER = "vllm-triton"              # vLLM's FP8 W8A8 block MoE (FP8-block rows)
VLLM_BF16 = "vllm-triton-bf16"         # vLLM's BF16 Triton MoE on the row's BF16 experts (every SiLU / gpt-oss row)
#: gemlite autotunes each new shape and M; after this many seconds of the run it is skipped (said so)
BUDGET = [240.0]
BEGAN = time.perf_counter()
LEAN = [False]          # --lean
WRONG = 2e-2          # a candidate further than this from emulation is computing something else
#: Seconds of BF16 GEMMs before each MoE row's first timing: after a model's build (seconds of host work
#: while the GPU idles) the first graph timing of DeepSeek-R1 at M=1 ran 119.8 us, the next ones 108.7
#: (R10, bench/moe_gap.py; its FC1 launch 72.4 us against 63.1). With this settle, R12 still timed that
#: row at 115.7 here (FC1 69.4 us of device time) against 105.1 in sweep_moe.py for the same entry, so
#: the transient is not the whole difference (bench/results/h200-2026-12-02/moe6b_rounds.md says what is
#: known). Eighth pass: the settle is the transient's cause, not its cure. R21 logged the SM clock and board
#: power: 1485 MHz at 692-697 W right after it (the 700 W cap), and DeepSeek-R1 M=1's first timing 115.2 us
#: against 103.6 / 103.5 next; a Qwen3 row (235 W) was back at 1980 MHz after 0.3 s of its own calls. So a
#: row now starts with each candidate's own calls (--moe-warm-s, 0.3 s by default: the clocks leave idle
#: without the power cap) and times M=1 candidates three times (--moe-repeat, median); the BF16 settle runs
#: only with --moe-warm-s 0 (the seventh pass's procedure).
SETTLE_S = 0.3

DENSE = {"8192x8192": (8192, 8192), "36864x7168": (36864, 7168), "7168x18432": (7168, 18432),
         "2048x4096": (2048, 4096)}      # N x K, issue 26
DENSE_MODES = [  # weight format, mode, activation, params, peers
    ("int4", "w4a16_int4", "bf16", {}, ("tinygemm", "gemlite")),
    ("mxfp4", "w4a16_mx", "bf16", {}, ("gemlite",)),
    ("nvfp4", "w4a16_nvfp4", "bf16", {}, ("gemlite",)),
    ("fp8_channel", "w8a8_fp8_channel", "fp8", {"activation_granularity": "token"},
     ("oracle-torch", "scaled_mm", "gemlite")),
    ("fp8_block", "w8a16_block", "bf16", {}, ()),
]
MOE = {  # name -> (E, top_k, H, I, format, mode, activation format, params, expert activation)
    "qwen3-30b-a3b": (128, 8, 2048, 768, "fp8_block", "w8a8_block", "fp8", {"activation_granularity": "group"}, "silu"),
    "deepseek-r1": (256, 8, 7168, 2048, "fp8_block", "w8a8_block", "fp8", {"activation_granularity": "group"}, "silu"),
    "gpt-oss-20b": (32, 4, 2880, 2880, "mxfp4", "w4a16_mx", "bf16", {}, "swigluoai"),
    "gpt-oss-120b": (128, 4, 2880, 2880, "mxfp4", "w4a16_mx", "bf16", {}, "swigluoai"),
    "qwen3-235b-a22b-nvfp4": (128, 8, 4096, 1536, "nvfp4", "w4a4_nvfp4", "nvfp4", {}, "silu"),
    # the same layer as its ModelOpt checkpoint carries it: static per-tensor input scales (_calibrated_input_scales)
    "qwen3-235b-a22b-nvfp4-static": (128, 8, 4096, 1536, "nvfp4", "w4a4_nvfp4", "nvfp4", {}, "silu"),
    "qwen3-30b-a3b-int4": (128, 8, 2048, 768, "int4", "w4a16_int4", "bf16", {}, "silu"),     # symmetric (zero point 8)
    "qwen3-30b-a3b-int4-zp": (128, 8, 2048, 768, "int4", "w4a16_int4", "bf16", {}, "silu"),
}


# ---------------------------------------------------------------- timing
def _reps(m: int) -> int:
    return 20 if m <= 16 else (6 if m <= 256 else 2)


def measure(calls: list, m: int) -> dict:
    """calls: zero-argument callables, one per weight copy / routing; each timed call takes the next."""
    n = len(calls)
    reps = n * max(1, math.ceil(_reps(m) / n))

    def loop():
        for i in range(reps):
            calls[i % n]()
    loop(), loop()                                   # compile, and let eager graphs capture
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    loop()
    host = (time.perf_counter() - t0) / reps * 1e6
    torch.cuda.synchronize()
    start_ev, end_ev = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    eager = []
    for _ in range(3):
        start_ev.record()
        loop()
        end_ev.record()
        end_ev.synchronize()
        eager.append(start_ev.elapsed_time(end_ev) * 1e3 / reps)
    graph = graph_ms(loop, 1) * 1e3 / reps          # the whole cycle captured once, replayed
    return {"graph": graph, "eager": sorted(eager)[1], "host": host}


def measure_moe(calls: list, m: int) -> dict:
    """measure(), MOE_REPEAT times over at M = 1 (--moe-repeat; one token, where the transient below is a tenth
    of the figure) and up to --moe-repeat-upto (the ninth pass's R23 found INT4 M=16 candidates 2-5% apart,
    within what one timing can tell); larger M once: graph / eager / host are the medians, and `repeats` /
    `eager_repeats` every figure in order. Why: the eighth pass (R19, bench/moe_gap.py --content) timed
    DeepSeek-R1 M=1 at 113.3 us in a process's first measure after the build and 102.7 / 102.5 in the next
    two (same build, routings and kernels): a single timing of the first row carries that transient."""
    return measure_repeated(calls, m, MOE_REPEAT[0] if m <= max(1, MOE_REPEAT_UPTO[0]) else 1, MOE_WARM[0])


def measure_dense(calls: list, m: int) -> dict:
    """A dense candidate's figures: its own calls for --dense-warm-s, then measure() --dense-repeat times (the
    medians; every figure and the SM clock before each in the row: DENSE_REPEAT says why)."""
    return measure_repeated(calls, m, DENSE_REPEAT[0], DENSE_WARM[0])


def measure_repeated(calls: list, m: int, repeat: int, warm_s: float) -> dict:
    """measure() `repeat` times after `warm_s` seconds of the candidate's own calls, the SM clock and board
    power logged before the warm-up and before each timing."""
    clocks = [sm_clock()]
    if warm_s > 0:         # the candidate's own calls first (SETTLE_S says why)
        warm_calls(calls, warm_s)
    runs = []
    for _ in range(max(1, repeat)):
        clocks.append(sm_clock())
        runs.append(measure(calls, m))
    if len(runs) == 1:
        return {**runs[0], "clocks": clocks}
    med = lambda key: sorted(r[key] for r in runs)[len(runs) // 2]     # noqa: E731
    return {"graph": med("graph"), "eager": med("eager"), "host": med("host"), "clocks": clocks,
            "repeats": [r["graph"] for r in runs], "eager_repeats": [r["eager"] for r in runs]}


def interleaved_rounds(names: list[str], time_one: Callable[[str], float], n: int,
                       baseline: str = BF16_MODE) -> dict:
    """Time each of `names` once per round for `n` rounds, the order reversed every other round (ABBA...), so
    clock and power drift within the process falls on every candidate alike; GPU-free (time_one(name) -> us).
    A candidate whose time_one raises is recorded in "errors" and left out of the later rounds (its "times" stay
    a prefix of the rounds, so they pair with the baseline's by index). With the baseline timed, each other
    candidate's per-round ratio candidate / baseline (>1: slower than the BF16 mode), its median and its worst
    (the largest); without it, no ratio fields."""
    times: dict[str, list[float]] = {name: [] for name in names}
    errors: dict[str, str] = {}
    order: list[list[str]] = []
    for r in range(n):
        this = [name for name in (names if r % 2 == 0 else names[::-1]) if name not in errors]
        order.append(this)
        for name in this:
            try:
                times[name].append(float(time_one(name)))
            except Exception as exc:  # noqa: BLE001 - a candidate that fails a round is reported, never fatal
                errors[name] = f"{type(exc).__name__}: {str(exc)[:120]}"
    out: dict = {"order": order, "times": times, "errors": errors}
    base = times.get(baseline) or []
    ratios = {name: [v / b for v, b in zip(vals, base)] for name, vals in times.items() if name != baseline}
    ratios = {name: rs for name, rs in ratios.items() if rs}
    if ratios:
        out.update(ratio_vs_bf16_mode=ratios, median_ratio={k: statistics.median(v) for k, v in ratios.items()},
                   worst_ratio={k: max(v) for k, v in ratios.items()})
    return out


def rounds_lines(row: dict) -> list[str]:
    """--moe-rounds: one line per candidate of the row's interleaved rounds (its graph us per round, then its
    per-round ratio to the BF16 mode with the median and the worst where the BF16 mode was timed)."""
    rounds = row.get("rounds")
    if not rounds:
        return []
    lines = []
    for name in dict.fromkeys(n for order in rounds["order"] for n in order):
        t = row["peers"].get(name, {})
        line = f"    {row['shape']} {name} interleaved rounds (graph us): " + \
            ", ".join(f"{v:.1f}" for v in t.get("rounds", []))
        if name in rounds.get("ratio_vs_bf16_mode", {}):
            line += ("; vs the BF16 mode: " + ", ".join(f"{r:.3f}" for r in rounds["ratio_vs_bf16_mode"][name])
                     + f" (median {rounds['median_ratio'][name]:.3f}x, worst {rounds['worst_ratio'][name]:.3f}x)")
        if t.get("rounds_error"):
            line += f"; error: {t['rounds_error']}"
        lines.append(line)
    ours = row["peers"].get("oracle", {}).get("rounds")
    for peer in (VLLM_PEER, VLLM_BF16):
        theirs = row["peers"].get(peer, {}).get("rounds")
        if ours and theirs:
            per = [b / a for a, b in zip(ours, theirs)]
            lines.append(f"    {row['shape']} interleaved rounds, {peer} / oracle: "
                         + ", ".join(f"{r:.3f}" for r in per) + f" (median {statistics.median(per):.3f}x, above 1: ours faster)")
    return lines


def launches(fn) -> tuple[int | None, str]:
    """GPU operations (kernels, copies, memsets) of one raw call and their device times (name:us);
    (None, reason) if the profiler cannot say."""
    from torch.profiler import ProfilerActivity, profile

    try:
        fn()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        ops = [e for e in prof.events() if e.device_type.name == "CUDA"]
        times = ", ".join(f"{e.name[:28]}:{e.device_time:.1f}" for e in ops)
        return len(ops), times
    except Exception as exc:  # noqa: BLE001 - a count is a detail, never a failure
        return None, f"{type(exc).__name__}"


def copies_for(nbytes: int) -> int:
    return max(2, ROTATE // max(1, nbytes) + 1)


def _clone(tensors: dict) -> dict:
    return {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in tensors.items()}


# ---------------------------------------------------------------- dense candidates
#: --gemlite-load-config: gemlite configurations loaded after its H100 file (they win), so the shapes
#: they name are not autotuned in the timing run (bench/configs/gemlite_fp8_channel_h200.json: R11's
#: tuned choices, and 7168x18432 pinned to 8192x8192's: says so in the figures' notes)
GEMLITE_PINS: list[str] = []
GEMLITE_AUTOTUNE_SET: list[str] = []
#: --peers: only these peers beside ours and BF16 (None: every peer the mode lists)
PEERS: list = [None]
#: --gemlite-save-config: the path gemlite's autotuned choices are written to after every dense row (a run cut by
#: its time limit keeps the rows it finished)
GEMLITE_SAVE: list[str] = []


def _gemlite():
    try:
        import gemlite
    except Exception as exc:  # noqa: BLE001 - an absent peer is skipped with its reason
        return None, f"{type(exc).__name__}: {exc}"
    import os
    cfg = os.path.join(os.path.dirname(gemlite.__file__), "configs", "h100.json")
    if os.path.exists(cfg) and "h200" in torch.cuda.get_device_name().lower():
        gemlite.GemLiteLinear.load_config(cfg)       # H100's tuned configs (it ships none for the H200)
    for pin in GEMLITE_PINS:
        gemlite.GemLiteLinear.load_config(pin)
    mode = os.environ.get("BENCH_GEMLITE_AUTOTUNE")     # --gemlite-autotune (inherited by the precompile workers)
    if mode and not GEMLITE_AUTOTUNE_SET:
        gemlite.set_autotune(mode)                     # reloads its kernel modules with that configuration list
        GEMLITE_AUTOTUNE_SET.append(mode)
    rows = os.environ.get("BENCH_GEMLITE_QUANT_ROWS")  # --gemlite-quantizer-rows
    if rows:
        from gemlite import quant_utils
        tuner = quant_utils.scale_activations_per_token_triton_v3_kernel     # gemlite's per-token quantizer
        tuner.configs = [c for c in tuner.configs if c.kwargs.get("BLOCK_SIZE_M") == int(rows)] or tuner.configs
    return gemlite, None


def build_dense(cand, fmt, layer, mode, tensors):
    """(apply(x), bytes of the weights it reads, the raw launches of a call) for one copy, or raises."""
    n, k = layer.out_features, layer.in_features
    if cand == "oracle":
        from oracle_triton.linear import TritonLinear
        t = TritonLinear(layer, mode, None)
        t.process_weights(**tensors)
        return t.apply, t.packed.nbytes(), t.forward
    if cand == "tinygemm":
        from oracle_torch.tinygemm import TorchTinyGemmInt4Linear
        t = TorchTinyGemmInt4Linear(layer, mode, None)
        t.process_weights(**tensors)
        return t.apply, t.packed.numel() * 4 + t.sz.numel() * 2, t.forward
    if cand == "oracle-torch":
        from oracle_torch.linear import TorchChannelFP8Linear
        t = TorchChannelFP8Linear(layer, mode, None)
        t.process_weights(**tensors)
        return t.apply, n * k + n * 4, t.forward
    if cand == "scaled_mm":
        from oracle_torch import quantize
        w_t = tensors["weight"].t()
        sb = tensors["weight_scale"].reshape(1, n).float().contiguous()
        held = {}

        def run(x):
            if held.get("x") is not x:       # quantized once per activation tensor, outside the timing
                held["x"], held["q"] = x, quantize.fp8_per_token(x)
            q, sa = held["q"]
            return torch._scaled_mm(q, w_t, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)
        return run, n * k + n * 4, run
    if cand == "gemlite":
        gl, why = _gemlite()
        if gl is None:
            raise ImportError(why)
        from gemlite import helper
        dev = tensors["weight"].device
        if fmt == "int4":
            from oracle_emulation.formats.int4 import unpack_int32
            q = unpack_int32(tensors["weight"], dim=0).t().to(torch.uint8).contiguous()       # [N, K]
            z = (unpack_int32(tensors["weight_zero_point"], dim=1) if "weight_zero_point" in tensors
                 else torch.full_like(tensors["weight_scale"], 8, dtype=torch.int64))
            lin = helper.A16Wn(device=dev, dtype=torch.bfloat16).from_weights(
                q, tensors["weight_scale"].t().contiguous(), z.t().to(torch.bfloat16).contiguous(), W_nbits=4,
                group_size=k // tensors["weight_scale"].shape[0])
        elif fmt == "mxfp4":
            # gemlite converts the scales it is given with .to(float8_e8m0fnu): it wants their values (an E8M0
            # tensor passes through), not the raw exponent bytes as uint8 (R19: 127 read as the number 127,
            # relative error 4.6e3 against emulation)
            # gemlite 0.6.0's from_packed_weights derives the group from the packed byte count (N K/2 bytes
            # over N K/32 scales: 16) and then asserts 32 (R31 of the twelfth pass); from_weights takes one
            # E2M1 code per byte ([N, K]) and packs them itself, so the group it derives is 32
            from oracle_emulation.formats.e2m1 import unpack
            lin = helper.A16W4_MXFP(device=dev, dtype=torch.bfloat16).from_weights(
                unpack(tensors["weight"]).contiguous(),
                tensors["weight_scale"].view(torch.uint8).view(torch.float8_e8m0fnu))
        elif fmt == "nvfp4":
            lin = helper.A16W4_NVFP(device=dev, dtype=torch.bfloat16).from_packed_weights(
                tensors["weight"], scales=tensors["weight_scale"], meta_scale=tensors["weight_global_scale"])
        elif fmt == "fp8_channel":
            lin = helper.A8W8_fp8_dynamic(device=dev, dtype=torch.bfloat16).from_weights(
                tensors["weight"], scales=tensors["weight_scale"].reshape(n, 1).float())
        else:
            raise ValueError(f"no gemlite path for {fmt}")
        nbytes = sum(t.numel() * t.element_size() for t in (lin.W_q, lin.scales, lin.zeros) if t is not None)
        return lin, nbytes, lin
    raise ValueError(cand)


def bench_dense(ms_list, bw, rows, skipped):
    print("\n== dense: us per call; graph = CUDA-graph replay, eager = back-to-back calls, host = Python "
          "time per eager call; weights rotated through > 256 MB of copies ==")
    for name, (n, k) in DENSE.items():
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.05
        bf16 = [w] + [w.clone() for _ in range(copies_for(n * k * 2) - 1)]
        bf16_t = {}
        for m in ms_list:
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            bf16_t[m] = measure_dense([lambda ww=ww: x @ ww.t() for ww in bf16], m)
        for fmt, mode_name, act, params, peers in DENSE_MODES:
            ref, tensors, layer, mode = dense_reference(name, fmt, n, k, w, mode_name, act, params)
            xr = torch.randn(16, k, device="cuda", dtype=torch.bfloat16)
            yref = ref.apply(xr)
            del ref
            built = {}
            for cand in ("oracle",) + tuple(p for p in peers if PEERS[0] is None or p in PEERS[0]):
                try:
                    first, nbytes, raw = build_dense(cand, fmt, layer, mode, _clone(tensors))
                    err = rel(first(xr), yref)
                    fns = [first] + [build_dense(cand, fmt, layer, mode, _clone(tensors))[0]
                                     for _ in range(copies_for(nbytes) - 1)]
                    built[cand] = (fns, nbytes, err, raw)
                    print(f"  {name} {mode_name}: {cand} built ({len(fns)} copies, err {err:.1e}) at "
                          f"{time.perf_counter() - BEGAN:.1f} s", flush=True)
                except Exception as exc:  # noqa: BLE001 - a peer that cannot run this layer says why
                    line = f"{name} {mode_name}: {cand} skipped ({type(exc).__name__}: {str(exc)[:160]})"
                    skipped.append(line)
                    print("  " + line, flush=True)
            hbm_bytes = built["oracle"][1] if "oracle" in built else n * k // 2
            for m in ms_list:
                x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
                hbm = hbm_bytes / bw * 1e6
                row = dict(kind="dense", shape=name, mode=mode_name, m=m, hbm_us=hbm, bf16=bf16_t[m], peers={})
                for cand, (fns, nbytes, err, raw) in built.items():
                    if err > WRONG:
                        row["peers"][cand] = {"error": err}
                        continue
                    if cand == "gemlite" and time.perf_counter() - BEGAN > BUDGET[0]:
                        row["peers"][cand] = {"error": f"skipped: past the {BUDGET[0]:.0f} s gemlite budget"}
                        continue
                    try:
                        t = measure_dense([lambda f=f: f(x) for f in fns], m)
                        t.update(err=err, mb=nbytes / 1e6)
                        if m <= 16 and not LEAN[0]:
                            t["launches"], t["kernels"] = launches(lambda: raw(x))
                    except Exception as exc:  # noqa: BLE001
                        t = {"error": f"{type(exc).__name__}: {str(exc)[:120]}"}
                    row["peers"][cand] = t
                if "oracle" in built:
                    _dense_variants(name, m, x, built["oracle"][0], xr, yref, row)
                if fmt == "fp8_channel" and PEERS[0] is not None and "quantizer" in PEERS[0]:
                    row["peers"]["quantizer"] = _quantizer_alone(x)
                if m == 1 and fmt.startswith("fp8") and "oracle" in built and not LEAN[0]:
                    row["peers"]["oracle-gemv"] = _forced_gemv(built["oracle"][0], x)
                rows.append(row)
                _print_row(row)
                if GEMLITE_SAVE and "gemlite" in built:
                    _gemlite()[0].GemLiteLinear.cache_config(GEMLITE_SAVE[0])
            del built, tensors
            torch.cuda.empty_cache()
        del w, bf16
        torch.cuda.empty_cache()


def dense_variant_config(gemm, m: int, act: int, spec: dict) -> dict:
    """A --dense-variants entry's launch config at M: its keys over nothing, over the layer's own choice (BASE) or
    over the shape rules' (RULES: what a device without a tuned entry, its own or a sibling's, runs)."""
    base = gemm.rule_config(m, act) if spec.get("RULES") else gemm.config_for(m, act) if spec.get("BASE") else {}
    return {**base, **{k: v for k, v in spec.items() if k not in ("BASE", "RULES", "ONLY_M")}}


def _dense_variants(name, m, x, applies, xr, yref, row) -> None:
    """--dense-variants: each config of `name` at this M timed on oracle-triton's copies (the GEMM called with
    it directly), in the same row as peer "oracle:LABEL"; err against emulation on the reference rows
    (per-token rows are independent: the first min(M, 16) of them)."""
    for label, spec in DENSE_VARIANTS.get(name, {}).items():
        if spec.get("ONLY_M", m) != m:
            continue
        try:
            t0 = applies[0].__self__
            act = t0.row_act(m)
            cfg = dense_variant_config(t0.gemm, m, act, spec)
            r = min(m, xr.shape[0])
            err = rel(t0.gemm(xr[:r].contiguous(), t0.row_act(r), None, t0.dtype, cfg), yref[:r])
            calls = [lambda t=f.__self__: t.gemm(x, act, None, t.dtype, cfg) for f in applies]
            v = measure_dense(calls, m)
            v.update(err=err, config=cfg)
            row["peers"][f"oracle:{label}"] = v if err <= WRONG else {"error": err}
        except Exception as exc:  # noqa: BLE001 - reported in the row, never fatal
            row["peers"][f"oracle:{label}"] = {"error": f"{type(exc).__name__}: {str(exc)[:120]}"}


JSON_OUT: list = []     # [path, document] when --json is given: rewritten after every row (a timeout keeps them)


def _quantizer_alone(x) -> dict:
    """oracle-triton's per-token activation quantizer alone (launch.quantize_activation_codes, the first of
    the two launches of an FP8 W8A8 per-channel call at 2-32 rows and from 256 rows), its codes and
    scales checked against oracle-torch's (torch ops: an independent implementation); err = the share
    of codes that differ."""
    from oracle_torch import quantize
    from oracle_triton.formats import ACT_TOKEN
    from oracle_triton.launch import device_facts, quantize_activation_codes
    try:
        facts = device_facts(x.device)
        codes, scales = quantize_activation_codes(x, ACT_TOKEN, None, facts)
        q, sa = quantize.fp8_per_token(x)
        err = (codes.view(torch.uint8) != q.view(torch.uint8)).float().mean().item() + \
            (scales.reshape(-1) != sa.reshape(-1).float()).float().mean().item()
        t = measure([lambda: quantize_activation_codes(x, ACT_TOKEN, None, facts)], x.shape[0])
        t.update(err=err)
        return t
    except Exception as exc:  # noqa: BLE001
        return {"error": f"{type(exc).__name__}: {str(exc)[:120]}"}


def _forced_gemv(applies, x) -> dict:
    """oracle-triton's one-row GEMV forced on an FP8 layer the rule sends to the tensor-core tile."""
    from oracle_triton.launch import gemv_config
    try:
        calls = []
        for apply in applies:
            t = apply.__self__
            cfg = gemv_config(t.n, t.k, t.gemm.facts["sms"], t.gemm.layout.elem, t.gemm.layout.group)
            scale = None
            calls.append(lambda t=t, cfg=cfg: t.gemm(x, t.act, scale, t.dtype, config=cfg))
        return measure(calls, 1)
    except Exception as exc:  # noqa: BLE001
        return {"error": f"{type(exc).__name__}: {str(exc)[:120]}"}


def _print_row(row):
    if JSON_OUT:
        with open(JSON_OUT[0], "w") as f:
            json.dump(JSON_OUT[1], f, indent=1)
    b = row["bf16"]
    if b.get("repeats") or b.get("clocks"):
        print(f"    {row['shape']} bf16 repeats (graph us): " + ", ".join(f"{v:.1f}" for v in b.get("repeats", [b["graph"]]))
              + f"; SM MHz/W: {' '.join(b.get('clocks', []))}")
    touch = f" [{row['touch']} experts]" if row.get("touch") else ""
    parts = [f"{row['shape']:11} {row['mode']:17} M={row['m']:<5}{touch} hbm {row['hbm_us']:7.1f} | "
             f"bf16 {b['graph']:7.1f}/{b['eager']:6.1f}"]
    for cand, t in row["peers"].items():
        if "graph" in t:
            parts.append(f"{cand} {t['graph']:7.1f}/{t['eager']:6.1f} h{t['host']:5.1f} x{b['graph'] / t['graph']:4.2f}"
                         + (f" L{t['launches']}" if t.get("launches") is not None else "")
                         + (f" 1st {t['first_call_s']:.2f}s" if "first_call_s" in t else ""))
            if t.get("repeats") or t.get("clocks"):
                print(f"    {row['shape']} {cand} repeats (graph us): "
                      + ", ".join(f"{v:.1f}" for v in t.get("repeats", [t["graph"]]))
                      + f"; SM MHz/W before the warm-up and each timing: {' '.join(t.get('clocks', []))}")
            if t.get("kernels"):
                print(f"    {row['shape']} {cand} kernels (us): {t['kernels']}")
            if cand in ("oracle", VLLM_PEER, VLLM_BF16) and t.get("config"):
                print(f"    {row['shape']} {cand} config: {t['config']}"
                      + (f" ({t['config_source']})" if t.get("config_source") else ""))
        else:
            parts.append(f"{cand} {'WRONG err %.2g' % t['error'] if isinstance(t['error'], float) else t['error']}")
    print(" | ".join(parts), flush=True)
    ours = row["peers"].get("oracle", {})
    for peer in (VLLM_PEER, VLLM_BF16):
        theirs = row["peers"].get(peer, {})
        if "graph" in ours and "graph" in theirs:
            print(f"    {row['shape']} M={row['m']} against vLLM's Triton MoE (graph us): oracle {ours['graph']:.1f}, "
                  f"{peer} {theirs['graph']:.1f}: {theirs['graph'] / ours['graph']:.3f}x (above 1: ours faster); "
                  f"eager {ours['eager']:.1f} / {theirs['eager']:.1f}", flush=True)
    for line in rounds_lines(row):
        print(line, flush=True)


# ---------------------------------------------------------------- MoE
def routing_seed(m, e, topk):
    """The seed of the routings drawn for (M, experts, top_k): every script and run draws the same ones, so
    a figure does not move with the routing (DeepSeek-R1 M=16 measured 1022-1080 us over different draws)."""
    return 1_000_003 * m + 1009 * e + topk


def _routings(m, e, topk, count, device, touch: int | None = None):
    """`count` routings from routing_seed's generator; at M=1 disjoint expert sets (a random permutation
    cut in top_k pieces), else the top_k of a softmax over normal logits per token. touch (M > 1): only
    the draws whose routing touches exactly that many experts are kept (the generator's next draws until
    one does), so a figure can be set beside another benchmark's on as many expert bytes. touch at M=1:
    the disjoint sets come from a permutation of the first `touch` experts only (the same bytes per call,
    on experts that lie together in memory: gpt-oss-120b's 128 experts on 20b's 32, to tell whether where
    the experts lie costs time)."""
    out = []
    gen = torch.Generator().manual_seed(routing_seed(m, e, topk))
    span = touch if m == 1 and touch else e
    perm = torch.randperm(span, generator=gen)
    for j in range(count):
        if m == 1:
            idx = torch.arange(j * topk, (j + 1) * topk) % span
            ids = perm[idx].view(1, topk)
            w = torch.softmax(torch.randn(1, topk, generator=gen), -1)
        else:
            for _ in range(10_000 if touch else 1):
                w, ids = torch.topk(torch.softmax(torch.randn(m, e, generator=gen), -1), topk)
                if touch is None or int(torch.unique(ids).numel()) == touch:
                    break
            else:
                raise ValueError(f"no routing of {m} tokens (top {topk} of {e}) touched exactly {touch} experts "
                                 "in 10000 draws")
        out.append((w.to(device).float(), ids.to(device=device, dtype=torch.int32)))
    return out


def _sorted_routing(ids, ne, topk):
    """(order, token of each sorted pair, expert end offsets): torch._grouped_mm's routing, sorted outside
    the timing."""
    flat = ids.reshape(-1).long()
    order = torch.argsort(flat, stable=True)
    return order, order // topk, torch.cumsum(torch.bincount(flat, minlength=ne), 0).to(torch.int32)


def _calibrated_input_scales(w13, activation: str) -> dict:
    """Static per-tensor NVFP4 input scales as a ModelOpt checkpoint carries them (input_scale = calibration amax /
    (6 x 448), one per tensor; the MoE takes the largest over experts): FC1's from 4096 fresh tokens, FC2's from
    256 of them through every expert's FC1 and activation (BF16 weights). Timed tokens above the calibrated amax
    saturate, as a deployed checkpoint's do."""
    from oracle.tensors import moe_activation_params
    from oracle_emulation.moe_activations import apply_activation

    x = torch.randn(4096, w13.shape[2], device=w13.device, dtype=torch.bfloat16)
    pr = moe_activation_params(activation, {})
    fc2 = max(float(apply_activation((x[:256] @ w13[e].T).float(), activation, pr).abs().max())
              for e in range(w13.shape[0]))
    div = 6.0 * 448.0
    return {"w13_input_scale": (x.abs().max().float() / div).reshape(1),
            "w2_input_scale": torch.tensor([fc2 / div], dtype=torch.float32, device=w13.device)}


def _own_bf16(layer, w13, w2):
    """oracle-triton's fused MoE in its BF16 mode on the baseline's own BF16 experts (no copy), or None."""
    from oracle_triton.moe import TritonMoE

    try:
        bl = layer.model_copy(update={"weight_format": "bf16"})
        t = TritonMoE(bl, Mode(weight="bf16", activation="bf16", name="bf16"), None)
        t.process_weights(w13=w13, w2=w2)
        t.check_inputs = False
        return t
    except Exception as exc:  # noqa: BLE001 - the row says the BF16 mode is missing
        print(f"  oracle-bf16 unavailable: {type(exc).__name__}: {str(exc)[:120]}")
        return None


def emulation_reference(layer, mode, tensors):
    """oracle-emulation's MoE on the checkpoint tensors (each row's reference), or None where it does not fit in
    device memory beside the layer and its BF16 experts."""
    from oracle_emulation.moe import EmulationMoE

    try:
        em = EmulationMoE(layer, mode, None)
        em.process_weights(**tensors)
        return em
    except torch.cuda.OutOfMemoryError:
        torch.cuda.empty_cache()
        return None


def bench_moe(ms_list, bw, rows, skipped):
    from oracle_emulation.moe_activations import apply_activation
    from oracle.tensors import moe_activation_params
    from oracle_triton.moe import TritonMoE

    print("\n== fused MoE: us per call (graph / eager, host = Python time per eager call); the timed calls "
          "cycle through routings until > 256 MB of experts are touched ==")
    for name, (ne, topk, h, i, fmt, mode_name, act, params, activation) in MOE.items():
        if time.perf_counter() > DEADLINE[0]:
            skipped.append(f"{name}: not measured (--budget-s spent)")
            print("  " + skipped[-1], flush=True)
            continue
        layer = MoELayer(name=name, num_experts=ne, top_k=topk, hidden_size=h, intermediate_size=i,
                         weight_format=fmt, activation=activation, group_size=128 if fmt == "int4" else None)
        mode = Mode(weight=fmt, activation=act, name=mode_name, params=params)
        w13 = torch.randn(ne, 2 * i, h, device="cuda", dtype=torch.bfloat16) * 0.05
        w2 = torch.randn(ne, h, i, device="cuda", dtype=torch.bfloat16) * 0.05
        sym = not name.endswith("-zp")
        q13, q2 = _quant(fmt, w13, symmetric=sym), _quant(fmt, w2, symmetric=sym)
        tensors = {f"w13{suffix}": q13.get(f"weight{suffix}") for suffix in ("", "_scale", "_global_scale", "_zero_point")}
        tensors.update({f"w2{suffix}": q2.get(f"weight{suffix}") for suffix in ("", "_scale", "_global_scale", "_zero_point")})
        del q13, q2
        if name.endswith("-static"):        # the checkpoint's static input scales (the reference gets them too)
            tensors.update(_calibrated_input_scales(w13, activation))
        t = TritonMoE(layer, mode, None)
        t.process_weights(**tensors)
        t.check_inputs = False      # the ids come from a router here, as in oracle.hf: no id read-back (a sync)
        vllm = _vllm_peer(t, tensors, topk, skipped) if fmt == "fp8_block" else None
        vllm_bf16 = _vllm_peer(t, {"w13": w13, "w2": w2}, topk, skipped, activation)
        own_bf16 = _own_bf16(layer, w13, w2)
        per_expert = (t.w13.nbytes() + t.w2.nbytes()) / ne
        em = emulation_reference(layer, mode, tensors)
        del tensors
        pr = moe_activation_params(activation, {})
        act_fn = lambda hh: apply_activation(hh, activation, pr)   # noqa: E731
        plan = [(m, touch) for m in MOE_M.get(name, ms_list)
                for touch in (None, *([MOE_TOUCH[name, m]] if (name, m) in MOE_TOUCH else []))]
        for m, touch in plan:
            if time.perf_counter() > DEADLINE[0]:
                skipped.append(f"{name} M={m}: not measured (--budget-s spent)")
                print("  " + skipped[-1], flush=True)
                continue
            x = torch.randn(m, h, device="cuda", dtype=torch.bfloat16)
            touched_one = min(ne, m * topk) * per_expert
            count = max(2, min(ne // topk if m == 1 else 16, ROTATE // max(1, int(touched_one)) + 1))
            routes = _routings(m, ne, topk, count, "cuda", touch)
            touched = sum(int(torch.unique(ids).numel()) for _, ids in routes) / len(routes)
            hbm = touched * per_expert / bw * 1e6
            row = dict(kind="moe", shape=name, mode=mode_name, m=m, hbm_us=hbm, experts_touched=touched,
                       routings=count, routing_seed=routing_seed(m, ne, topk), peers={},
                       **({"touch": touch} if touch else {}))
            # the references (emulation's MoE, the BF16 product) run after the timings, so their fresh
            # temporaries never sit between the settle and a timing (R12: this row 115.7 us with the reference
            # right before it, the sweep 105.1 for the same kernels; bench/moe_gap.py times the steps)
            if MOE_WARM[0] <= 0:                 # the old procedure (see SETTLE_S)
                warm_clocks(SETTLE_S)
            shipped_y, o = _first_then_measure(t, x, routes, m)
            if m == 1 or MOE_LAUNCHES[0]:
                o["launches"], o["kernels"] = launches(lambda: t.forward(x, *routes[0]))
                o["config"] = t.config_for(m, topk)       # which entry or rule served the row (printed)
            row["peers"]["oracle"] = o
            _time_variants(t, name, m, x, routes, shipped_y, row)
            if vllm is not None:
                row["peers"][VLLM_PEER] = _time_vllm(vllm, x, routes, m)
            if vllm_bf16 is not None:
                row["peers"][VLLM_BF16] = _time_vllm(vllm_bf16, x, routes, m)
            if own_bf16 is not None:            # the same fused MoE on the BF16 experts of the baseline below
                try:
                    ob = measure_moe(_calls(own_bf16, x, routes), m)
                    b_ref = _bf16_moe(x, w13, w2, routes[0][0], *_sorted_routing(routes[0][1], ne, topk), act_fn)
                    own_y = own_bf16.apply(x, *routes[0])
                    ob.update(err=rel(own_y, b_ref))
                    if "graph" in row["peers"].get(VLLM_BF16, {}):
                        row["peers"][VLLM_BF16]["err"] = rel(vllm_bf16.apply(x, *routes[0]), b_ref)
                    del b_ref
                    row["peers"][BF16_MODE] = ob
                    _time_variants(own_bf16, name, m, x, routes, own_y, row, MOE_BF16_VARIANTS, BF16_MODE)
                except Exception as exc:  # noqa: BLE001 - reported in the row, never fatal
                    row["peers"][BF16_MODE] = {"error": f"{type(exc).__name__}: {str(exc)[:120]}"}
            try:
                prepared = [(w_, *_sorted_routing(ids, ne, topk)) for w_, ids in routes]
                row["bf16"] = measure_moe([lambda p=p: _bf16_moe(x, w13, w2, p[0], p[1], p[2], p[3], act_fn)
                                       for p in prepared], m)
            except Exception as exc:  # noqa: BLE001 - a torch without _grouped_mm here
                row["bf16"] = {"graph": float("nan"), "eager": float("nan"), "host": float("nan")}
                skipped.append(f"{name} M={m}: BF16 grouped baseline failed ({type(exc).__name__}: {str(exc)[:120]})")
                print("  " + skipped[-1])
            if MOE_ROUNDS[0] > 1:
                _moe_rounds(row, _round_candidates(t, own_bf16, name, row, vllm, vllm_bf16), x, routes, m)
            ref_y = em.apply(x, *routes[0]) if em is not None else None
            o["err"] = rel(t.apply(x, *routes[0]), ref_y) if ref_y is not None else float("nan")
            if "graph" in row["peers"].get(VLLM_PEER, {}):
                row["peers"][VLLM_PEER]["err"] = rel(vllm.apply(x, *routes[0]), ref_y) if ref_y is not None \
                    else float("nan")
            rows.append(row)
            _print_row(row)
        del t, em, w13, w2, own_bf16, vllm, vllm_bf16
        torch.cuda.empty_cache()


def _vllm_peer(t, tensors: dict, topk: int, skipped: list, activation: str = "silu"):
    """vLLM's Triton fused MoE on the row's experts (vllm_moe_peer; no copy): its FP8-block checkpoint tensors, or
    (no w13_scale) its BF16 experts, with oracle-triton's alignment; None where the row's activation is not one
    the peer runs, or (with a skipped line) where vLLM's source is not at hand."""
    import vllm_moe_peer

    if activation not in vllm_moe_peer.ACTIVATIONS:
        return None
    try:
        kernels = vllm_moe_peer.load_kernels(VLLM_SRC[0])
    except vllm_moe_peer.VllmSourceError as exc:
        if not any(line.startswith(VLLM_PEER) for line in skipped):
            skipped.append(f"{VLLM_PEER}: not measured ({exc})")
            print("  " + skipped[-1], flush=True)
        return None
    return vllm_moe_peer.VllmTritonMoE(kernels, tensors["w13"], tensors.get("w13_scale"), tensors["w2"],
                                       tensors.get("w2_scale"), topk, lambda ids, pairs, bm: t._align(ids, pairs, bm),
                                       activation=activation)


def _time_vllm(vllm, x, routes, m) -> dict:
    """The vLLM peer's row entry: measure_moe's figures, its first call's seconds, its launch config and where vLLM
    took it from, its launches (M=1 or --moe-launches); an error is reported in the row, never fatal."""
    try:
        _, v = _first_then_measure(vllm, x, routes, m)
        cfg, source = vllm.config_for(m)
        v.update(config=cfg, config_source=f"{source}; vLLM {vllm.k.VERSION}")
        if m == 1 or MOE_LAUNCHES[0]:
            v["launches"], v["kernels"] = launches(lambda: vllm.apply(x, *routes[0]))
        return v
    except Exception as exc:  # noqa: BLE001 - reported in the row, never fatal
        return {"error": f"{type(exc).__name__}: {str(exc)[:160]}"}


def _time_variants(t, name, m, x, routes, shipped_y, row, variants=None, peer="oracle") -> None:
    """--moe-variants (or --moe-bf16-variants, peer "oracle-bf16"): each config of `name` (at this M) timed as the
    shipped choice is, in the same row (peer "PEER:LABEL", with its first call's seconds and its relative
    difference from the shipped output)."""
    for label, cfg in (MOE_VARIANTS if variants is None else variants).get(name, {}).items():
        if cfg.get("ONLY_M", m) != m:
            continue
        try:
            with variant_held(t, cfg):
                y, v = _first_then_measure(t, x, routes, m)
                v.update(vs_shipped=rel(y, shipped_y), config=t.config, set=cfg.get("SET", {}))
                if MOE_LAUNCHES[0]:
                    v["launches"], v["kernels"] = launches(lambda: t.forward(x, *routes[0]))
            row["peers"][f"{peer}:{label}"] = v
        except Exception as exc:  # noqa: BLE001 - reported in the row, never fatal
            row["peers"][f"{peer}:{label}"] = {"error": f"{type(exc).__name__}: {str(exc)[:120]}"}


def _first_then_measure(mt, x, routes, m) -> tuple[torch.Tensor, dict]:
    """A MoE candidate's first call on the row's first routing (a copy of its output, and its seconds as
    "first_call_s": more than a few hundredths means a compile), then measure_moe's figures over the routings."""
    first = time.perf_counter()
    y = mt.apply(x, *routes[0])
    torch.cuda.synchronize()
    first = time.perf_counter() - first
    y = y.clone()                           # before the timed calls, which may reuse the output's buffer
    v = measure_moe(_calls(mt, x, routes), m)
    v["first_call_s"] = first
    return y, v


def _calls(t, x, routes) -> list:
    """A MoE candidate's timed calls: one per routing, each call the next (the first pass and the rounds alike)."""
    return [lambda r=r: t.apply(x, *r) for r in routes]


@contextlib.contextmanager
def variant_held(t, cfg: dict | None) -> Iterator[None]:
    """A --moe-variants entry held on `t` while it runs: its launch config (t.config, less ONLY_M and SET; an entry
    of those two keys only keeps the shipped choice) and its SET module switches, both put back after (t.config =
    None: the shipped choice) whatever happens inside; cfg None: the shipped choice, nothing touched."""
    if cfg is None:
        yield
        return
    t.config = {k: v for k, v in cfg.items() if k not in ("ONLY_M", "SET")} or None
    try:
        with module_switches(cfg.get("SET", {})):
            yield
    finally:
        t.config = None


def _round_candidates(t, own_bf16, name, row, vllm=None, vllm_bf16=None) -> dict:
    """--moe-rounds: {peer: (fused MoE, variant config or None)} of the row's first pass that timed: "oracle", each
    "oracle:LABEL" of --moe-variants, vLLM's Triton MoEs (FP8, BF16), and the BF16 mode last (the rounds' ratio
    baseline; absent if it failed)."""
    ok = lambda peer: "graph" in row["peers"].get(peer, {})      # noqa: E731
    cands = {"oracle": (t, None)}
    cands.update({f"oracle:{label}": (t, cfg) for label, cfg in MOE_VARIANTS.get(name, {}).items()
                  if ok(f"oracle:{label}")})
    if vllm is not None and ok(VLLM_PEER):
        cands[VLLM_PEER] = (vllm, None)
    if vllm_bf16 is not None and ok(VLLM_BF16):
        cands[VLLM_BF16] = (vllm_bf16, None)
    if own_bf16 is not None and ok(BF16_MODE):
        cands[BF16_MODE] = (own_bf16, None)
    return cands


def _moe_rounds(row, cands: dict, x, routes, m) -> None:
    """MOE_ROUNDS[0] interleaved rounds of the candidates (interleaved_rounds): each timed once per round with
    measure() after its own calls for --moe-warm-s, under its variant's config and switches. Per candidate
    peers[name]["rounds"] (graph us per round) or "rounds_error"; row["rounds"]: the order and the ratios."""
    def time_one(peer: str) -> float:
        mt, cfg = cands[peer]
        with variant_held(mt, cfg):
            calls = _calls(mt, x, routes)
            if MOE_WARM[0] > 0:
                warm_calls(calls, MOE_WARM[0])
            return measure(calls, m)["graph"]

    res = interleaved_rounds(list(cands), time_one, MOE_ROUNDS[0])
    for peer, times in res.pop("times").items():
        row["peers"][peer]["rounds"] = times
    for peer, why in res.pop("errors").items():
        row["peers"][peer]["rounds_error"] = why
    row["rounds"] = res


@contextlib.contextmanager
def module_switches(values: dict):
    """A variant's SET: each "package.module.NAME" patched to its value while the variant is timed (graphs are
    captured inside, so they hold the switched launches), the old values put back after; a name the module lacks
    is refused (mock.patch without create)."""
    with contextlib.ExitStack() as stack:
        for path, value in values.items():
            try:
                stack.enter_context(mock.patch(path, value))
            except AttributeError:
                raise AttributeError(f"SET {path}: no such module switch") from None
        yield


def _compile_moe_jobs(jobs: list) -> str:
    """A worker: for each (model, M, bf16) build the model's fused MoE on 16 experts (or its BF16 mode), give it
    the launch parameters the full model picks at that M, and run one call: Triton compiles into its on-disk
    cache, which the timing process then reads (only the alignment launch, specialized on the expert count,
    is left to it)."""
    from oracle_triton.moe import TritonMoE, moe_config

    done = 0
    for name, m, bf16 in jobs:
        ne, topk, h, i, fmt, mode_name, act, params, activation = MOE[name]
        small = min(16, ne)
        try:
            layer = MoELayer(name=name, num_experts=small, top_k=min(topk, small), hidden_size=h,
                             intermediate_size=i, weight_format="bf16" if bf16 else fmt, activation=activation,
                             group_size=128 if fmt == "int4" and not bf16 else None)
            w13 = torch.randn(small, 2 * i, h, device="cuda", dtype=torch.bfloat16) * 0.05
            w2 = torch.randn(small, h, i, device="cuda", dtype=torch.bfloat16) * 0.05
            if bf16:
                t = TritonMoE(layer, Mode(weight="bf16", activation="bf16", name="bf16"), None)
                t.process_weights(w13=w13, w2=w2)
                cfg = moe_config(m, topk, ne, 1, wide=True)
            else:
                sym = not name.endswith("-zp")
                q13, q2 = _quant(fmt, w13, symmetric=sym), _quant(fmt, w2, symmetric=sym)
                t = TritonMoE(layer, Mode(weight=fmt, activation=act, name=mode_name, params=params), None)
                t.process_weights(**{f"{key}{suffix}": q.get(f"weight{suffix}") for key, q in (("w13", q13), ("w2", q2))
                                     for suffix in ("", "_scale", "_global_scale", "_zero_point")})
                t.experts = ne                       # the full model's choice (tuned entry or rule) at this M
                cfg = t.config_for(m, topk)
                t.experts = small
            t.check_inputs = False
            t.config = cfg
            x = torch.randn(m, h, device="cuda", dtype=torch.bfloat16)
            ids = (torch.arange(m * topk, device="cuda") % small).view(m, topk).to(torch.int32)
            t.forward(x, torch.full((m, topk), 1.0 / topk, device="cuda"), ids)
            torch.cuda.synchronize()
            done += 1
        except Exception as exc:  # noqa: BLE001 - the timing process compiles what failed here
            print(f"  precompile {name} M={m} {'bf16' if bf16 else 'oracle'}: {type(exc).__name__}: {str(exc)[:120]}",
                  flush=True)
    return f"{done}/{len(jobs)}"


def _compile_dense_jobs(job: tuple) -> str:
    """Worker `index` of `workers`: for each (shape, mode, M) of `pairs` build gemlite's layer (where the
    mode lists it) on the real shape and call it once with its autotuning cut to this worker's share
    of the configurations it would try (every workers-th), and oracle-triton's layer for every
    workers-th pair: Triton compiles them into its on-disk cache, so the timing process's own
    autotuning (all configurations, a quiet GPU) only times them."""
    index, workers, pairs, tune_ms, pins, peers = job
    GEMLITE_PINS[:] = pins          # (a spawned process: the parent's --gemlite-load-config and --peers)
    if tune_ms:
        _tune_time(tune_ms)
    from triton.runtime import autotuner

    prune = autotuner.Autotuner.prune_configs

    def share(self, kwargs):
        configs = prune(self, kwargs)
        return configs[index % max(1, len(configs))::workers] or configs[:1]
    autotuner.Autotuner.prune_configs = share
    done = 0
    modes = {d[1]: d for d in DENSE_MODES}
    quantized: dict = {}
    for j, (name, mode_name, m) in enumerate(pairs):
        fmt, _, act, params, mode_peers = modes[mode_name]
        n, k = DENSE[name]
        cands = (("oracle",) if j % workers == index else ()) + \
            tuple(p for p in mode_peers if p == "gemlite" and (peers is None or p in peers))
        if not cands:
            continue
        try:
            if (name, fmt) not in quantized:
                quantized.clear()
                w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.05
                quantized[(name, fmt)] = _quant(fmt, w)
                del w
            layer = LinearLayer(name=name, in_features=k, out_features=n, weight_format=fmt,
                                group_size=128 if fmt == "int4" else None)
            mode = Mode(weight=fmt, activation=act, name=mode_name, params=params)
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            for cand in cands:
                build_dense(cand, fmt, layer, mode, _clone(quantized[(name, fmt)]))[0](x)
            torch.cuda.synchronize()
            done += 1
        except Exception as exc:  # noqa: BLE001 - the timing process compiles what failed here
            print(f"  precompile {name} {mode_name} M={m}: {type(exc).__name__}: {str(exc)[:120]}", flush=True)
    return f"{done}"


def precompile_dense(ms: list[int], workers: int, timeout_s: float, tune_ms: float | None) -> None:
    """Compile the dense table's Triton kernels (ours and gemlite's, per shape, mode and M) in
    `workers` processes at once; best effort, as precompile_moe."""
    pairs = [(name, d[1], m) for name in DENSE for d in DENSE_MODES for m in ms]
    _pool_run(_compile_dense_jobs, [(i, workers, pairs, tune_ms, list(GEMLITE_PINS), PEERS[0]) for i in range(workers)],
              workers, timeout_s, "dense")


def _pool_run(fn, jobs: list, workers: int, timeout_s: float, what: str) -> None:
    import multiprocessing

    chunks = [jobs[i::workers] for i in range(min(workers, len(jobs)))]
    if what == "dense":          # one job per worker, not a list of them
        chunks = [c[0] for c in chunks]
    t0 = time.perf_counter()
    try:
        with multiprocessing.get_context("spawn").Pool(len(chunks)) as pool:
            res = pool.map_async(fn, chunks).get(timeout=timeout_s)
        print(f"precompiled the {what} kernels: {res} in {time.perf_counter() - t0:.1f} s", flush=True)
    except Exception as exc:  # noqa: BLE001 - best effort
        print(f"precompile {what}: {type(exc).__name__}: {str(exc)[:200]} after {time.perf_counter() - t0:.1f} s",
              flush=True)


def precompile_moe(ms: list[int], workers: int, timeout_s: float) -> None:
    """Compile the MoE table's kernels (the oracle's and its BF16 mode's, per model and M) in `workers`
    processes at once: Triton's compiler is single-threaded per process, and a device run's seconds
    should go to timing. Best effort: a failure or the timeout leaves the compiling to the timing run."""
    jobs = [(name, m, bf16) for name in MOE for m in ms for bf16 in (False, True)]
    _pool_run(_compile_moe_jobs, jobs, workers, timeout_s, "MoE")


def _tune_time(ms: float) -> None:
    """Triton's autotuner (gemlite's) times each configuration with triton.testing.do_bench's default
    warm-up and repetition times: set them to ms / 4 and ms."""
    import triton.testing

    d = triton.testing.do_bench
    names = d.__code__.co_varnames[:d.__code__.co_argcount]
    defaults = list(d.__defaults__)
    first = len(names) - len(defaults)
    defaults[names.index("warmup") - first] = ms / 4
    defaults[names.index("rep") - first] = ms
    d.__defaults__ = tuple(defaults)
    print(f"gemlite autotuning: do_bench warm-up {ms / 4:.0f} ms, repetitions {ms:.0f} ms per configuration")


def main(argv: list[str] | None = None) -> int:
    ap = table_args(__doc__.splitlines()[0], DENSE, MOE)
    ap.add_argument("--modes", nargs="+", help="only these dense modes (e.g. w4a16_int4)")
    ap.add_argument("--gemlite-budget-s", type=float, default=BUDGET[0],
                    help="skip gemlite (said so per row) after this many seconds of the run: it autotunes each "
                         "new shape and M")
    ap.add_argument("--budget-s", type=float, help="MoE: start no new model or M after this many seconds")
    ap.add_argument("--moe-m", nargs="+", default=[], metavar="MODEL=M,M",
                    help="MoE: these token counts for that model instead of --m (e.g. deepseek-r1=1,16: one run "
                         "that fits a device round)")
    ap.add_argument("--moe-variants", metavar="JSON",
                    help="MoE: a file {model: {label: config}}: those configs of the oracle's fused MoE timed in each "
                         "row beside the shipped choice (peers oracle:LABEL)")
    ap.add_argument("--moe-bf16-variants", metavar="JSON",
                    help="MoE: a file {model: {label: config}}: those configs of this MoE's BF16 mode (the baseline "
                         "oracle-bf16) timed in each row beside its own choice (peers oracle-bf16:LABEL)")
    ap.add_argument("--moe-experts", nargs="+", default=[], metavar="MODEL=M:E",
                    help="MoE: after that model's row at M, one more on routings that touch exactly E experts "
                         "(M > 1: the same seeded generator's draws), e.g. deepseek-r1=16:97 beside a figure measured "
                         "on such a routing; M=1: the disjoint expert sets drawn from the first E experts only, e.g. "
                         "gpt-oss-120b=1:32 (as many experts as gpt-oss-20b has, lying together in memory)")
    ap.add_argument("--moe-repeat", type=int, default=MOE_REPEAT[0], metavar="N",
                    help="MoE: time each candidate of an M=1 row N times in the process (the figure: the median; all "
                         "N printed)")
    ap.add_argument("--moe-rounds", type=int, default=MOE_ROUNDS[0], metavar="N",
                    help="MoE: N > 1: after each row's figures, time oracle, its --moe-variants and oracle-bf16 "
                         "once each in N interleaved rounds (order flipped every round) and print each round's ratio "
                         "to the BF16 mode, the median and the worst: the BF16 mode and the shipped entry at 4096 "
                         "tokens drift differently between processes (Qwen3-235B's BF16 mode 3103.6 vs 3566.0 us on "
                         "the same H200, R108a / R108c), so a cell within noise is settled in one process; "
                         "1 (default): no rounds")
    ap.add_argument("--moe-launches", action="store_true",
                    help="MoE: every oracle candidate's launches and their device times (torch.profiler, one eager "
                         "call), at every M (without it: the shipped choice's at M=1)")
    ap.add_argument("--moe-repeat-upto", type=int, default=MOE_REPEAT_UPTO[0], metavar="M",
                    help="MoE: --moe-repeat for every row up to this M too (default 1: M=1 rows only)")
    ap.add_argument("--moe-warm-s", type=float, default=MOE_WARM[0], metavar="S",
                    help="MoE: run each candidate's own calls for S seconds before its timings instead of the BF16 "
                         "settle before each row (R21: that settle left the GPU power-capped at 1485 MHz for the first "
                         "timing); 0: the settle, as before the eighth pass")
    ap.add_argument("--dense-variants", metavar="JSON",
                    help="dense: a file {shape: {label: config}}: those configs of oracle-triton's GEMM timed in each "
                         "row beside the shipped choice (peers oracle:LABEL; \"BASE\": 1 lays the config over the "
                         "shipped one at that M, \"ONLY_M\": that M only)")
    ap.add_argument("--dense-repeat", type=int, default=DENSE_REPEAT[0], metavar="N",
                    help="dense: time each candidate N times in the process (the figure: the median; all printed)")
    ap.add_argument("--dense-warm-s", type=float, default=DENSE_WARM[0], metavar="S",
                    help="dense: run each candidate's own calls for S seconds before its timings")
    ap.add_argument("--precompile", type=int, default=0, metavar="N",
                    help="compile the table's Triton kernels (ours, gemlite's) in N processes first")
    ap.add_argument("--gemlite-tune-ms", type=float, metavar="MS",
                    help="gemlite's autotuning times each candidate configuration for MS ms (Triton's do_bench "
                         "rep; its default is 100) after a warm-up of MS/4 ms: the tuning runs in the timing "
                         "process, whose device seconds are few")
    ap.add_argument("--precompile-timeout-s", type=float, default=40.0)
    ap.add_argument("--precompile-only", action="store_true",
                    help="compile (--precompile N) the tables --only names, time nothing (a separate process: a "
                         "device round can compile one table while another script compiles its own)")
    ap.add_argument("--gemlite-save-config", metavar="PATH",
                    help="after the dense table, write gemlite's autotuned choices there (GemLiteLinear.cache_config)")
    ap.add_argument("--gemlite-load-config", metavar="PATH", nargs="+", default=[],
                    help="gemlite configurations (GemLiteLinear.cache_config's format) loaded after its H100 file: "
                         "the shapes and row buckets they name are not autotuned")
    ap.add_argument("--gemlite-autotune", choices=["default", "fast", "max"],
                    help="gemlite.set_autotune(MODE): its configuration lists (\"default\": two per kernel, no "
                         "search worth the name; its own default is \"fast\")")
    ap.add_argument("--gemlite-quantizer-rows", type=int, choices=[1, 2, 4],
                    help="gemlite's per-token activation quantizer autotunes over 1, 2 and 4 rows per program, each "
                         "over a whole row (K padded to a power of two): keep only this one (4 rows of K = 18432 take "
                         "~28 s to compile for sm_90)")
    ap.add_argument("--peers", nargs="+", help="dense: only these peers beside ours and BF16 (e.g. gemlite scaled_mm)")
    ap.add_argument("--vllm-src", metavar="DIR",
                    help="vLLM's source tree for the vllm-triton MoE peer (FP8 block rows; bench/vllm_moe_peer.py); "
                         "default $ORACLE_VLLM_SRC or an installed vllm, else the peer is skipped with a line")
    ap.add_argument("--lean", action="store_true",
                    help="dense: no launch counts (torch.profiler) and no forced one-row GEMV row: fewer seconds")
    args = ap.parse_args(argv)
    BUDGET[0] = args.gemlite_budget_s
    LEAN[0] = args.lean
    VLLM_SRC[0] = args.vllm_src
    GEMLITE_PINS[:] = args.gemlite_load_config
    PEERS[0] = args.peers
    GEMLITE_SAVE[:] = [args.gemlite_save_config] if args.gemlite_save_config else []
    import os
    if args.gemlite_autotune:
        os.environ["BENCH_GEMLITE_AUTOTUNE"] = args.gemlite_autotune
    if args.gemlite_quantizer_rows:
        os.environ["BENCH_GEMLITE_QUANT_ROWS"] = str(args.gemlite_quantizer_rows)
    if args.budget_s is not None:
        DEADLINE[0] = time.perf_counter() + args.budget_s
    if args.dense_variants:
        with open(args.dense_variants) as f:
            DENSE_VARIANTS.update(json.load(f))
    DENSE_REPEAT[0] = max(1, args.dense_repeat)
    DENSE_WARM[0] = max(0.0, args.dense_warm_s)
    if args.moe_variants:
        with open(args.moe_variants) as f:
            MOE_VARIANTS.update(json.load(f))
    if args.moe_bf16_variants:
        with open(args.moe_bf16_variants) as f:
            MOE_BF16_VARIANTS.update(json.load(f))
    for spec in args.moe_m:
        name, _, ms = spec.partition("=")
        if name not in MOE or not ms or not all(v.isdigit() for v in ms.split(",")):
            ap.error(f"--moe-m {spec!r}: expected MODEL=M[,M...] with MODEL one of {sorted(MOE)}")
        MOE_M[name] = [int(v) for v in ms.split(",")]
    for spec in args.moe_experts:
        name, _, rest = spec.partition("=")
        m, _, n = rest.partition(":")
        if name not in MOE or not (m.isdigit() and n.isdigit()) or int(m) < 1 or \
                not (MOE[name][1] <= int(n) <= MOE[name][0] if int(m) == 1
                     else 1 <= int(n) <= min(MOE[name][0], int(m) * MOE[name][1])):
            ap.error(f"--moe-experts {spec!r}: expected MODEL=M:E with MODEL one of {sorted(MOE)} and E an expert "
                     "count that M tokens can touch (M=1: from top_k to the model's experts)")
        MOE_TOUCH[name, int(m)] = int(n)
    MOE_REPEAT[0] = max(1, args.moe_repeat)
    MOE_REPEAT_UPTO[0] = max(1, args.moe_repeat_upto)
    MOE_WARM[0] = max(0.0, args.moe_warm_s)
    MOE_LAUNCHES[0] = args.moe_launches
    MOE_ROUNDS[0] = max(1, args.moe_rounds)
    keep_shapes(args.shapes, DENSE, MOE)
    if args.modes:
        DENSE_MODES[:] = [d for d in DENSE_MODES if d[1] in args.modes]
    if args.precompile_only:      # (a separate process: the timing run then finds the kernels compiled)
        if not torch.cuda.is_available():
            print("bench_peers: needs a CUDA device", file=sys.stderr)
            return 2
        if args.only != "moe":
            precompile_dense(args.m, args.precompile, args.precompile_timeout_s, args.gemlite_tune_ms)
        if args.only != "dense":
            precompile_moe(args.m, args.precompile, args.precompile_timeout_s)
        return 0
    if not start("bench_peers"):
        return 2
    bw = copy_bandwidth()
    print(f"measured copy bandwidth: {bw / 1e12:.2f} TB/s (HBM limit = bytes read per call / this)")
    rows: list[dict] = []
    skipped: list[str] = []
    if args.json:
        JSON_OUT[:] = [args.json, {"copy_bandwidth": bw, "device": torch.cuda.get_device_name(), "rows": rows,
                                   "skipped": skipped}]
    if args.gemlite_tune_ms:
        _tune_time(args.gemlite_tune_ms)
    if args.only != "moe":
        if args.precompile:
            precompile_dense(args.m, args.precompile, args.precompile_timeout_s, args.gemlite_tune_ms)
        try:
            bench_dense(args.m, bw, rows, skipped)
        finally:
            if args.gemlite_save_config and _gemlite()[0] is not None:
                _gemlite()[0].GemLiteLinear.cache_config(args.gemlite_save_config)
    if args.only != "dense":
        if args.precompile:
            precompile_moe(args.m, args.precompile, args.precompile_timeout_s)
        bench_moe(args.m, bw, rows, skipped)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(JSON_OUT[1], f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
