"""Exploration sweep of the dense small-M paths on a GPU, weights served from HBM (issue 26).

One process; per shape N x K (issue 26's four) and weight format, the weights are copied until the
copies exceed 256 MB and every timed call takes the next copy (the H200's L2 is 60 MB). Each
variant runs under CUDA-graph replay and its output is compared with oracle-emulation's (a
variant further than 1e-2 is flagged DISAGREES and never chosen); BF16 cuBLAS (`x @ w.T`, its own
rotated copies), torch's tinygemm (INT4) and the HBM limit are printed beside it.

  M = 1: gemv.gemv_kernel over BLOCK_N x BLOCK_K x SPLIT_K x warps (INT4, MXFP4, NVFP4).
  M = 1, 16, 32: gemm.w4_swap_kernel (INT4: weights as the MMA's A operand) over BLOCK_N x warps x
    SPLIT_K x decoder; the tiled wgemm_kernel's default for comparison.
  FP8 W8A8 per-token: the activation quantizer alone (rows x K width x warps), the whole call
    (ours), and the quantizer followed by torch._scaled_mm rowwise on the codes (a hand-off candidate).

    python bench/sweep_dense.py [--parts int4 fp4 fp8] [--shapes 8192x8192 ...] [--json out.json]
                                [--budget-s 150] [--precompile 12] [--write-table TABLE]
    python bench/sweep_dense.py --from-json out.json --write-table ../plugins/triton/oracle_triton/tuned_configs.json
"""
from __future__ import annotations

import argparse
import math
import sys
import time

import torch
from bench_triton import dense_pair
from sweep_large_m import table_from_json, write_rows, write_winners
from gpu_timing import copy_bandwidth, graph_ms, rel, start


ROTATE = 256 << 20
DEV = "cuda"        # the smoke test (tests/test_bench_scripts or by hand) runs it on CPU under the interpreter
SHAPES = {"8192x8192": (8192, 8192), "36864x7168": (36864, 7168), "7168x18432": (7168, 18432),
          "2048x4096": (2048, 4096)}
OK = 1e-2
M_FP8 = [1, 16, 256]
M_4BIT = {"int4": [1, 16, 32, 256, 4096], "mxfp4": [1, 16, 256], "nvfp4": [1, 16]}
#: The sweep's order: (format, rows) over every shape, the targets that matter most first.
#: A phase's part (--parts): fp8ch W8A8 per channel and fp8blk W8A16 block are "fp8".
PART = {"int4": "int4", "mxfp4": "fp4", "nvfp4": "fp4", "fp8ch": "fp8", "fp8blk": "fp8"}
PHASES = [("int4", [1, 16]), ("fp8ch", M_FP8), ("mxfp4", [1, 16]), ("nvfp4", [1, 16]), ("int4", [32, 256, 4096]),
          ("mxfp4", [256])]
ROWS: list[dict] = []
DEADLINE = [math.inf]


def gtime(calls: list, reps: int = 20) -> float:
    """us per call under graph replay, each call the next of `calls` (one per weight copy)."""
    n = len(calls)
    r = n * max(1, math.ceil(reps / n))

    def loop():
        for i in range(r):
            calls[i % n]()
    loop()
    torch.cuda.synchronize()
    return graph_ms(loop, 1) * 1e3 / r


def copies(nbytes: int) -> int:
    return max(2, ROTATE // max(1, nbytes) + 1)


def fill_split(tiles: int, k_tiles: int, sms: int, waves: float) -> int:
    """The smallest power-of-two split-K with tiles * split >= waves * sms (at least 2 K tiles each)."""
    s = 1
    while s < 32 and tiles * s < waves * sms and k_tiles // (2 * s) >= 1:
        s *= 2
    return s


def record(shape, fmt, m, label, cfg, fn, ref, base: dict) -> float | None:
    if time.perf_counter() > DEADLINE[0]:
        return None
    try:
        err = rel(fn[0](), ref)
        us = gtime(fn, 20 if m <= 32 else 4)
    except Exception as exc:  # noqa: BLE001 - a variant that does not compile is reported, never chosen
        print(f"  {shape} {fmt} M={m} {label}: FAILED {type(exc).__name__}: {str(exc)[:200]}", flush=True)
        ROWS.append(dict(shape=shape, fmt=fmt, m=m, variant=label, config=cfg, error=f"{type(exc).__name__}"))
        return None
    ok = err < OK
    ROWS.append(dict(shape=shape, fmt=fmt, m=m, variant=label, config=cfg, us=us, err=err, **base))
    bf = base.get("bf16_us")
    print(f"  {shape:11} {fmt:6} M={m:<3} {label:34} {us:8.1f} us  xBF16 {bf / us if bf else 0:5.2f}  "
          f"xHBM {us / base['hbm_us']:5.2f}  err {err:.1e}{'' if ok else '  DISAGREES'}", flush=True)
    return us if ok else None


def build(fmt, n, k, w, mode_name, act, params):
    from oracle_triton.launch import DenseGemm

    t, em, tensors, layer, mode = dense_pair(f"{n}x{k}", fmt, n, k, w, mode_name, act, params)
    g = t.gemm
    gs = [g] + [DenseGemm(g.layout, n, k, g.weight.clone(), g.scale.clone(),
                          None if g.zero is g.scale else g.zero.clone(),
                          None if g.global_scale is g.scale else g.global_scale.clone(), None)
                for _ in range(copies(t.packed.nbytes()) - 1)]
    return t, em, gs, tensors, layer, mode


DEFAULTS_ONLY = [False]      # --defaults-only: time what config_for chooses (rules + shipped table), nothing else


#: fp4_gemv.fp4_rows_kernel variants: (ROWS, BLOCK_N, BLOCK_K, warps).
ROWS_GRID = [(256, 32, 1024, 4), (128, 32, 1024, 4), (256, 32, 512, 4), (64, 8, 1024, 1)]
ONLY: list[list[str]] = [[]]     # --only: the variant labels to time start with one of these (and the default)


def only(variants: list[tuple[str, dict]]) -> list[tuple[str, dict]]:
    """The default and the variants --only names (all without --only)."""
    if not ONLY[0]:
        return variants
    return [v for v in variants if v[0] == "default" or any(v[0].startswith(p) for p in ONLY[0])]


def variants_4bit(fmt, n, k, m, facts, default) -> list[tuple[str, dict]]:
    """The launch configurations tried for a 4-bit layer at M rows (default first)."""
    if DEFAULTS_ONLY[0]:
        return [("default", default)]
    from oracle_triton.launch import gemv_config
    from oracle_triton.formats import layout_for

    sms = facts["sms"]
    lay = layout_for(fmt, n, k, 128)
    out = [("default", default)]
    if m >= 256:
        out.append(("dequant + cuBLAS", {"DEQUANT_MM": 1}))
        if facts["hw_fp8"]:      # 4-bit whole tiles decoded by words inside the tensor-core GEMM (FULL_TILE 2)
            for bm, bn, bk, nw, ns in ((128, 128, 128, 8, 3), (128, 128, 64, 8, 4), (256, 128, 64, 8, 3),
                                       (128, 128, 128, 4, 3), (256, 128, 128, 8, 2)):
                if bk % lay.group:          # INT4: a K tile holds whole groups
                    continue
                out.append((f"words bm{bm} bn{bn} bk{bk} w{nw} s{ns}",
                            {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "SPLIT_K": 1, "GROUP_M": 8,
                             "FULL_TILE": 2, "num_warps": nw, "num_stages": ns}))
            # the swap-AB kernel on whole decoded tiles (JOIN): each weight tile decoded once per BM rows
            shapes = ((128, 128, 8, 1), (64, 128, 8, 1), (64, 128, 8, 2), (64, 64, 4, 2)) if fmt == "int4" else \
                ((128, 128, 8, 1), (128, 128, 8, 2), (64, 128, 8, 2), (64, 64, 4, 2))   # (larger tiles at PF2 spill)
            for bm, bn, nw, pf in shapes:
                tiles, kt = -(-n // bn) * -(-m // bm), k // 128
                sp = fill_split(tiles, kt, sms, 1)
                out.append((f"join bm{bm} bn{bn} s{sp} w{nw} pf{pf}",
                            {"SWAP": 1, "BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": 128, "SPLIT_K": sp,
                             "DECODE": 3 if fmt == "int4" else 4, "num_warps": nw, "num_stages": 1,
                             "FULL_TILE": int(fmt != "int4"), "PREFETCH": pf}))
        return only(out)
    if fmt != "int4" and facts["hw_fp8"] and "SWAP" in default and default.get("DECODE") in (0, 4):
        other = 4 - default["DECODE"]     # E2M1 swap: bit placement (4) against the elementwise decode (0)
        out.append((f"default d{other}", {**default, "DECODE": other}))
    if m == 1 and fmt != "int4":     # the row-walking E2M1 GEMV (fp4_gemv): rows per program x rows per step x K chunk
        for rows, bn, bk, nw in ROWS_GRID:
            out.append((f"rows r{rows} bn{bn} bk{bk} w{nw}",
                        {"ROWS": rows, "BLOCK_N": bn, "BLOCK_K": bk, "SPLIT_K": -(-k // bk),
                         "DECODE": 3 if facts["hw_fp8"] else 0, "num_warps": nw, "num_stages": 1}))
    if 1 < m <= 32 and "SWAP" in default and default.get("DECODE") in (3, 4):
        # loads two K tiles ahead (PREFETCH 2), one dot per K tile (JOIN, E2M1), the split doubled
        sp = default["SPLIT_K"]
        out.append(("pf2 default", {**default, "PREFETCH": 2}))
        out.append((f"pf2 s{sp * 2}", {**default, "PREFETCH": 2, "SPLIT_K": sp * 2}))
        if fmt != "int4":
            out.append(("join default", {**default, "FULL_TILE": 1}))
            out.append(("join pf2", {**default, "FULL_TILE": 1, "PREFETCH": 2}))
            out.append((f"join pf2 s{sp * 2}", {**default, "FULL_TILE": 1, "PREFETCH": 2, "SPLIT_K": sp * 2}))
        else:
            out.append((f"pf2 w{12 - default['num_warps']}",
                        {**default, "PREFETCH": 2, "num_warps": 12 - default["num_warps"]}))
    if ONLY[0]:
        return only(out)
    if m == 1:
        d = gemv_config(n, k, sms, lay.elem, lay.group, words=facts["hw_fp8"])
        if fmt == "int4":
            grid = [(bn, bk, nw) for bn in (32, 64, 128) for bk in (128, 256, 512) for nw in (4, 8)]
        else:
            grid = [(bn, bk, nw) for bn in (16, 32, 64) for bk in (512, 1024) for nw in (4, 8)]
        for bn, bk, nw in grid:
            if bn * bk > 128 * 512 or (nw == 8 and bn * bk < 128 * 256):
                continue
            tiles, kt = -(-n // bn), -(-k // bk)
            for waves in ((1, 2, 4) if m == 1 else (1, 2)):
                sp = fill_split(tiles, kt, sms, waves)
                if waves > 1 and sp == fill_split(tiles, kt, sms, 1):
                    continue
                out.append((f"gemv bn{bn} bk{bk} s{sp} w{nw}",
                            {**d, "BLOCK_N": bn, "BLOCK_K": bk, "SPLIT_K": sp, "num_warps": nw}))
    bms = (64, 128) if m >= 128 else ((16,) if m <= 16 else (32,))
    for bm in bms:
        for bn in (64, 128, 256):
            for nw in (4, 8):
                if (bn == 256 and nw == 4) or (bm >= 64 and (bn, nw) not in ((128, 4), (128, 8))) or \
                        (m == 1 and fmt != "int4" and bn == 256):
                    continue
                for bk in (128,):
                    tiles, kt = -(-n // bn) * -(-m // bm), k // bk
                    for waves in ((1, 2, 4) if m == 1 else (1, 2)):
                        sp = fill_split(tiles, kt, sms, waves)
                        if waves > 1 and sp == fill_split(tiles, kt, sms, 1):
                            continue
                        decs = (3, 0) if fmt == "int4" and (bn, nw, waves, bm) == (128, 4, 1, 16) else \
                            ((3,) if fmt == "int4" else (4, 0) if (bn, nw, waves, bm) == (128, 4, 1, 16) else (4,))
                        for dec in decs:
                            out.append((f"swap bm{bm} bn{bn} bk{bk} s{sp} w{nw} d{dec}",
                                        {"SWAP": 1, "BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "SPLIT_K": sp,
                                         "DECODE": dec, "num_warps": nw, "num_stages": 1}))
    return out


def sweep_4bit(name, n, k, w, bw, fmt, ms):
    mode_name = {"int4": "w4a16_int4", "mxfp4": "w4a16_mx", "nvfp4": "w4a16_nvfp4"}[fmt]
    t, em, gs, tensors, layer, mode = build(fmt, n, k, w, mode_name, "bf16", {})
    g = gs[0]
    hbm = t.packed.nbytes() / bw * 1e6
    tiny = []
    if fmt == "int4":
        try:
            from oracle_torch.tinygemm import TorchTinyGemmInt4Linear
            for _ in range(copies(t.packed.nbytes())):
                tg = TorchTinyGemmInt4Linear(layer, mode, None)
                tg.process_weights(**{kk: (v.clone() if isinstance(v, torch.Tensor) else v) for kk, v in tensors.items()})
                tiny.append(tg.forward)
        except Exception as exc:  # noqa: BLE001
            print(f"  tinygemm skipped: {type(exc).__name__}: {exc}")
    del tensors
    bf16 = [w] + [w.clone() for _ in range(copies(n * k * 2) - 1)]
    for m in ms:
        x = torch.randn(m, k, device=DEV, dtype=torch.bfloat16)
        ref = em.apply(x)
        base = {"bf16_us": gtime([lambda ww=ww: x @ ww.t() for ww in bf16], 20 if m <= 32 else 4), "hbm_us": hbm}
        if tiny and m <= 32:          # (tinygemm takes 1-75 ms from 256 rows on: bench_peers has those figures)
            base["tinygemm_us"] = gtime([lambda f=f: f(x) for f in tiny])
        print(f"{name} {fmt} M={m}: bf16 {base['bf16_us']:.1f} us, tinygemm {base.get('tinygemm_us', 0):.1f} us, "
              f"hbm {hbm:.1f} us", flush=True)
        time_layer_dtype(name, fmt, m, variants_4bit(fmt, n, k, m, g.facts, g.config_for(m, 0)), gs, x, ref, base)
    del t, em, gs, bf16


def time_layer_dtype(name, fmt, m, variants, gs, x, ref, base) -> None:
    """Time each (label, config) of a layer-dtype-activation layer (one call per weight copy), then print and
    record the fastest that agreed (with its ratio to tinygemm where base has one)."""
    best = [None, math.inf]
    for label, cfg in variants:
        us = record(name, fmt, m, label, cfg, [lambda gg=gg, cfg=cfg: gg(x, 0, None, torch.bfloat16, cfg)
                                               for gg in gs], ref, base)
        if us is not None and us < best[1]:
            best[:] = [(label, cfg), us]
    if best[0] is not None:
        tiny = f"x tinygemm {base['tinygemm_us'] / best[1]:.2f}  " if base.get("tinygemm_us") else ""
        print(f"BEST {name} {fmt} M={m}: {best[0][0]} {best[1]:.1f} us  xBF16 {base['bf16_us'] / best[1]:.2f}  "
              f"{tiny}{best[0][1]}", flush=True)
        ROWS.append(dict(shape=name, fmt=fmt, m=m, best=best[0][0], config=best[0][1], us=best[1], **base))


def variants_w8a16(m: int, default: dict) -> list[tuple[str, dict]]:
    """FP8 W8A16 block weights at many rows: the default (DEQUANT_MM from 256 rows: the weight dequantized
    once, then cuBLAS) against our tiled GEMM decoding the E4M3 tiles in registers (one launch, no
    dequantized copy), whose per-128x128-block scale is one value per tile (eighth pass)."""
    tiles = ((64, 64, 128, 4, 4, 1), (64, 128, 128, 4, 4, 1), (128, 64, 128, 4, 4, 1), (128, 128, 128, 8, 3, 1),
             (128, 128, 64, 8, 4, 1), (64, 128, 128, 4, 4, 2)) if m <= 256 else \
        ((128, 128, 128, 8, 3, 1), (128, 256, 64, 8, 3, 1), (128, 128, 64, 8, 4, 1), (256, 128, 64, 8, 3, 1))
    out = [("default", default)]
    for bm, bn, bk, nw, st, sp in tiles:
        out.append((f"w8a16 tile bm{bm} bn{bn} bk{bk} w{nw} st{st} s{sp}",
                    {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "SPLIT_K": sp, "num_warps": nw, "num_stages": st,
                     "GROUP_M": 8, "FULL_TILE": 0}))
    return only(out)


def sweep_w8a16(name, n, k, w, bw, ms):
    """FP8 W8A16 block (1x128x128 weight scales, layer-dtype activations) at many rows, beside BF16."""
    t, em, gs, tensors, layer, mode = build("fp8_block", n, k, w, "w8a16_block", "bf16", {})
    g = gs[0]
    hbm = t.packed.nbytes() / bw * 1e6
    del tensors
    bf16 = [w] + [w.clone() for _ in range(copies(n * k * 2) - 1)]
    for m in ms:
        x = torch.randn(m, k, device=DEV, dtype=torch.bfloat16)
        ref = em.apply(x)
        base = {"bf16_us": gtime([lambda ww=ww: x @ ww.t() for ww in bf16], 4), "hbm_us": hbm}
        print(f"{name} fp8blk M={m}: bf16 {base['bf16_us']:.1f} us, hbm {hbm:.1f} us", flush=True)
        time_layer_dtype(name, "fp8blk", m, variants_w8a16(m, g.config_for(m, 0)), gs, x, ref, base)
    del t, em, gs, bf16


def variants_fp8(n, k, m, facts, default) -> list[tuple[str, dict]]:
    """W8A8 per-token launch configurations tried at M rows: the default (tiled GEMM or GEMV) and
    gemm.fp8_swap_kernel (weights as the float8 MMA's A operand)."""
    sms = facts["sms"]
    out = [("default", default)]
    if m == 1 and "SWAP" in default:     # the row rounded inside the GEMM against a quantizer launch first
        out.append(("default, quantizer launch", {**default, "QUANT_IN": 0}))
    if 1 < m <= 32 and "SWAP" in default and facts.get("pdl"):   # the GEMM fetching its weights during the quantizer
        from oracle_triton.launch import FP8_PDL
        other = 1 - default.get("PDL", FP8_PDL)
        out.append((f"default, pdl {other}", {**default, "PDL": other}))
    if 1 < m <= 32 and "SWAP" in default:      # the rows quantized by the GEMM's programs (COOP) or a launch before
        from oracle_triton.launch import FP8_COOP
        out.append((f"default, coop {1 - default.get('COOP', FP8_COOP)}", {**default, "COOP": 1 - default.get("COOP", FP8_COOP)}))
        out.append(("default, coop 1 spin 0", {**default, "COOP": 1, "COOP_SPIN": 0}))   # waiters polling by atomics
        # (R13: row chunks of 2048 or 4096 instead of one load, and the weights asked of L2 before the
        # rows are quantized, were slower still: no longer tried)
    if m <= 32 and "SWAP" in default and facts.get("pdl"):       # its weights asked of L2 before the K loop
        out.append((f"default, pf_l2 {1 - default.get('PF_L2', 0)}", {**default, "PF_L2": 1 - default.get("PF_L2", 0)}))
    if m <= 32 and "SWAP" in default:            # weights read with L2 evict-first (streamed once)
        out.append(("default, evict", {**default, "EVICT": 1}))
        if m > 1 and facts.get("pdl"):
            out.append(("default, pdl 1 evict", {**default, "PDL": 1, "EVICT": 1}))
    if m <= 32 and "SWAP" in default and facts.get("pdl"):   # each program's row heads asked of L2 first (bytes)
        for head in (512, 1024):
            out.append((f"default, head {head}", {**default, "PF_HEAD": head}))
            if m > 1:
                out.append((f"default, pdl 1 head {head}", {**default, "PDL": 1, "PF_HEAD": head}))
    if m == 1 and "SWAP" in default:             # eighth pass: deeper pipelines, wider tiles at one row
        for bn, bk, nw, st in ((64, 256, 4, 3), (64, 256, 4, 5), (64, 128, 4, 6), (128, 128, 4, 5), (32, 256, 4, 4)):
            tiles, kt = -(-n // bn), k // bk
            splits = sorted({fill_split(tiles, kt, sms, waves) for waves in (1, 2)})
            for sp in splits:
                out.append((f"m1 bn{bn} bk{bk} s{sp} w{nw} st{st}",
                            {"SWAP": 1, "BLOCK_M": 16, "BLOCK_N": bn, "BLOCK_K": bk, "SPLIT_K": sp,
                             "num_warps": nw, "num_stages": st}))
    out += quant_in_variants(n, k, m, sms, default, facts)
    if DEFAULTS_ONLY[0]:
        return only(out)
    if m == 1:      # more programs per SM against more bytes in flight each (deeper K tiles, more stages,
        # wider N); R7 on 7168x18432: 128x256 / 256x128 / 64x512 tiles 15-50% slower, so not tried
        grid = [(16, 64, 128, 4, 4), (16, 128, 128, 4, 4), (16, 64, 128, 4, 6), (16, 64, 256, 4, 4)]
    elif m <= 32:
        grid = [(16 if m <= 16 else 32, bn, bk, nw, st) for bn in (64, 128, 256) for bk in (128, 256)
                for nw in (4, 8) for st in (3, 5)]
        grid = [g for g in grid if not (g[1] == 256 and g[3] == 4) and not (g[1] == 64 and g[3] == 8)
                and not (g[1] == 128 and g[3] == 8 and g[4] == 5)
                and (g[0] + g[1]) * g[2] * g[4] <= 224 * 1024]          # the stages' shared memory
    else:
        grid = [(bm, 128, 128, nw, 4) for bm in (64, 128) for nw in (4, 8)] + [(64, 256, 128, 8, 4)]
        if n * k <= 1 << 24:        # small layers (2048x4096): more, smaller tiles fill the SMs
            grid += [(64, 64, 128, 4, 4), (64, 64, 256, 4, 3), (128, 64, 128, 4, 4), (32, 128, 128, 4, 4)]
        # the tiled float8 GEMM (wgemm_kernel on the quantizer's codes, or COOP: its programs quantize
        # the rows first, one launch), no swap
        tiles = ((64, 64, 4, 1), (64, 128, 4, 1), (128, 128, 8, 1), (64, 128, 4, 2), (128, 64, 4, 2)) \
            if n * k <= 1 << 24 else ((128, 128, 8, 1), (64, 128, 4, 1))
        for bm, bn, nw, sp in tiles:
            for coop in (0, 1):
                out.append((f"tile bm{bm} bn{bn} bk128 s{sp} w{nw}{' coop' if coop else ''}",
                            {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": 128, "SPLIT_K": sp, "num_warps": nw,
                             "num_stages": 4, "GROUP_M": 8, "FULL_TILE": 0, "COOP": coop}))
    for bm, bn, bk, nw, st in grid:
        tiles, kt = -(-n // bn) * -(-m // bm), k // bk
        for waves in ((1, 2, 4) if m == 1 else (1, 2)):
            sp = fill_split(tiles, kt, sms, waves)
            if waves > 1 and sp == fill_split(tiles, kt, sms, 1):
                continue
            out.append((f"swap bm{bm} bn{bn} bk{bk} s{sp} w{nw} st{st}",
                        {"SWAP": 1, "BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "SPLIT_K": sp, "num_warps": nw,
                         "num_stages": st}))
    return only(out)


def quant_in_variants(n, k, m, sms, default, facts) -> list[tuple[str, dict]]:
    """Labels "qin ...", 2-32 rows: each swap GEMM program rounds its own rows (QUANT_IN 1: token_rows, one
    launch, no waiting) in the default configuration and in a few tilings with fewer programs (each
    reads its rows' whole K for their amax, so fewer column tiles and splits read less from L2); with
    PF_L2 the weights' HBM reads start before the amax pass. R16: all slower than the two launches."""
    if m == 1 or m > 32:        # (the tiled GEMM's form, at 64-128 rows per program, was removed: 8-20x slower)
        return []
    out = []
    if "SWAP" in default:
        out.append(("qin default", {**default, "QUANT_IN": 1}))
        if facts.get("pdl"):
            out.append(("qin default pf_l2", {**default, "QUANT_IN": 1, "PF_L2": 1}))
    bm = 16 if m <= 16 else 32
    for bn, split, nw in ((64, 1, 4), (64, 2, 4), (64, 4, 4), (128, 1, 4), (128, 2, 4), (32, 1, 4), (32, 2, 4)):
        cfg = {"SWAP": 1, "BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": 128, "SPLIT_K": split, "num_warps": nw,
               "num_stages": 4}
        out.append((f"qin swap bn{bn} s{split} w{nw}", {**cfg, "QUANT_IN": 1}))
        if facts.get("pdl") and split == 1 and bn == 64:
            out.append((f"qin swap bn{bn} s{split} w{nw} pf_l2", {**cfg, "QUANT_IN": 1, "PF_L2": 1}))
    return out


#: Per-token quantizer variants: rows per program, K width of a tile, warps.
QUANT_VARIANTS = ((1, 4096, 8), (1, 2048, 4), (2, 2048, 4))


def run_quantizer(x, codes, scales, rows_, bk, nw):
    from oracle_triton.formats import ACT_TOKEN
    from oracle_triton.gemm import act_qdq_kernel

    m, k = x.shape
    act_qdq_kernel[(-(-m // rows_), 1)](x, x, codes, m, k, x.stride(0), codes.stride(0), ACT=ACT_TOKEN,
                                        BLOCK_M=rows_, BLOCK_K=bk, EXACT_BF16=False, scales_ptr=scales,
                                        CODES=True, num_warps=nw)


def sweep_fp8(name, n, k, w, bw, ms):
    from oracle_triton.launch import quantize_activation_codes
    from oracle_triton.formats import ACT_TOKEN

    t, em, gs, tensors, layer, mode = build("fp8_channel", n, k, w, "w8a8_fp8_channel", "fp8",
                                            {"activation_granularity": "token"})
    g = gs[0]
    hbm = t.packed.nbytes() / bw * 1e6
    del tensors
    bf16 = [w] + [w.clone() for _ in range(copies(n * k * 2) - 1)]
    wts = [gg.weight.view(torch.float8_e4m3fn).t() for gg in gs]
    sbs = [gg.scale.reshape(1, n).contiguous() for gg in gs]
    for m in ms:
        x = torch.randn(m, k, device=DEV, dtype=torch.bfloat16)
        ref = em.apply(x)
        base = {"bf16_us": gtime([lambda ww=ww: x @ ww.t() for ww in bf16]), "hbm_us": hbm}
        print(f"{name} fp8ch M={m}: bf16 {base['bf16_us']:.1f} us, hbm {hbm:.1f} us", flush=True)
        codes_ref, scales_ref = quantize_activation_codes(x, ACT_TOKEN, None, g.facts)
        qus = gtime([lambda: quantize_activation_codes(x, ACT_TOKEN, None, g.facts)])
        ROWS.append(dict(shape=name, fmt="fp8ch-quant", m=m, variant="default", us=qus, same=True))
        print(f"  {name:11} quantizer M={m:<4} default (launch.quantize_activation_codes): {qus:7.1f} us", flush=True)
        for rows_, bk, nw in QUANT_VARIANTS if not DEFAULTS_ONLY[0] and not ONLY[0] else ():
            if time.perf_counter() > DEADLINE[0]:
                break
            codes = torch.empty(m, k, dtype=torch.uint8, device=DEV)
            scales = torch.empty(m, dtype=torch.float32, device=DEV)

            def q(codes=codes, scales=scales, rows_=rows_, bk=bk, nw=nw):
                run_quantizer(x, codes, scales, rows_, bk, nw)
            try:
                q()
                same = bool(torch.equal(codes, codes_ref.view(torch.uint8)) and torch.equal(scales, scales_ref))
                us = gtime([q])
            except Exception as exc:  # noqa: BLE001
                print(f"  quantizer r{rows_} k{bk} w{nw}: FAILED {type(exc).__name__}: {str(exc)[:160]}")
                continue
            ROWS.append(dict(shape=name, fmt="fp8ch-quant", m=m, variant=f"r{rows_} k{bk} w{nw}", us=us, same=same))
            print(f"  {name:11} quantizer M={m:<4} r{rows_} k{bk} w{nw}: {us:7.1f} us{'' if same else '  DIFFERS'}",
                  flush=True)
        best = [None, math.inf]
        for label, cfg in variants_fp8(n, k, m, g.facts, g.config_for(m, ACT_TOKEN)):
            us = record(name, "fp8ch", m, label, cfg,
                        [lambda gg=gg, cfg=cfg: gg(x, ACT_TOKEN, None, torch.bfloat16, cfg) for gg in gs], ref, base)
            if us is not None and us < best[1]:
                best[:] = [(label, cfg), us]

        def handoff(i):
            c, s = quantize_activation_codes(x, ACT_TOKEN, None, g.facts)
            return torch._scaled_mm(c.view(torch.float8_e4m3fn), wts[i], scale_a=s.reshape(m, 1), scale_b=sbs[i],
                                    out_dtype=torch.bfloat16)
        us = None if DEFAULTS_ONLY[0] else record(name, "fp8ch", m, "quantizer + _scaled_mm rowwise", {},
                                                  [lambda i=i: handoff(i) for i in range(len(gs))], ref, base)
        if us is not None and us < best[1]:
            best[:] = [("scaled_mm", {"SCALED_MM": 1}), us]
        if best[0] is not None:
            print(f"BEST {name} fp8ch M={m}: {best[0][0]} {best[1]:.1f} us  xBF16 {base['bf16_us'] / best[1]:.2f}  "
                  f"{best[0][1]}", flush=True)
            ROWS.append(dict(shape=name, fmt="fp8ch", m=m, best=best[0][0], config=best[0][1], us=best[1], **base))
    del t, em, gs, bf16, wts


def compile_worker(index: int, workers: int, parts: list[str], shapes: list[str]) -> None:
    """Compile (launch once, on small weights) every `workers`-th variant the sweep will time, so the
    timing process finds the kernels in Triton's cache: the variants' launch parameters are the
    compiled constants; N and K are runtime values (all of issue 26's shapes are multiples of 16, so
    a small one compiles the same specializations)."""
    from oracle_triton.launch import DenseGemm, device_facts
    from oracle_triton.formats import ACT_TOKEN, layout_for

    facts = device_facts(torch.device(DEV))
    jobs = []
    sn, sk = 256, 4096      # K: more than one 2048-wide chunk (fp4_rows_kernel's SPLIT)
    small = {}
    modes = {"int4": ("w4a16_int4", "bf16", {}), "mxfp4": ("w4a16_mx", "bf16", {}),
             "nvfp4": ("w4a16_nvfp4", "bf16", {}),
             "fp8_channel": ("w8a8_fp8_channel", "fp8", {"activation_granularity": "token"}),
             "fp8_block": ("w8a16_block", "bf16", {})}
    for phase, ms in PHASES:
        part = PART[phase]
        if part not in parts:
            continue
        fmt = {"fp8ch": "fp8_channel", "fp8blk": "fp8_block"}.get(phase, phase)
        if fmt not in small:
            w = torch.randn(sn, sk, device=DEV, dtype=torch.bfloat16) * 0.05
            small[fmt] = build(fmt, sn, sk, w, *modes[fmt])[2][0]
        g = small[fmt]
        for name in shapes:
            n, k = SHAPES[name]
            # the real layer's shape and mode: config_for consults the shipped table with them
            fake = DenseGemm(layout_for(fmt, n, k, 128), n, k, g.weight, g.scale, None, None, None,
                             mode=modes[fmt][0], weight_format=fmt)
            for m in ms:
                if phase == "fp8blk":
                    for _, cfg in variants_w8a16(m, fake.config_for(m, 0)):
                        jobs.append(("fp8_block", m, 0, cfg))
                elif part == "fp8":
                    for _, cfg in variants_fp8(n, k, m, facts, fake.config_for(m, ACT_TOKEN)):
                        jobs.append(("fp8", m, ACT_TOKEN, cfg))
                else:
                    for _, cfg in variants_4bit(fmt, n, k, m, facts, fake.config_for(m, 0)):
                        jobs.append((fmt, m, 0, cfg))
        if phase == "fp8ch" and not DEFAULTS_ONLY[0] and not ONLY[0]:
            for m in ms:
                for v in QUANT_VARIANTS:
                    jobs.append(("quant", m, 0, v))
    seen, unique = set(), []
    for j in jobs:
        key = repr(j)
        if key not in seen:
            seen.add(key)
            unique.append(j)
    mine = unique[index::workers]
    print(f"compile worker {index}/{workers}: {len(mine)} of {len(unique)} variants", flush=True)
    for fmt, m, act, cfg in mine:
        try:
            if fmt == "quant":
                x = torch.randn(m, sk, device=DEV, dtype=torch.bfloat16)
                run_quantizer(x, torch.empty(m, sk, dtype=torch.uint8, device=DEV),
                              torch.empty(m, dtype=torch.float32, device=DEV), *cfg)
            else:
                g = small["fp8_channel" if fmt == "fp8" else fmt]
                g(torch.randn(m, sk, device=DEV, dtype=torch.bfloat16), act, None, torch.bfloat16, cfg)
        except Exception as exc:  # noqa: BLE001 - the timing process reports it
            print(f"  compile worker: {fmt} M={m} {cfg}: {type(exc).__name__}: {str(exc)[:120]}", flush=True)
    torch.cuda.synchronize()


def precompile(workers: int, args) -> None:
    import subprocess
    t0 = time.perf_counter()
    extra = (["--defaults-only"] if args.defaults_only else []) + (["--phases", *args.phases] if args.phases else []) \
        + (["--only", *args.only] if args.only else [])
    procs = [subprocess.Popen([sys.executable, __file__, "--compile-worker", f"{i}/{workers}", "--parts", *args.parts,
                               "--shapes", *args.shapes, *extra]) for i in range(workers)]
    for p in procs:
        try:
            p.wait(timeout=max(1.0, args.compile_timeout_s - (time.perf_counter() - t0)))
        except subprocess.TimeoutExpired:
            p.kill()
    print(f"precompiled with {workers} workers in {time.perf_counter() - t0:.1f} s", flush=True)


HOST_SHAPE, HOST_CALLS = (2048, 4096), 200


def host_profile() -> None:
    """Host time per eager call at M = 1 (INT4 and FP8 per-token, 2048 x 4096: GPU time far below the
    host's) for the eager-graph replay (apply), the raw launches (forward) and BF16, and where the
    Python time goes (cProfile, top functions by own time)."""
    import cProfile
    import io
    import pstats

    for fmt, mode_name, act, params in (("int4", "w4a16_int4", "bf16", {}), ("mxfp4", "w4a16_mx", "bf16", {}),
                                        ("fp8_channel", "w8a8_fp8_channel", "fp8", {"activation_granularity": "token"})):
        n, k = HOST_SHAPE
        w = torch.randn(n, k, device=DEV, dtype=torch.bfloat16) * 0.05
        t = build(fmt, n, k, w, mode_name, act, params)[0]
        x = torch.randn(1, k, device=DEV, dtype=torch.bfloat16)
        from oracle.tensors import apply_dense

        def checked():
            return apply_dense(x, t.k, t.n, t.device, t.dtype, t.forward)
        for label, fn in (("apply (eager graph)", lambda: t.apply(x)), ("forward (raw launches)", lambda: t.forward(x)),
                          ("apply_dense + raw launches", checked), ("bf16 x @ w.T", lambda: x @ w.t())):
            for _ in range(5):
                fn()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(HOST_CALLS):
                fn()
            host = (time.perf_counter() - t0) / HOST_CALLS * 1e6
            torch.cuda.synchronize()
            print(f"host {fmt:12} {label:24} {host:6.1f} us per call", flush=True)
            ROWS.append(dict(kind="host", fmt=fmt, call=label, host_us=host))
            if label.startswith("bf16"):
                continue
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(HOST_CALLS // 2):
                fn()
            prof.disable()
            torch.cuda.synchronize()
            out = io.StringIO()
            pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(14)
            print("\n".join(line for line in out.getvalue().splitlines()[6:26] if line.strip()), flush=True)


MODES = {"int4": ("w4a16_int4", "int4"), "mxfp4": ("w4a16_mx", "mxfp4"), "nvfp4": ("w4a16_nvfp4", "nvfp4"),
         "fp8ch": ("w8a8_fp8_channel", "fp8_channel"), "fp8blk": ("w8a16_block", "fp8_block")}


def table_entries(rows: list[dict], min_gain: float = 1.02) -> list[dict]:
    """Tuned-table entries from a sweep's rows: per shape, format and M, the fastest variant that
    agreed with the reference, where it beats the default by min_gain (else the rules already serve
    it); a hand-off to torch._scaled_mm is not a launch configuration (the selection's business)."""
    from oracle_triton.tuned import bucket

    default = {(r["shape"], r["fmt"], r["m"]): r["us"] for r in rows if r.get("variant") == "default" and "us" in r
               and r.get("err", 1.0) < OK}
    out = []
    for r in rows:
        if "best" not in r or not r["config"] or r["fmt"] not in MODES:
            continue
        d = default.get((r["shape"], r["fmt"], r["m"]))
        if d is not None and d < r["us"] * min_gain:
            continue
        n, k = SHAPES[r["shape"]]
        mode, weight = MODES[r["fmt"]]
        out.append({"kind": "dense", "mode": mode, "weight": weight, "n": n, "k": k, "m": bucket(r["m"]),
                    "config": r["config"], "us": round(r["us"], 2), "default_us": round(d, 2) if d else None})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parts", nargs="+", default=["int4", "fp8", "fp4"], choices=["int4", "fp4", "fp8"])
    ap.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    ap.add_argument("--json")
    ap.add_argument("--budget-s", type=float, default=150.0, help="stop starting variants after this")
    ap.add_argument("--precompile", type=int, default=0, help="compile the variants in this many processes first")
    ap.add_argument("--precompile-only", action="store_true", help="compile (--precompile N), time nothing")
    ap.add_argument("--compile-timeout-s", type=float, default=60.0)
    ap.add_argument("--compile-worker", help=argparse.SUPPRESS)
    ap.add_argument("--host-profile", action="store_true", help="only the eager host-time profile")
    ap.add_argument("--defaults-only", action="store_true",
                    help="time only what config_for chooses (the rules and the shipped table) beside BF16 / tinygemm")
    ap.add_argument("--only", nargs="+", default=[], metavar="PREFIX",
                    help="time only the default and the variants whose label starts with one of these (e.g. rows)")
    ap.add_argument("--phases", nargs="+", metavar="FMT:M,M", help="instead of PHASES, e.g. int4:1,16 fp8ch:256")
    ap.add_argument("--write-table", metavar="PATH", help="merge the winners into this tuned-config table")
    ap.add_argument("--from-json", metavar="FILE", help="with --write-table: take the rows from an earlier run's "
                    "--json (no GPU needed)")
    ap.add_argument("--device-name", help="with --from-json: the device the rows were measured on (default: the "
                    "one the file names, else the NVIDIA H200)")
    args = ap.parse_args(argv)
    if args.from_json:
        if not args.write_table:
            ap.error("--from-json needs --write-table")
        table_from_json(args.from_json, args.write_table, args.device_name, table_entries)
        return 0
    DEFAULTS_ONLY[0] = args.defaults_only
    ONLY[0] = args.only
    if args.phases:
        PHASES[:] = [(p.split(":")[0], [int(v) for v in p.split(":")[1].split(",")]) for p in args.phases]
    if args.compile_worker:
        i, p = map(int, args.compile_worker.split("/"))
        compile_worker(i, p, args.parts, args.shapes)
        return 0
    if args.precompile:
        precompile(args.precompile, args)
        if args.precompile_only:
            return 0
    if args.host_profile:
        if not torch.cuda.is_available():
            print("sweep_dense: needs a CUDA device", file=sys.stderr)
            return 2
        host_profile()
        return 0
    if not start("sweep_dense"):
        return 2
    DEADLINE[0] = time.perf_counter() + args.budget_s
    bw = copy_bandwidth()
    print(f"copy bandwidth {bw / 1e12:.2f} TB/s")
    try:
        for fmt, ms in PHASES:        # most important first: a budget that runs out loses the least
            part = PART[fmt]
            if part not in args.parts:
                continue
            for name in args.shapes:
                if time.perf_counter() > DEADLINE[0]:
                    print(f"budget spent: {fmt} M={ms} {name} not run")
                    continue
                n, k = SHAPES[name]
                w = torch.randn(n, k, device=DEV, dtype=torch.bfloat16) * 0.05
                if fmt == "fp8ch":
                    sweep_fp8(name, n, k, w, bw, ms)
                elif fmt == "fp8blk":
                    sweep_w8a16(name, n, k, w, bw, ms)
                else:
                    sweep_4bit(name, n, k, w, bw, fmt, ms)
                del w
                torch.cuda.empty_cache()
                write_rows(args.json, bw, ROWS)
    finally:
        write_rows(args.json, bw, ROWS)
    write_winners(args.write_table, ROWS, table_entries)
    return 0


if __name__ == "__main__":
    sys.exit(main())
