"""The register-A few-row 4-bit kernel (oracle_triton.w4_rega, Gluon) beside the shipped swap kernel and BF16
at M = 16 (issue 26; H200, graph replay, weights rotated through > 256 MB of copies, one process, every
variant checked against oracle-emulation: relative Frobenius error, > 1e-2 flagged DISAGREES).

The shipped M = 16 path (gemm.w4_swap_kernel through tl.dot) round-trips each decoded K tile through shared
memory and waits for each of its eight MMAs; w4_rega loads each thread's packed words where its wgmma A
fragment needs them, decodes in registers and issues the eight MMAs back to back (its docstring). A
variant is (warps, split-K, XT activation tiles per shared-memory chunk, PF: words loaded PF tiles ahead).

    python bench/rega_probe.py [--fmts mxfp4 nvfp4 int4] [--shapes 8192x8192 ...] [--budget-s 40] [--pf0]
    python bench/rega_probe.py --compile-only I --workers W   # compile every W-th kernel from I (no timing)
    python bench/rega_probe.py --public [--shapes ...]        # the public layer call (what config_for picks)
    python bench/rega_probe.py --cfgs bench/configs/dense12a_r32.json --shapes 2048x4096 --repeat 3
    python bench/rega_probe.py --m 256 --cfgs bench/configs/rega_wide_r51.json   # R51 (rega_wide.patch applied)
    python bench/rega_probe.py --m 256 --cfgs bench/configs/ws_r52.json          # w4_ws at many rows

--pf0 times, instead of the PF 1 / 64-row variants, the shipped PF 2 variant beside PF 0 (every K tile of a
program loaded up front: 8 or 4 warps, 4 or 2 tiles per program, the split that gives each program exactly
that many). --public times TritonLinear.apply (the engine's whole call: the tuned lookup in config_for, the
launch plan when eager) at M = 16, graph replay and eager, and prints the config and the kernel that served it.
--cfgs FILE times, instead, the REGA configs the file lists per format ({"nvfp4": [{"num_warps": 8, "SPLIT_K": 8,
"XT": 4, "PF": 0, "TABLE": 1}, ...]}: any w4_rega keys, e.g. NVFP4's TABLE, PF 0's EARLY / WAIT; or WS configs, the
warp-specialized many-row kernel w4_ws, {"WS": 1, "BM": 128, ...}) beside the shipped
entry, or per format and shape ("nvfp4@8192x8192": [{"base": "shipped", "TABLE": 1}]: the shipped entry's keys
with TABLE set);
--repeat R times the shipped entry and every variant R times, interleaved (one graph replay each), and prints
each variant's figures, their median and its ratio to the shipped entry's median.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch

from gpu_timing import rel, start
from sweep_dense import SHAPES, build, copies, gtime
from sweep_fp4_words import MODES

M = 16              # --m
BF16: list = [None]     # the BF16 copies, kept for --repeat


def rega(g, x: torch.Tensor, v: dict) -> torch.Tensor:
    """The engine's REGA path (launch.DenseGemm.rega: w4_rega.w4_rega_kernel on g's packed word layout) with the
    variant's keys (num_warps, SPLIT_K, XT, PF, and any other w4_rega key); a variant with WS 1 takes the
    warp-specialized many-row kernel instead (DenseGemm.ws: w4_ws.w4_ws_kernel)."""
    cfg = dict(v) if v.get("WS") else {"REGA": 1, **v}
    if g.layout.elem != 3:
        cfg["KN"] = 1
    return g(x, 0, None, torch.bfloat16, cfg)


PF0 = [False]       # --pf0
PUBLIC = [False]    # --public
CFGS: dict[str, list[dict]] = {}    # --cfgs
REPEAT = [1]        # --repeat


def _v(warps: int, split: int, xt: int, pf: int) -> dict:
    return {"num_warps": warps, "SPLIT_K": split, "XT": xt, "PF": pf}


def label(v: dict) -> str:
    if v.get("WS"):
        return "ws " + " ".join(f"{k} {val}" for k, val in v.items() if k != "WS")
    extra = " ".join(f"{k} {val}" for k, val in v.items() if k not in ("num_warps", "SPLIT_K", "XT", "PF"))
    return f"rega w{v['num_warps']} split {v['SPLIT_K']} xt {v['XT']} pf {v['PF']}{' ' + extra if extra else ''}"


#: w4_rega_kernel's launch keys (what a variant built on the shipped entry keeps of it)
REGA_KEYS = ("num_warps", "SPLIT_K", "XT", "PF", "EARLY", "TABLE", "WAIT")


def variants(shape: str, shipped_cfg: dict, fmt: str = "") -> list[dict]:
    """The REGA configs tried on a shape whose shipped M=16 entry is shipped_cfg (--cfgs: the file's for
    "fmt@shape" if it lists that, else for the format; a variant {"base": "shipped", KEY: value, ...} is the
    shipped REGA entry's launch keys, or a WS entry's keys, with those set)."""
    if CFGS:
        out = []
        for v in CFGS.get(f"{fmt}@{shape}", CFGS.get(fmt, [])):
            v = dict(v)
            if v.pop("base", None) == "shipped":      # a WS entry's keys are all launch keys
                keep = shipped_cfg if shipped_cfg.get("WS") else \
                    {key: shipped_cfg[key] for key in REGA_KEYS if key in shipped_cfg}
                v = {**keep, **v}
            out.append(v)
        return out
    split = shipped_cfg["SPLIT_K"]
    n, k = SHAPES[shape]
    per = -(-(k // 128) // split)
    xt = min(4, per)
    if PF0[0]:
        return [_v(8, split, xt, 2)] + [_v(w, k // 128 // t, t, 0) for w in (8, 4) for t in (4, 2)
                                        if (k // 128) % t == 0]
    out = [_v(8, split, xt, 2), _v(8, split, xt, 1)]
    per4 = -(-(k // 128) // max(1, split // 2))
    out.append(_v(4, max(1, split // 2), min(4, per4), 2))     # 64-row tiles: twice the n tiles, half the split
    return out


def shipped(fmt: str, shape: str) -> dict:
    """The M=16 config the engine picks for this layer (rules + the shipped table), without a GPU layer."""
    from oracle_triton.formats import layout_for, words_layout
    from oracle_triton.launch import DenseGemm, device_facts

    n, k = SHAPES[shape]
    lay = layout_for(fmt, n, k, 128) if fmt == "int4" else words_layout(fmt, n, k)
    one = torch.ones(1, device="cuda" if torch.cuda.is_available() else "cpu")    # rega_ok: a CUDA weight
    fake = DenseGemm(lay, n, k, one, one, None, None, None, mode=MODES[fmt], weight_format=fmt)
    fake.facts = device_facts(torch.device("cuda")) if torch.cuda.is_available() else H200
    return fake.config_for(M, 0)


#: device_facts of the H200 (for --list on a machine without it)
H200 = {"hw_fp8": True, "fp8_dot": True, "dot_f32": False, "sms": 132, "name": "NVIDIA H200", "pdl": True}


def jobs(fmts, shapes) -> list[tuple]:
    """Every kernel the timing needs compiled: ("swap", fmt, cfg) and ("rega", fmt, variant)."""
    out, seen = [], set()
    for shape in shapes:
        for fmt in fmts:
            cfg = shipped(fmt, shape)
            tried = [] if PUBLIC[0] else [("rega", fmt, tuple(sorted(v.items())))
                                          for v in variants(shape, cfg, fmt)]
            for job in [("swap", fmt, tuple(sorted(cfg.items())))] + tried:
                if job not in seen:
                    seen.add(job)
                    out.append(job)
    return out


def compile_job(job: tuple) -> None:
    """One launch of the job's kernel on a small layer of the format (N, K are runtime values)."""
    kind, fmt, spec = job
    w = torch.randn(256, 4096, device="cuda", dtype=torch.bfloat16) * 0.05
    g = build(fmt, 256, 4096, w, MODES[fmt], "bf16", {})[2][0]
    x = torch.randn(M, 4096, device="cuda", dtype=torch.bfloat16)
    if kind == "swap":
        g(x, 0, None, torch.bfloat16, dict(spec))
    else:
        rega(g, x, dict(spec))
    torch.cuda.synchronize()


def diagnose(g, em, v) -> None:
    """Where a disagreeing variant goes wrong: the first K tile's 128 unit rows through it and through the
    reference; for each k the reference column its output matches best (cosine), and how well."""
    k0 = torch.eye(128, g.k, device="cuda", dtype=torch.bfloat16)
    got, ref = rega(g, k0, v).float(), em.apply(k0).float()
    got_n = got / got.norm(dim=1, keepdim=True).clamp_min(1e-30)
    ref_n = ref / ref.norm(dim=1, keepdim=True).clamp_min(1e-30)
    cos = got_n @ ref_n.t()                                  # [k in, k ref]
    best, idx = cos.max(dim=1)
    print(f"    diagnose: k -> best reference k (cos): {[(i, int(idx[i]), round(float(best[i]), 3)) for i in range(0, 128, 5)]}",
          flush=True)
    nerr = ((got - ref).norm(dim=0) / ref.norm(dim=0).clamp_min(1e-30))[:128]
    print(f"    diagnose: per-n error, n = 0..127: {[round(float(e), 2) for e in nerr[::4]]}", flush=True)


def layer_and_bf16(fmt: str, shape: str) -> tuple:
    """The shape's random weights built in `fmt` (sweep_dense.build: the layer, its emulation and rotated
    copies), an M-row input, and BF16 cuBLAS's graph time on BF16 copies rotated out of L2."""
    n, k = SHAPES[shape]
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.05
    x = torch.randn(M, k, device="cuda", dtype=torch.bfloat16)
    bf16 = [w] + [w.clone() for _ in range(copies(n * k * 2) - 1)]
    bf = gtime([lambda ww=ww: x @ ww.t() for ww in bf16], 20)
    BF16[0] = bf16 if REPEAT[0] > 1 and not PUBLIC[0] else None    # --repeat: BF16 timed again beside the repeats
    del bf16
    t, em, gs, _, _, _ = build(fmt, n, k, w, MODES[fmt], "bf16", {})
    return n, k, x, bf, t, em, gs


def run(fmt: str, shape: str, deadline: float) -> None:
    _, _, x, bf, _, em, gs = layer_and_bf16(fmt, shape)
    ref = em.apply(x)
    cfg = gs[0].config_for(M, 0)
    err = rel(gs[0](x, 0, None, torch.bfloat16, cfg), ref)
    calls = [lambda g=g: g(x, 0, None, torch.bfloat16, cfg) for g in gs]
    us = gtime(calls, 20)
    print(f"{shape} {fmt} M={M}: BF16 {bf:.1f} us (1.3x: {bf / 1.3:.1f}); shipped {cfg}: {us:.1f} us xBF16 "
          f"{bf / us:.2f} err {err:.1e}", flush=True)
    timed = [("shipped", calls, [us])]
    if BF16[0]:
        timed.append(("BF16", [lambda ww=ww: x @ ww.t() for ww in BF16[0]], [bf]))
    for v in variants(shape, cfg, fmt):
        if time.perf_counter() > deadline:
            print("  (budget spent)", flush=True)
            break
        try:
            err = rel(rega(gs[0], x, v), ref)
            calls = [lambda g=g, v=v: rega(g, x, v) for g in gs]
            t = gtime(calls, 20)
        except Exception as exc:  # noqa: BLE001 - reported, the next variant runs
            print(f"  {label(v)}: FAILED {type(exc).__name__}: {str(exc)[:300]}", flush=True)
            continue
        print(f"  {label(v)}: {t:.1f} us xBF16 {bf / t:.2f} vs shipped {us / t:.2f}x err {err:.1e}"
              f"{'' if err < 1e-2 else '  DISAGREES'}", flush=True)
        timed.append((label(v), calls, [t]))
        if err >= 1e-2 and not DIAGNOSED.get(fmt):
            DIAGNOSED[fmt] = True
            try:
                diagnose(gs[0], em, v)
            except Exception as exc:  # noqa: BLE001 - reported
                print(f"    diagnose failed: {type(exc).__name__}: {str(exc)[:200]}", flush=True)
    for _ in range(REPEAT[0] - 1):                 # interleaved repeats: the clock and HBM state shared
        if time.perf_counter() > deadline:
            print("  (budget spent before the repeats ended)", flush=True)
            break
        for _, calls, figs in timed:
            figs.append(gtime(calls, 20))
    if REPEAT[0] > 1:
        base = statistics.median(timed[0][2])
        bfm = statistics.median(timed[1][2]) if BF16[0] else bf
        print(f"  {shape} {fmt}: medians of {len(timed[0][2])} interleaved graph replays", flush=True)
        for name, _, figs in timed:
            med = statistics.median(figs)
            print(f"    {name}: {med:.2f} us {[round(f, 2) for f in figs]} xBF16 {bfm / med:.2f} vs shipped "
                  f"{base / med:.3f}x", flush=True)
    BF16[0] = None


DIAGNOSED: dict[str, bool] = {}


def served_by(t, x: torch.Tensor) -> str:
    """Which DenseGemm path one eager t.apply(x) ran (the launch-plan recording call: rega, swap, ...)."""
    from oracle_triton.launch import DenseGemm

    seen: list[str] = []
    saved = {name: getattr(DenseGemm, name) for name in ("rega", "ws", "swap", "gemv", "wgmma", "dequant_mm")}

    def spy(name):
        def call(self, *a, **kw):
            seen.append(name)
            return saved[name](self, *a, **kw)
        return call
    try:
        for name in saved:
            setattr(DenseGemm, name, spy(name))
        t.apply(x)
        torch.cuda.synchronize()
    finally:
        for name, fn in saved.items():
            setattr(DenseGemm, name, fn)
    return "+".join(seen) or "the tiled GEMM"


def public(fmt: str, shape: str) -> None:
    """TritonLinear.apply at M = 16 (graph replay over rotated layer copies, and eager) beside BF16, its
    error against oracle-emulation, and the config / kernel that served it."""
    import copy

    from gpu_timing import time_cuda_ms
    from oracle.integration.eager_graphs import EagerGraphs
    from oracle_triton.launch import DenseGemm

    n, k, x, bf, t, em, gs = layer_and_bf16(fmt, shape)
    layers = [t]
    for g in gs[1:]:
        c = copy.copy(t)
        c.gemm = DenseGemm(g.layout, n, k, g.weight, g.scale, None if g.zero is g.scale else g.zero,
                           None if g.global_scale is g.scale else g.global_scale, t.gemm.bias, mode=t.gemm.mode,
                           weight_format=t.gemm.weight_format)
        c.eager = EagerGraphs(c.forward)
        layers.append(c)
    cfg = t.gemm.config_for(M, t.act)
    path = served_by(t, x)                  # first: the first eager call records the launch plan the rest replay
    err = rel(t.apply(x), em.apply(x))
    us = gtime([lambda c=c: c.apply(x) for c in layers], 20)
    i = [0]

    def eager_call():
        layers[i[0] % len(layers)].apply(x)
        i[0] += 1
    eager = time_cuda_ms(eager_call, iters=20, warmup=len(layers) * 2) * 1e3
    print(f"{shape} {fmt} M={M} public call: config_for {cfg} served by {path}: graph {us:.1f} us, eager "
          f"{eager:.1f} us; BF16 {bf:.1f} us: xBF16 {bf / us:.2f} (1.3x: {bf / 1.3:.1f} us) err {err:.1e}"
          f"{'' if err < 1e-2 else '  DISAGREES'}", flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fmts", nargs="+", default=["mxfp4", "nvfp4", "int4"], choices=list(MODES))
    ap.add_argument("--shapes", nargs="+", default=["8192x8192", "7168x18432", "2048x4096"], choices=list(SHAPES))
    ap.add_argument("--budget-s", type=float, default=40.0)
    ap.add_argument("--m", type=int, default=16, help="activation rows")
    ap.add_argument("--compile-only", type=int, help="compile jobs I, I + W, ... and exit")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--list", action="store_true", help="print the compile jobs and exit (no GPU)")
    ap.add_argument("--pf0", action="store_true", help="the PF 0 variants beside the shipped PF 2 one")
    ap.add_argument("--public", action="store_true", help="time the public layer call (TritonLinear.apply)")
    ap.add_argument("--cfgs", help="JSON {fmt: [REGA config, ...]}: time these instead of the built-in variants")
    ap.add_argument("--repeat", type=int, default=1, help="time the shipped entry and each variant R times, "
                    "interleaved, and print the medians")
    args = ap.parse_args(argv)
    global M
    M = args.m
    PF0[0], PUBLIC[0], REPEAT[0] = args.pf0, args.public, max(1, args.repeat)
    if args.cfgs:
        with open(args.cfgs) as f:
            CFGS.update({fmt: cfgs for fmt, cfgs in json.load(f).items() if not fmt.startswith("_")})
    import oracle_triton.linear as lin

    lin.WORD_LAYOUT = True
    if args.list:
        for i, job in enumerate(jobs(args.fmts, args.shapes)):
            print(i, job)
        return 0
    if args.compile_only is not None:
        for job in jobs(args.fmts, args.shapes)[args.compile_only::args.workers]:
            try:
                compile_job(job)
            except Exception as exc:  # noqa: BLE001 - the timing process reports it
                print(f"compile {job}: {type(exc).__name__}: {str(exc)[:300]}", flush=True)
        return 0
    deadline = time.perf_counter() + args.budget_s
    if not start("rega_probe"):
        return 2
    for shape in args.shapes:
        for fmt in args.fmts:
            if time.perf_counter() > deadline:
                print(f"{shape} {fmt}: budget spent", flush=True)
                continue
            if args.public:
                public(fmt, shape)
            else:
                run(fmt, shape, deadline)
    return 0


if __name__ == "__main__":
    sys.exit(main())
