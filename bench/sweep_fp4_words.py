"""MXFP4 / NVFP4 W4A16 in the checkpoint layout against the word layout, one process (issue 26).

oracle-triton repacks W4A16 E2M1 weights at load into GPTQ's [K/8, N] int32 words
(weights.repack_words, linear.WORD_LAYOUT) so the one-row GEMV runs INT4's structure. This times,
per shape of issue 26 and format, beside BF16 cuBLAS (`x @ w.T`) and the HBM limit, under CUDA-graph
replay with every call on the next of >256 MB of weight copies (HBM-resident, not the 60 MB L2):
the checkpoint layout's default (its shipped tuned entry or rules), the word layout's default,
and (M = 1) a grid of word-layout GEMV tiles, (M = 16) a grid of swap-AB tiles (INT4 too, --fmts int4). Each output is checked against oracle-emulation
(a variant further than 1e-2 is flagged DISAGREES and never chosen).

    python bench/sweep_fp4_words.py [--fmts mxfp4 nvfp4] [--ms 1 16 256] [--shapes ...] [--json out.json]
                                    [--precompile 12] [--budget-s 60] [--no-grid] [--write-table TABLE]
    python bench/sweep_fp4_words.py --from-json out.json --write-table ../plugins/triton/oracle_triton/tuned_configs.json
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

from pathlib import Path

import torch
from sweep_large_m import table_from_json, write_rows, write_winners
from gpu_timing import copy_bandwidth, rel, start
from sweep_dense import DEV, OK, SHAPES, build, copies, fill_split, gtime

MODES = {"mxfp4": "w4a16_mx", "nvfp4": "w4a16_nvfp4", "int4": "w4a16_int4"}
ROWS: list[dict] = []
#: (BLOCK_N, BLOCK_K, split waves, warps) of the word-layout GEMV grid at M = 1 (INT4's neighbourhood).
GRID = [(32, 256, 1, 4), (32, 256, 3, 4), (64, 256, 1, 4), (64, 256, 3, 4), (32, 512, 1, 4), (128, 256, 1, 8)]


def gemv_grid(n: int, k: int, sms: int) -> list[tuple[str, dict]]:
    out = []
    for bn, bk, waves, nw in GRID:
        sp = fill_split(-(-n // bn), -(-k // bk), sms, waves)
        out.append((f"words gemv bn{bn} bk{bk} s{sp} w{nw}",
                    {"BLOCK_N": bn, "BLOCK_K": bk, "SPLIT_K": sp, "DECODE": 3, "num_warps": nw, "num_stages": 3}))
    return out


#: (BLOCK_N, warps, split waves, JOIN) of the swap-AB kernel at M = 16: 32-row weight tiles at 4 warps
#: compile to mma.sync with the decoded operand in registers (sm_90 PTX), 64 and more to wgmma, whose
#: operand from registers goes through shared memory with a wait per dot.
#: R11 on the words: JOIN 1.7-2.6x and PREFETCH 2 1.1-1.3x slower than the plain tiles, so the grid
#: now varies the tile, warps and split only.
#: Seventh pass (2026-12-02, session 7): the 6th field F 1 adds the fused E2M1 decoder (DECODE 5: one packed
#: multiply per value pair) and JOIN's K order that keeps each decoded register pair whole (PERM), whose
#: sm_90 loop (Triton 3.6, 8192x8192 MXFP4 at 128x16 tiles, 8 warps) has 267 instructions and one
#: wgmma wait per K tile against the shipped tiles' 413 and eight waits (INT4: 233 against 306).
#: R16 (all four shapes): the joined tiles 1.4-2.9x slower than the shipped per-nibble dots in every case
#: (8192x8192 MXFP4 61.4 against 30.6), the fused decoder on the shipped tiles 3-8% faster (28.6 against
#: 30.6; 7168x18432 57.2 against 62.1), so the grid keeps the fused decoder on plain tiles.
#: R17: K tiles of 256 with the fused decoder 1.1-1.9x slower than 128 (8192x8192 MXFP4 41.7 against
#: 28.6), so dropped too; the fused decoder on each shipped default is timed as "words default d5".
#: Eighth pass (2026-12-02, session 8), R19: the K tiles loaded where used and pipelined by Triton
#: (PREFETCH 0, num_stages 3-4: cp.async into shared memory, 2-3 tiles in flight per program, the
#: words read from there in the MMA operand's layout; sm_90 loop of 8192x8192 MXFP4 128x16 w8: 331
#: instructions, 0 LDSM) was slower on every shape, format and tile (8192x8192 MXFP4 34.1-78.3 us
#: against the shipped 28.6; 7168x18432 69.2-177.2 against 57.4-60.2; 2048x4096 10.4-17.7 against
#: 8.4-8.8), so more bytes in flight per SM do not help and it was removed.
#: Then (CPU, sm_90 SASS): the R16 joined tile (`PERM`) gathered its activations as 2-byte loads that ptxas
#: issued at the end of the loop, so each tile waited for them; now they are loaded 8 contiguous k at a
#: time and reordered in registers (MXFP4 128x16 w8: 264 loop instructions, one fence and one wgmma wait
#: per K tile; INT4 218), and tried one and two tiles ahead. R21: 4-9% faster than R16's joined tile but
#: still 1.3x (INT4) to 2.1x (E2M1) slower than the shipped per-nibble dots (8192x8192 MXFP4 56.6 / 58.7
#: against 29.0), so the grid is back to the fused decoder on plain tiles.
SWAP_GRID = [(128, 8, 1.5, 0, 1, 1)]
#: What the checkpoint layout shipped before the word layout (its tuned entries), so both are timed as shipped.
OLD = {(e["weight"], e["n"], e["k"], e["m"]): e["config"] for e in json.loads(
    (Path(__file__).parent / "configs" / "fp4_checkpoint_layout_entries.json").read_text())["entries"]}


#: (BLOCK_N weight rows, BLOCK_M activation rows, BLOCK_K, warps, stages, split waves) of the many-row
#: wgmma kernel (w4_wgmma: the decoded words as the register A operand, activations by cp.async).
#: R13 (8192x8192 M=256): 64x256 tiles at 4 warps 86.5-88.6 us, 128x256 / 128x128 / 64x128 / 128x64
#: tiles 106-146 us; BF16 48.5, DEQUANT_MM 94-95. R14: a weight-by-weight decode from staged loads
#: (so Triton reads them back in the MMA's register layout) 1.5-3.2x slower than the word decode, and
#: DEQUANT_MM in 4-32 bands dequantized on a side stream while cuBLAS multiplies the previous band
#: slower than one pass on 8192x8192 and 7168x18432 (120-283 us against 94 on 8192x8192; no overlap
#: seen), even on 36864x7168 (353.7 against 359.0 at 4 bands): both removed.
WG_GRID = [(64, 256, 64, 4, 3, 1), (64, 256, 128, 4, 3, 1), (64, 256, 64, 4, 3, 0.5)]
#: The same kernel at M <= 32 (16-row activation tiles: wgmma's narrow N side), split-K to fill the SMs.
#: R13 (8192x8192 M=16): 30.6-43.6 us against the swap kernel's 26.8 (INT4) / 30.5 (MXFP4).
WG_FEW = [(128, 16, 128, 4, 3, 1.5), (64, 16, 128, 4, 3, 3)]


def wg_grid(n: int, k: int, m: int, sms: int, first: int = 0) -> list[tuple[str, dict]]:
    """The wgmma kernel's grid at M rows (its first `first` tiles only where given)."""
    out = []
    grid = WG_GRID if m >= 64 else WG_FEW
    for bn, bm, bk, nw, st, waves in grid[:first or len(grid)]:
        sp = fill_split(-(-n // bn) * -(-m // bm), k // bk, sms, waves)
        out.append((f"wg bn{bn} bm{bm} bk{bk} w{nw} st{st} s{sp}",
                    {"WG": 1, "BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "SPLIT_K": sp, "GROUP_M": 8,
                     "num_warps": nw, "num_stages": st}))
    if m >= 64:     # what the wgmma kernel replaces: dequantize the weight, then cuBLAS
        out.append(("dequant_mm", {"DEQUANT_MM": 1}))
    return out


def swap_grid(fmt: str, n: int, k: int, m: int, sms: int) -> list[tuple[str, dict]]:
    out = []
    for bn, nw, waves, join, pf, fused in SWAP_GRID:
        if fmt == "int4" and fused and not join:
            continue
        sp = fill_split(-(-n // bn) * -(-m // 16), k // 128, sms, waves)
        cfg = {"SWAP": 1, "BLOCK_M": 16, "BLOCK_N": bn, "BLOCK_K": 128, "SPLIT_K": sp,
               "DECODE": 3 if fmt == "int4" else (5 if fused else 4), "num_warps": nw, "num_stages": 1}
        if join:
            cfg["FULL_TILE"] = 1
            if fused:
                cfg["PERM"] = 1
        if pf > 1:
            cfg["PREFETCH"] = pf
        out.append((f"swap bn{bn} w{nw} s{sp}{' join' if join else ''}{' perm' if cfg.get('PERM') else ''}"
                    f"{' d5' if cfg['DECODE'] == 5 else ''}{' pf2' if pf > 1 else ''}", cfg))
    return out


def plan(fmt: str, n: int, k: int, ms: list[int], facts: dict, grid: bool,
         gemv_grid_fmts: tuple = ("mxfp4", "nvfp4"), swap_grid_ok: bool | None = None,
         wg_ok: bool = False, words_only: bool = False, wg_first: int = 0) -> list[tuple[int, str, bool, dict]]:
    """(m, label, word layout?, config) for one shape: the two layouts' defaults (the checkpoint
    layout's: its entry as shipped before the word layout, else its rules), then the grid."""
    from oracle_triton.formats import layout_for, words_layout
    from oracle_triton.launch import DenseGemm
    from oracle_triton.tuned import bucket

    out, old = [], {}
    for words in ((True,) if fmt == "int4" or words_only else (False, True)):      # INT4: GPTQ's words already
        lay = words_layout(fmt, n, k) if words and fmt != "int4" else layout_for(fmt, n, k, 128)
        one = torch.zeros(1, device=DEV)
        fake = DenseGemm(lay, n, k, one, one, None, None, None, mode=MODES[fmt], weight_format=fmt)
        fake.facts = facts
        for m in ms:
            cfg = fake.config_for(m, 0)
            if not words:
                cfg = OLD.get((fmt, n, k, bucket(m)), cfg)
            out.append((m, "words default" if words else "checkpoint layout default", words, cfg))
            swap_grid_on = grid if swap_grid_ok is None else swap_grid_ok
            if words and swap_grid_on and cfg.get("SWAP") and cfg.get("DECODE") == 4:    # the fused decoder on it
                out.append((m, "words default d5", True, {**cfg, "DECODE": 5}))
            if not words:
                old[m] = cfg
            elif grid and m in old and "SWAP" in old[m] and old[m] != cfg:     # the checkpoint layout's tuned tile on the words
                out.append((m, "words, checkpoint's config", True, {**old[m], "KN": 1}))
    if grid and 1 in ms and fmt in gemv_grid_fmts:
        out += [(1, label, True, {**cfg, "KN": 1}) for label, cfg in gemv_grid(n, k, facts["sms"])]
    kn = {} if fmt == "int4" else {"KN": 1}
    if 16 in ms and (grid if swap_grid_ok is None else swap_grid_ok):
        out += [(16, label, True, {**cfg, **kn}) for label, cfg in swap_grid(fmt, n, k, 16, facts["sms"])]
    if wg_ok:
        out += [(m, label, True, {**cfg, **kn}) for m in ms if m >= 16
                for label, cfg in wg_grid(n, k, m, facts["sms"], wg_first)]
    seen, unique = set(), []      # one timing per distinct launch (KN only names the layout)
    for m, label, words, cfg in out:
        key = (m, words, repr(sorted((a, b) for a, b in cfg.items() if a != "KN")))
        if key not in seen:
            seen.add(key)
            unique.append((m, label, words, cfg))
    return unique


def plan_for(fmt: str, name: str, args, facts: dict) -> list[tuple[int, str, bool, dict]]:
    n, k = SHAPES[name]
    return plan(fmt, n, k, args.ms, facts, not args.no_grid, tuple(args.gemv_grid), swap_ok(args, name),
                name in (args.wg_grid_shapes or ()), args.words_only, args.wg_first)


def swap_ok(args, name: str) -> bool | None:
    """Does this shape get the M = 16 swap grid: --swap-grid-shapes names it (even with --no-grid);
    without that option, as the grid (None)."""
    return None if args.swap_grid_shapes is None else name in args.swap_grid_shapes


def compile_worker(index: int, workers: int, args) -> None:
    """Launch every `workers`-th (format, M, layout, config) once on small weights so the timing
    process finds the kernels in Triton's cache (N and K are runtime values; every shape here is a
    multiple of 16, so a small one compiles the same specializations)."""
    import oracle_triton.linear as lin
    from oracle_triton.launch import device_facts

    facts = device_facts(torch.device(DEV))
    jobs = []
    for fmt in args.fmts:
        for name in args.shapes:
            jobs += [(fmt, m, words, cfg) for m, _, words, cfg in plan_for(fmt, name, args, facts)]
    seen, unique = set(), []
    for j in jobs:
        if repr(j) not in seen:
            seen.add(repr(j))
            unique.append(j)
    small = {}
    for fmt, m, words, cfg in unique[index::workers]:
        try:
            if (fmt, words) not in small:
                lin.WORD_LAYOUT = words or fmt == "int4"
                w = torch.randn(256, 4096, device=DEV, dtype=torch.bfloat16) * 0.05
                small[(fmt, words)] = build(fmt, 256, 4096, w, MODES[fmt], "bf16", {})[2][0]
            small[(fmt, words)](torch.randn(m, 4096, device=DEV, dtype=torch.bfloat16), 0, None, torch.bfloat16, cfg)
        except Exception as exc:  # noqa: BLE001 - the timing process reports it
            print(f"  compile worker: {fmt} M={m} words={words} {cfg}: {type(exc).__name__}: {str(exc)[:160]}",
                  flush=True)
    torch.cuda.synchronize()


def tinygemm(fmt: str, n: int, k: int, w: torch.Tensor) -> list:
    """torch's tinygemm INT4 (oracle-torch's peer kernel) on its own rotated copies, the INT4 M <= 32
    peer of issue 26's target; [] (said so) where it cannot run."""
    try:
        from bench_triton import dense_reference
        from oracle_torch.tinygemm import TorchTinyGemmInt4Linear

        _, tensors, layer, mode = dense_reference(f"{n}x{k}", fmt, n, k, w, MODES[fmt], "bf16", {})
        out = []
        for _ in range(copies(n * k // 2)):
            tg = TorchTinyGemmInt4Linear(layer, mode, None)
            tg.process_weights(**{kk: (v.clone() if isinstance(v, torch.Tensor) else v) for kk, v in tensors.items()})
            out.append(tg.forward)
        return out
    except Exception as exc:  # noqa: BLE001 - a peer that cannot run is skipped with a line
        print(f"  torch tinygemm skipped: {type(exc).__name__}: {str(exc)[:160]}", flush=True)
        return []


def sweep(name: str, fmt: str, args, bw: float, deadline: float) -> None:
    import oracle_triton.linear as lin

    n, k = SHAPES[name]
    if time.perf_counter() > deadline:      # no weights built for nothing (a kill then loses the JSON)
        print(f"  budget spent: {name} {fmt} not built", flush=True)
        return
    w = torch.randn(n, k, device=DEV, dtype=torch.bfloat16) * 0.05
    tiny = tinygemm(fmt, n, k, w) if fmt == "int4" else []
    sets = {}
    for words in ((True,) if fmt == "int4" or args.words_only else (False, True)):
        lin.WORD_LAYOUT = words
        t, em, gs, _, _, _ = build(fmt, n, k, w, MODES[fmt], "bf16", {})
        sets[words] = gs
    lin.WORD_LAYOUT = True
    assert gs[0].layout.pack == 8 and (fmt == "int4" or args.words_only or sets[False][0].layout.pack == 2), \
        "layouts not built"
    hbm = t.packed.nbytes() / bw * 1e6
    bf16 = [w] + [w.clone() for _ in range(copies(n * k * 2) - 1)]
    todo = plan_for(fmt, name, args, gs[0].facts)
    for m in args.ms:
        x = torch.randn(m, k, device=DEV, dtype=torch.bfloat16)
        ref = em.apply(x)
        reps = 20 if m <= 32 else 4
        bf = gtime([lambda ww=ww: x @ ww.t() for ww in bf16], reps)
        tg = gtime([lambda f=f: f(x) for f in tiny], reps) if tiny and m <= 32 else None
        if tg:
            ROWS.append(dict(shape=name, fmt=fmt, m=m, variant="tinygemm", words=False, config={}, us=tg,
                             err=rel(tiny[0](x), ref), bf16_us=bf, hbm_us=hbm))
        print(f"{name} {fmt} M={m}: bf16 {bf:.1f} us, hbm {hbm:.1f} us"
              + (f", torch tinygemm {tg:.1f} us (err {ROWS[-1]['err']:.1e})" if tg else ""), flush=True)
        best = None
        for mm, label, words, cfg in todo:
            if mm != m:
                continue
            if time.perf_counter() > deadline:
                print(f"  budget spent: {name} {fmt} M={m} {label} not run", flush=True)
                continue
            calls = [lambda g=g, cfg=cfg: g(x, 0, None, torch.bfloat16, cfg) for g in sets[words]]
            try:
                err = rel(calls[0](), ref)
                us = gtime(calls, reps)
            except Exception as exc:  # noqa: BLE001 - reported, never chosen
                print(f"  {name} {fmt} M={m} {label}: FAILED {type(exc).__name__}: {str(exc)[:200]}", flush=True)
                continue
            ok = err < OK
            ROWS.append(dict(shape=name, fmt=fmt, m=m, variant=label, words=words, config=cfg, us=us, err=err,
                             bf16_us=bf, hbm_us=hbm))
            print(f"  {name:11} {fmt:6} M={m:<3} {label:34} {us:8.1f} us  xBF16 {bf / us:5.2f}  "
                  f"xHBM {us / hbm:5.2f}  err {err:.1e}{'' if ok else '  DISAGREES'}  {cfg}", flush=True)
            if ok and words and (best is None or us < best[1]):
                best = (label, us, cfg)
        if best:
            print(f"BEST {name} {fmt} M={m} (word layout): {best[0]} {best[1]:.1f} us  xBF16 {bf / best[1]:.2f}  "
                  f"{best[2]}", flush=True)
    del sets, bf16, gs, t, em, w
    torch.cuda.empty_cache()


def table_entries(rows: list[dict]) -> list[dict]:
    """Tuned-table entries: per shape, format and M, the fastest word-layout variant that agreed with
    the reference (KN 1 on E2M1: measured on the word layout; it replaces the checkpoint layout's
    entry of the same key, which no longer serves a W4A16 E2M1 layer)."""
    from oracle_triton.tuned import bucket

    best: dict[tuple, dict] = {}
    default = {}
    for r in rows:
        if not r["words"] or r["err"] >= OK:
            continue
        key = (r["shape"], r["fmt"], r["m"])
        if r["variant"] == "words default":
            default[key] = r["us"]
        if key not in best or r["us"] < best[key]["us"]:
            best[key] = r
    out = []
    for key, r in sorted(best.items()):
        n, k = SHAPES[r["shape"]]
        cfg = dict(r["config"])
        if r["fmt"] != "int4":
            cfg["KN"] = 1
        out.append({"kind": "dense", "mode": MODES[r["fmt"]], "weight": r["fmt"], "n": n, "k": k,
                    "m": bucket(r["m"]), "config": cfg, "us": round(r["us"], 2),
                    "default_us": round(default[key], 2) if key in default else None})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fmts", nargs="+", default=["mxfp4", "nvfp4"], choices=list(MODES))
    ap.add_argument("--ms", nargs="+", type=int, default=[1, 16, 256])
    ap.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    ap.add_argument("--json")
    ap.add_argument("--budget-s", type=float, default=60.0, help="stop starting variants after this")
    ap.add_argument("--precompile", type=int, default=0, help="compile the variants in this many processes first")
    ap.add_argument("--compile-timeout-s", type=float, default=40.0)
    ap.add_argument("--no-grid", action="store_true", help="the two defaults only")
    ap.add_argument("--gemv-grid", nargs="*", default=["mxfp4", "nvfp4"], help="formats with the M = 1 GEMV grid")
    ap.add_argument("--swap-grid-shapes", nargs="*", choices=list(SHAPES),
                    help="shapes with the M = 16 swap grid (default: all, unless --no-grid)")
    ap.add_argument("--wg-grid-shapes", nargs="*", choices=list(SHAPES),
                    help="shapes with the wgmma grid (w4_wgmma) at every M >= 16")
    ap.add_argument("--wg-first", type=int, default=0, help="only the first N tiles of the wgmma grid")
    ap.add_argument("--words-only", action="store_true", help="E2M1: the word layout only (no checkpoint layout)")
    ap.add_argument("--compile-worker", help=argparse.SUPPRESS)
    ap.add_argument("--write-table", metavar="PATH", help="merge the winners into this tuned-config table")
    ap.add_argument("--from-json", metavar="FILE", help="with --write-table: the rows of an earlier run's --json")
    ap.add_argument("--device-name", help="with --from-json: the device measured (default: the one the file "
                    "names, else the NVIDIA H200)")
    args = ap.parse_args(argv)
    if args.from_json:
        table_from_json(args.from_json, args.write_table, args.device_name, table_entries)
        return 0
    if args.compile_worker:
        i, p = map(int, args.compile_worker.split("/"))
        compile_worker(i, p, args)
        return 0
    if not start("sweep_fp4_words"):
        return 2
    if args.precompile:
        t0 = time.perf_counter()
        fwd = ["--fmts", *args.fmts, "--ms", *map(str, args.ms), "--shapes", *args.shapes, "--gemv-grid", *args.gemv_grid] + \
            (["--no-grid"] if args.no_grid else []) + \
            (["--swap-grid-shapes", *args.swap_grid_shapes] if args.swap_grid_shapes is not None else []) + \
            (["--wg-grid-shapes", *args.wg_grid_shapes] if args.wg_grid_shapes else []) + \
            (["--words-only"] if args.words_only else []) + ["--wg-first", str(args.wg_first)]
        procs = [subprocess.Popen([sys.executable, __file__, *fwd, "--compile-worker", f"{i}/{args.precompile}"])
                 for i in range(args.precompile)]
        for p in procs:
            try:
                p.wait(timeout=max(1.0, args.compile_timeout_s - (time.perf_counter() - t0)))
            except subprocess.TimeoutExpired:
                p.kill()
        print(f"precompiled with {args.precompile} workers in {time.perf_counter() - t0:.1f} s", flush=True)
    deadline = time.perf_counter() + args.budget_s
    bw = copy_bandwidth()
    print(f"copy bandwidth {bw / 1e12:.2f} TB/s", flush=True)
    try:
        for name in args.shapes:
            for fmt in args.fmts:
                sweep(name, fmt, args, bw, deadline)
    finally:
        write_rows(args.json, bw, ROWS)
    write_winners(args.write_table, ROWS, table_entries)
    return 0


if __name__ == "__main__":
    sys.exit(main())
