"""Compile oracle-triton's kernels for sm_90 on a machine without a GPU (Triton's own ptxas),
as the JIT would specialize a real launch (model shapes: K a multiple of the K tile), and
report shared memory, registers, spills and the main loop's instructions, barriers and global
loads (the SASS, by cuobjdump: a layout change through shared memory costs a barrier per step).

The interpreter (the CPU tests) runs kernels as Python: what only the compiler checks (return
types across constexpr branches, float8 dot operands, layouts of interleave/trans, register
pressure of a tile configuration) shows up here instead of on the GPU.

    python plugins/triton/tests/sm90_compile.py [small|swap|words|moeswap|rega]   # one line per kernel; small: the
                                        # one-row paths, swap: the few-row 4-bit kernel, moeswap: the MoE's
"""
from __future__ import annotations

import glob
import os
import re
import subprocess
import sys
import tempfile

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

import oracle_triton.gemm as gemm
import oracle_triton.gemv as gv
import oracle_triton.moe_gemv as mg
import oracle_triton.moe_kernels as mk

TARGET = GPUTarget("cuda", 90, 32)
NOT_16 = {"M", "T", "E", "TOPK", "limit", "alpha", "beta", "lbeta"}     # ints a real launch need not align
SCALE_T = {0: "*fp32", 1: "*u8", 2: "*u8", 3: "*fp16"}


def _source(fn, ptr_types: dict, consts: dict, not16: tuple = ()) -> ASTSource:
    consts = {**{p.name: p.default for p in fn.params if p.is_constexpr and p.has_default}, **consts}
    sig = {}
    for name in fn.arg_names:
        if name in consts:
            sig[name] = "constexpr"
        elif name in ptr_types:
            sig[name] = ptr_types[name]
        elif name.endswith("_ptr"):
            sig[name] = "*fp32"
        else:
            sig[name] = "fp32" if name in ("limit", "alpha", "beta", "lbeta") else "i32"
    attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(fn.arg_names)
             if sig[n] not in ("constexpr", "fp32") and n not in NOT_16 and n not in not16}
    return ASTSource(fn, sig, constexprs=consts, attrs=attrs)


def _ones(elem: int) -> dict:
    """Strides that are 1 in real launches (the JIT makes them the constant 1)."""
    return {"stride_wn": 1, "stride_sn": 1} if elem == 3 else {"stride_wk": 1, "stride_sk": 1}


def compile_kernel(fn, ptr_types: dict, consts: dict, warps: int, stages: int, which_loop: str = "longest",
                   not16: tuple = (), **options) -> dict:
    """which_loop: the loop main_loop reports ("longest", or "mma": the innermost one with a wgmma); not16: more
    int arguments a real launch need not give as multiples of 16; options: more compile options (maxnreg: a
    warp-specialized kernel's register budget a thread)."""
    src = _source(fn, ptr_types, consts, not16)
    if which_loop == "mma":       # a Gluon kernel (w4_rega): the same signature, Gluon's AST source
        from triton.experimental.gluon._runtime import GluonASTSource

        src = GluonASTSource(fn, src.signature, constexprs=src.constants, attrs=src.attrs)
    k = triton.compile(src, target=TARGET, options={"num_warps": warps, "num_stages": stages, **options})
    ptxas = glob.glob(os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas"))
    regs = spills = loop = None
    if ptxas:
        with tempfile.TemporaryDirectory() as tmp:
            ptx_file, cubin = os.path.join(tmp, "k.ptx"), os.path.join(tmp, "k.cubin")
            with open(ptx_file, "w") as f:
                f.write(k.asm["ptx"])
            out = subprocess.run([ptxas[0], "-arch=sm_90a", "-v", ptx_file, "-o", cubin], capture_output=True,
                                 text=True)
            log = out.stdout + out.stderr
            regs = int(re.findall(r"Used (\d+) registers", log)[0])
            spills = int(re.findall(r"(\d+) bytes spill stores", log)[0])
            loop = main_loop(cubin, os.path.dirname(ptxas[0]), which_loop)
    ptx = k.asm["ptx"]
    return {"shared": k.metadata.shared, "regs": regs, "spills": spills,
            "fp8_mma": "e4m3.e4m3" in ptx, "cp_async": "cp.async" in ptx, "loop": loop}


def main_loop(cubin: str, bindir: str, which: str = "longest") -> dict | None:
    """The longest backward-branch loop of the kernel's SASS (cuobjdump beside Triton's ptxas): its
    instruction count and how many are barriers (BAR: each a layout change through shared memory or
    a split-K sync) and global loads; None without cuobjdump. What the GPU rounds could not profile
    can be compared here: the E2M1 GEMV's K loop has 18 barriers, the INT4 GEMV's 8."""
    tool = os.path.join(bindir, "cuobjdump")
    if not os.path.exists(tool):
        return None
    sass = subprocess.run([tool, "-sass", cubin], capture_output=True, text=True).stdout
    ins = [(int(a, 16), op) for a, op in re.findall(r"/\*([0-9a-f]{4,})\*/\s+([^;]*);", sass)]
    loops = [(int(t, 16), a) for a, op in ins for t in re.findall(r"\bBRA\s+(?:`?\(?\.L_x_\d+\)?\s*)?0x([0-9a-f]+)", op)
             if int(t, 16) < a]
    if not loops:
        return None
    lo, hi = max(loops, key=lambda b: b[1] - b[0])
    if which == "mma":      # the innermost loop issuing a wgmma (a Gluon kernel's K loop inside its chunk loop)
        mma = [(l0, h0) for l0, h0 in loops if any(l0 <= a <= h0 and "HGMMA" in op for a, op in ins)]
        lo, hi = min(mma, key=lambda b: b[1] - b[0]) if mma else (lo, hi)
    body = [re.sub(r"^@!?U?P\w+\s+", "", op).split()[0] for a, op in ins if lo <= a <= hi]
    sizes = sorted((sum(1 for a, _ in ins if l0 <= a <= h0) for l0, h0 in loops), reverse=True)
    return {"instructions": len(body), "barriers": sum(o.startswith("BAR") for o in body),
            "global_loads": sum(o.startswith("LDG") for o in body), "loops": sizes,
            "wgmma": sum(o.startswith("HGMMA") for o in body),
            "mma_waits": sum(o.startswith("WARPGROUP.DEPBAR") for o in body),
            "shared_ops": sum(o.startswith(("STS", "LDS", "LDSM")) for o in body)}


def dense(elem, pack, group, cfg, *, codes=0, scale_rows=1, zero=False, coop_k=0):
    """coop_k (per-token codes): the rows quantized by the programs (COOP, chunks of coop_k); cfg PROMO 1 (codes):
    the written-out float8 promotion; FASTACC 1 (codes): none."""
    fp8 = codes > 0
    consts = dict(ELEM=elem, PACK=pack, GROUP=group, SCALE_ROWS=scale_rows, HAS_ZERO=zero, EXACT_W=fp8,
                  HAS_BIAS=True, SPLIT_K=cfg.get("SPLIT_K", 1), BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"],
                  BLOCK_K=cfg["BLOCK_K"], HW_FP8=True, DOT_F32=False, OUT_F16=False, A_CODES=codes, FP8_DOT=fp8,
                  FULL_TILE=int(cfg.get("FULL_TILE", 0)), GROUP_M=cfg.get("GROUP_M", 1),
                  UNIFORM_WS=fp8 and scale_rows % cfg["BLOCK_N"] == 0, EVEN_K=True, **_ones(elem),
                  **({"COOP": True, "COOP_K": coop_k, "COOP_SPIN": True} if coop_k else {}),
                  **({"PROMO": True} if fp8 and cfg.get("PROMO") else {}),
                  **({"FASTACC": True} if fp8 and cfg.get("FASTACC") else {}))
    ptrs = {"x_ptr": "*fp8e4nv" if fp8 else "*bf16", "w_ptr": "*fp8e4nv" if fp8 else ("*i32" if elem == 3 else "*u8"),
            "s_ptr": SCALE_T[elem], "z_ptr": "*i32", "y_ptr": "*bf16", "b_ptr": "*bf16", "cnt_ptr": "*i32",
            "xin_ptr": "*bf16", "sync_ptr": "*i32"}
    return compile_kernel(gemm.wgemm_kernel, ptrs, consts, cfg["num_warps"], cfg["num_stages"])


def moe(elem, pack, group, cfg, *, stage, gated=True, codes=0, scale_rows=1):
    fp8 = codes > 0
    gated = gated and stage == 1
    bn = cfg.get("BLOCK_N1", cfg["BLOCK_N"]) if gated else cfg["BLOCK_N"]
    consts = dict(STAGE=stage, ACTFN=0, GATED=gated, INTERLEAVED=False, HAS_LIMIT=False, A_BY_PAIR=stage == 2,
                  WEIGHT_OUT=True, ELEM=elem, PACK=pack, GROUP=group, SCALE_ROWS=scale_rows, HAS_ZERO=False,
                  EXACT_W=fp8, HAS_BIAS=False, BLOCK_M=cfg["BLOCK_M"], BLOCK_N=bn, BLOCK_K=cfg["BLOCK_K"],
                  HW_FP8=True, DOT_F32=False, OUT_F16=False, A_CODES=codes, FP8_DOT=fp8,
                  FULL_TILE=bool(cfg.get("FULL_TILE", 0)), FUSE_GU=bool(cfg.get("FUSE_GU", 0)),
                  UNIFORM_WS=fp8 and not cfg.get("FUSE_GU", 0) and scale_rows % bn == 0, EVEN_K=True,
                  SWAP_AB=fp8 and bool(cfg.get("SWAP_AB", 0) & stage), **_ones(elem))
    ptrs = {"a_ptr": "*fp8e4nv" if fp8 else "*bf16", "w_ptr": "*fp8e4nv" if fp8 else ("*i32" if elem == 3 else "*u8"),
            "s_ptr": SCALE_T[elem], "z_ptr": "*i32", "sorted_ptr": "*i32", "bexp_ptr": "*i32",
            "out_ptr": "*bf16" if stage == 1 else "*fp32", "b_ptr": "*bf16"}
    return compile_kernel(mk.moe_gemm_kernel, ptrs, consts, cfg["num_warps"], cfg["num_stages"])


def moe_persist(cfg: dict, stages: int = 4):
    """moe_persist.moe_pairs_persistent_kernel as TritonMoE.apply_persistent launches it (1x128 groups, block
    scales, gated FC1, both GEMMs on SWAP_AB tiles)."""
    import oracle_triton.moe_persist as mp

    ptrs = {"x_ptr": "*bf16", "xq_ptr": "*fp8e4nv", "xqc_ptr": "*u8", "w1_ptr": "*fp8e4nv", "b1_ptr": "*bf16",
            "inter_ptr": "*bf16", "iq_ptr": "*fp8e4nv", "iqc_ptr": "*u8", "w2_ptr": "*fp8e4nv", "b2_ptr": "*bf16",
            "out_ptr": "*bf16", "ids_ptr": "*i32", "last_cnt_ptr": "*i32", "sum_cnt_ptr": "*i32", "ready_ptr": "*i32",
            "work_ptr": "*i32", "done_ptr": "*i32"}
    consts = dict(ACTFN=0, GATED=True, INTERLEAVED=False, HAS_LIMIT=False, GROUP1=128, GROUP2=128, SCALE_ROWS=128,
                  HAS_BIAS1=False, HAS_BIAS2=False, BLOCK_N1=cfg["BLOCK_N"], BLOCK_N2=cfg["BLOCK_N2"], BLOCK_K=128,
                  HW_FP8=True, DOT_F32=False, OUT_F16=False, FP8_DOT=True, UNIFORM1=True, UNIFORM2=True, EVEN_K1=True,
                  EVEN_K2=True, K_GROUPS=64, N_GROUPS=16, SWAP1=True, SWAP2=True, PF_HEAD=0, SPIN_ASM=True)
    return compile_kernel(mp.moe_pairs_persistent_kernel, ptrs, consts, cfg["num_warps"], stages)


def act_codes(act: int, one_tile_k: int = 0):
    from oracle_triton.launch import TOKEN_K, TOKEN_ROWS, TOKEN_WARPS

    bm, bk = (TOKEN_ROWS, TOKEN_K) if act == 2 else (16, 128)
    warps = TOKEN_WARPS if act == 2 else 4
    if one_tile_k:
        bm, bk, warps = 1, one_tile_k, 8 if one_tile_k <= 8192 else 16
    consts = dict(ACT=act, BLOCK_M=bm, BLOCK_K=bk, EXACT_BF16=False, CODES=True, ONE_TILE=bool(one_tile_k))
    return compile_kernel(gemm.act_qdq_kernel, {"x_ptr": "*bf16", "out_ptr": "*u8", "scales_ptr": "*fp32"},
                          consts, warps, 2)


def default_cases():
    """The shipped large-M configurations (launch.dense_config, moe.moe_config) of each path."""
    from oracle_triton.launch import dense_config
    from oracle_triton.moe import moe_config

    d8, d4, d_int4 = (dense_config(4096, 8192, 8192, 132, pack) for pack in (1, 2, 8))
    m8, m4 = moe_config(4096, 8, 128, 1), moe_config(4096, 8, 128, 2)
    mid4 = moe_config(256, 4, 32, 2)
    swap8 = {"BLOCK_M": 16, "BLOCK_N": 128, "BLOCK_N1": 64, "BLOCK_K": 128, "num_warps": 4, "num_stages": 4,
             "SWAP_AB": 3}                  # Qwen3-30B's M=16 tuned entry
    return {
        "act codes per group": lambda: act_codes(1),
        "act codes per token": lambda: act_codes(2),
        "dense W8A8 fp8_block": lambda: dense(0, 1, 128, d8, codes=1, scale_rows=128),
        "dense W4A16 mxfp4": lambda: dense(1, 2, 32, d4),
        "dense W4A16 int4 zero points": lambda: dense(3, 8, 128, d_int4, zero=True),
        "moe W8A8 fp8_block FC1 (gated)": lambda: moe(0, 1, 128, m8, stage=1, codes=1, scale_rows=128),
        "moe W8A8 fp8_block FC2": lambda: moe(0, 1, 128, m8, stage=2, codes=1, scale_rows=128),
        "moe W4A16 mxfp4 FC1 (gated)": lambda: moe(1, 2, 32, m4, stage=1),
        "moe W4A16 nvfp4 FC2": lambda: moe(2, 2, 16, m4, stage=2),
        "moe W4A16 mxfp4 FC1, 64-row tiles": lambda: moe(1, 2, 32, mid4, stage=1),
        "moe W8A8 fp8_block FC1 SWAP_AB (16-row tiles, 4 warps)": lambda: moe(0, 1, 128, swap8, stage=1, codes=1,
                                                                          scale_rows=128),
        "moe W8A8 fp8_block FC2 SWAP_AB (16x128 tiles, 4 warps)": lambda: moe(0, 1, 128, swap8, stage=2, codes=1,
                                                                           scale_rows=128),
        "moe W8A8 fp8_block persistent FC1 + FC2 (PERSIST, DeepSeek-R1 tiles, 4 warps)": lambda: moe_persist(
            {"BLOCK_N": 64, "BLOCK_N2": 128, "num_warps": 4}),
    }


def _small_ptrs(elem: int) -> dict:
    return {"x_ptr": "*bf16", "a_ptr": "*bf16", "w_ptr": "*i32" if elem == 3 else "*u8", "s_ptr": SCALE_T[elem],
            "z_ptr": "*i32", "y_ptr": "*bf16", "out_ptr": "*bf16", "b_ptr": "*bf16", "cnt_ptr": "*i32",
            "ids_ptr": "*i32"}


def gemv(elem, group, cfg, *, act=0, scale_rows=1, zero=False):
    consts = dict(ELEM=elem, GROUP=group, SCALE_ROWS=scale_rows, HAS_ZERO=zero, HAS_BIAS=True, ACT=act,
                  SPLIT_K=cfg["SPLIT_K"], BLOCK_N=cfg["BLOCK_N"], BLOCK_K=cfg["BLOCK_K"], HW_FP8=True,
                  DECODE=cfg["DECODE"], EXACT_BF16=False, OUT_F16=False, **_ones(elem))
    return compile_kernel(gv.gemv_kernel, _small_ptrs(elem), consts, cfg["num_warps"], cfg["num_stages"])


def moe_direct(elem, group, cfg, *, stage, act=0, scale_rows=1):
    """moe_gemv's kernels as TritonMoE.apply_direct launches them: moe_up_split_kernel where the config
    has SPLIT_K (else moe_up_kernel), the down kernel with its own tile (BLOCK_N2/BLOCK_K2/WARPS2)."""
    down = stage == 2
    bn = cfg.get("BLOCK_N2", cfg["BLOCK_N"]) if down else cfg["BLOCK_N"]
    bk = cfg.get("BLOCK_K2", cfg["BLOCK_K"]) if down else cfg["BLOCK_K"]
    warps = cfg.get("WARPS2", cfg["num_warps"]) if down else cfg["num_warps"]
    hx = int(cfg.get("HX", 0)) if cfg.get("XW") and "SPLIT_K" in cfg and elem in (1, 2) and act == 0 else 0
    if hx == 2 and group != 32:
        hx = 1
    common = dict(ELEM=elem, GROUP=group, SCALE_ROWS=scale_rows, HAS_ZERO=False, HAS_BIAS=True, ACT=act,
                  BLOCK_N=bn, BLOCK_K=bk, HW_FP8=True, DECODE=cfg["DECODE"], EXACT_BF16=False, OUT_F16=False,
                  XW=bool(cfg.get("XW")) and elem in (1, 2) and act == 0, HX=hx,
                  TAIL=bool(hx) and int(cfg.get("TAIL", 1)) in ((1, 2) if down else (1,)), **_ones(elem))
    guard = {"GUARD": bool(cfg.get("GUARD", 1))} if hx else {}
    if not down:
        consts = dict(ACTFN=3, GATED=True, INTERLEAVED=True, HAS_LIMIT=True, A_BY_PAIR=False, **common)
        if "SPLIT_K" in cfg:
            return compile_kernel(mg.moe_up_split_kernel, _small_ptrs(elem), dict(consts, SPLIT_K=cfg["SPLIT_K"],
                                                                                  PAIRS=bool(int(cfg.get("PAIRS", 0)) & 1),
                                                                                  **guard),
                                  warps, cfg["num_stages"])
        return compile_kernel(mg.moe_up_kernel, _small_ptrs(elem), consts, warps, cfg["num_stages"])
    consts = dict(WEIGHT_OUT=True, SPLIT=8, PAIRS=bool(int(cfg.get("PAIRS", 0)) & 2), **common, **guard)
    return compile_kernel(mg.moe_down_kernel, _small_ptrs(elem), consts, warps, cfg["num_stages"])


def moe_w4a4(stage: int, bn: int, bk: int, warps: int):
    """oracle_triton.moe_w4a4's one-row NVFP4 W4A4 kernels (XQ: the PRMT byte-table decoder) and the
    one-program input rounding (stage 0)."""
    import oracle_triton.moe_w4a4 as mw

    if stage == 0:
        return compile_kernel(mw.nvfp4_round_kernel, {"x_ptr": "*bf16", "out_ptr": "*bf16", "xs_ptr": "*fp32"},
                              dict(BLOCK=mw.ROUND_BLOCK, EXACT_BF16=False), mw.ROUND_WARPS, 1)
    ptrs = {**_small_ptrs(2), "g_ptr": "*fp32", "topw_ptr": "*fp32", "part_ptr": "*fp32"}
    common = dict(HAS_BIAS=False, BLOCK_N=bn, BLOCK_K=bk, PTX=True, EXACT_BF16=False, OUT_F16=False)
    if stage == 1:
        return compile_kernel(mw.moe_w4a4_up_kernel, ptrs, dict(common, ACTFN=0, GATED=True, INTERLEAVED=False,
                                                               HAS_LIMIT=False, A_BY_PAIR=False), warps, 3)
    return compile_kernel(mw.moe_w4a4_down_kernel, ptrs, dict(common, WEIGHT_OUT=True, SPLIT=8), warps, 3)


def swap(elem, group, cfg, *, zero=False, f16=False):
    consts = dict(ELEM=elem, HAS_ZERO=zero, HAS_BIAS=True, SPLIT_K=cfg["SPLIT_K"], GROUP=group,
                  BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"], BLOCK_K=group if elem == 3 else cfg["BLOCK_K"],
                  DECODE=cfg["DECODE"], DOT_F32=False, OUT_F16=f16, JOIN=bool(cfg.get("FULL_TILE", 0)),
                  PREFETCH=cfg.get("PREFETCH", 1), **_ones(elem))
    ptrs = {**_small_ptrs(elem), **({"x_ptr": "*fp16", "y_ptr": "*fp16", "b_ptr": "*fp16"} if f16 else {})}
    return compile_kernel(gemm.w4_swap_kernel, ptrs, consts, cfg["num_warps"], cfg["num_stages"])


def moe_swap(elem, group, cfg, *, stage, aligned=True, zero=False, even_k=True):
    """moe_gemv.moe_swap_kernel with WORDS (gemm.w4_swap_tiles) as TritonMoE.apply_swap launches it:
    FC1 gated interleaved (swigluoai, BLOCK_N1 columns: twice the weight rows) or FC2 with the top-k sum."""
    fc1 = stage == 1
    consts = dict(STAGE=stage, ACTFN=3, GATED=fc1, INTERLEAVED=fc1, HAS_LIMIT=fc1, A_BY_PAIR=False, WEIGHT_OUT=True,
                  ELEM=elem, PACK=8 if elem == 3 else 2, GROUP=group, HAS_ZERO=zero, HAS_BIAS=True, SCALED_DOT=False,
                  ALIGNED=aligned, FUSE_SUM=not aligned and not fc1, BLOCK_M=cfg["BLOCK_M"],
                  BLOCK_N=cfg.get("BLOCK_N1", cfg["BLOCK_N"]) if fc1 else cfg["BLOCK_N"], BLOCK_K=cfg["BLOCK_K"],
                  EXACT_BF16=False, OUT_F16=False, EVEN_K=even_k, WORDS=True, DECODE=3 if elem == 3 else 4,
                  SPLIT_K=cfg.get("SPLIT_K", 1), JOIN=bool(cfg.get("JOIN", 0)), PREFETCH=cfg.get("PREFETCH", 0),
                  TABLE=bool(cfg.get("TABLE", 0)), **_ones(elem))
    ptrs = {**_small_ptrs(elem), "topw_ptr": "*fp32", "out_ptr": "*bf16" if fc1 else "*fp32", "sum_ptr": "*bf16",
            "sorted_ptr": "*i32", "bexp_ptr": "*i32", "kcnt_ptr": "*i32", "part_ptr": "*fp32"}
    return compile_kernel(mg.moe_swap_kernel, ptrs, consts, cfg["num_warps"], cfg["num_stages"])


def moe_swap_cases():
    """The fused MoE's WORDS swap path (TritonMoE.apply_swap) at the tiles the sweeps try."""
    def c(bn, bn1, warps=4, split=1):
        return {"BLOCK_M": 16, "BLOCK_N": bn, "BLOCK_N1": bn1, "BLOCK_K": 128, "SPLIT_K": split,
                "num_warps": warps, "num_stages": 1}
    return {
        "moe swap words mxfp4 FC1 aligned n1=32 (gpt-oss K=2880)": lambda: moe_swap(1, 32, c(64, 32), stage=1,
                                                                                   even_k=False),
        "moe swap words mxfp4 FC2 aligned n=64": lambda: moe_swap(1, 32, c(64, 32), stage=2, even_k=False),
        "moe swap words mxfp4 FC1 aligned n1=64": lambda: moe_swap(1, 32, c(64, 64), stage=1, even_k=False),
        "moe swap words mxfp4 FC2 aligned n=128 w8": lambda: moe_swap(1, 32, c(128, 64, 8), stage=2, even_k=False),
        "moe swap words mxfp4 FC2 split 4, top-k sum": lambda: moe_swap(1, 32, c(64, 32, split=4), stage=2,
                                                                        aligned=False, even_k=False),
        "moe swap words nvfp4 FC1 aligned n1=32": lambda: moe_swap(2, 16, c(64, 32), stage=1),
        "moe swap words nvfp4 FC1 aligned n1=32 JOIN TABLE (the default)": lambda: moe_swap(
            2, 16, dict(c(64, 32), JOIN=1, TABLE=1), stage=1),
        "moe swap words nvfp4 FC2 aligned n=64 JOIN TABLE (the default)": lambda: moe_swap(
            2, 16, dict(c(64, 32), JOIN=1, TABLE=1), stage=2),
        "moe swap words int4 zero points FC1 aligned n1=32": lambda: moe_swap(3, 128, c(64, 32), stage=1, zero=True),
        "moe swap words mxfp4 FC1 aligned n1=32 JOIN prefetch 2": lambda: moe_swap(
            1, 32, dict(c(64, 32), JOIN=1, PREFETCH=2), stage=1, even_k=False),
        "moe swap words mxfp4 FC2 aligned n=64 JOIN prefetch 2": lambda: moe_swap(
            1, 32, dict(c(64, 32), JOIN=1, PREFETCH=2), stage=2, even_k=False),
        "moe swap words int4 FC1 aligned n1=32 JOIN": lambda: moe_swap(3, 128, dict(c(64, 32), JOIN=1), stage=1,
                                                                      zero=True),
    }


def swap_cases():
    """gemm.w4_swap_kernel (few-row 4-bit, weights as the MMA's A operand): the PTX INT4 decoder in
    both layer dtypes, the portable one, E2M1."""
    def c(bm, bn, warps, decode, split=2):
        return {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": 128, "SPLIT_K": split, "DECODE": decode,
                "num_warps": warps, "num_stages": 1}
    return {
        "swap int4 bf16 PTX bm16 bn128": lambda: swap(3, 128, c(16, 128, 4, 3)),
        "swap int4 fp16 PTX zero points bm16 bn128": lambda: swap(3, 128, c(16, 128, 4, 3), zero=True, f16=True),
        "swap int4 bf16 portable bm16 bn128": lambda: swap(3, 128, c(16, 128, 4, 0)),
        "swap int4 bf16 PTX bm32 bn256 w8": lambda: swap(3, 128, c(32, 256, 8, 3)),
        "swap int4 bf16 PTX bm64 bn128 w8": lambda: swap(3, 128, c(64, 128, 8, 3)),
        "swap mxfp4 bm16 bn128": lambda: swap(1, 32, c(16, 128, 4, 0)),
        "swap nvfp4 bm16 bn128": lambda: swap(2, 16, c(16, 128, 4, 0)),
        "swap fp8 W8A8 per token bm16 bn128": lambda: fp8_swap(c(16, 128, 4, 0)),
        "dequant int4 zero points": lambda: dequant(3, 8, 128, zero=True),
        "dequant mxfp4": lambda: dequant(1, 2, 32),
        "dequant fp8_block": lambda: dequant(0, 1, 128, scale_rows=128),
        "swap fp8 W8A8 per token bm64 bn128 w8": lambda: fp8_swap(c(64, 128, 8, 0)),
    }


def dequant(elem, pack, group, *, zero=False, scale_rows=1, words=False):
    consts = dict(ELEM=elem, PACK=pack, GROUP=group, SCALE_ROWS=scale_rows, HAS_ZERO=zero, HW_FP8=True, BLOCK_N=64,
                  BLOCK_K=128, EXACT_BF16=False, OUT_F16=False, WORDS=words, **_ones(elem))
    ptrs = {"w_ptr": "*i32" if elem == 3 else "*u8", "s_ptr": SCALE_T[elem], "z_ptr": "*i32", "out_ptr": "*bf16"}
    return compile_kernel(gemm.dequant_kernel, ptrs, consts, 4, 1)


def fp8_swap(cfg, act=2, quant_in=0, coop_k=0, amax_k=8192, **extra):
    """coop_k: the rows quantized by the programs (COOP, chunks of coop_k); quant_in 1: one row rounded
    inside, 2: each program rounds its own rows (amax chunks of amax_k)."""
    consts = dict(A_CODES=act, HAS_BIAS=True, SPLIT_K=cfg["SPLIT_K"], BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"],
                  BLOCK_K=cfg["BLOCK_K"], HW_FP8=True, FP8_DOT=True, DOT_F32=False, EVEN_K=True, stride_sn=1,
                  QUANT_IN=quant_in, AMAX_K=amax_k, **({"COOP": True, "COOP_K": coop_k, "COOP_SPIN": True} if coop_k else {}),
                  **extra)
    ptrs = {"x_ptr": "*bf16" if quant_in else "*fp8e4nv", "w_ptr": "*fp8e4nv", "y_ptr": "*bf16", "b_ptr": "*bf16",
            "cnt_ptr": "*i32", "xin_ptr": "*bf16", "sync_ptr": "*i32"}
    return compile_kernel(gemm.fp8_swap_kernel, ptrs, consts, cfg["num_warps"], 4)


def fp4_rows(elem, cfg):
    """fp4_gemv.fp4_rows_kernel as a tuned entry launches it (K split into chunks, PTX decoder)."""
    from oracle_triton.fp4_gemv import fp4_rows_kernel

    consts = dict(ELEM=elem, HAS_BIAS=True, SPLIT=True, ROWS=cfg["ROWS"], BLOCK_N=cfg["BLOCK_N"],
                  BLOCK_K=cfg["BLOCK_K"], OUT_F16=False, PTX=True, EXACT_BF16=False, EVEN_K=True)
    ptrs = {"x_ptr": "*bf16", "w_ptr": "*u8", "s_ptr": "*u8", "g_ptr": "*fp32", "b_ptr": "*bf16", "y_ptr": "*bf16",
            "part_ptr": "*fp32", "cnt_ptr": "*i32"}
    return compile_kernel(fp4_rows_kernel, ptrs, consts, cfg["num_warps"], cfg["num_stages"])


def small_batch_cases():
    """The shipped one-row configurations (launch.gemv_config, moe.moe_gemv_config), PTX word decoders
    included (what the interpreter cannot run)."""
    from oracle_triton.launch import gemv_config
    from oracle_triton.moe import moe_gemv_config

    def g(elem, group, words=True):
        return gemv_config(8192, 8192, 132, elem, group, words=words)
    rows = {"ROWS": 256, "BLOCK_N": 32, "BLOCK_K": 512, "num_warps": 4, "num_stages": 1}   # the shipped entry's
    return {
        "gemv W8A16 fp8_block (words)": lambda: gemv(0, 128, g(0, 128), scale_rows=128),
        "gemv W8A8 fp8_block": lambda: gemv(0, 128, g(0, 128, False), act=1, scale_rows=128),
        "gemv W4A16 mxfp4 (words)": lambda: gemv(1, 32, g(1, 32)),
        "gemv W4A16 nvfp4 (words)": lambda: gemv(2, 16, g(2, 16)),
        "gemv W4A4 nvfp4": lambda: gemv(2, 16, g(2, 16, False), act=4),
        "gemv W4A16 int4 zero points (words)": lambda: gemv(3, 128, g(3, 128), zero=True),
        "direct MoE FC1 mxfp4 swigluoai (words)": lambda: moe_direct(1, 32, moe_gemv_config(1, 1, 32, True), stage=1),
        "direct MoE FC2 mxfp4 (words)": lambda: moe_direct(1, 32, moe_gemv_config(1, 1, 32, True), stage=2),
        "direct MoE FC1 mxfp4 (words, XW, no HX: the fifth session's)": lambda: moe_direct(
            1, 32, dict(moe_gemv_config(1, 1, 32, True), HX=0), stage=1),
        "direct MoE FC2 mxfp4 (words, XW, no HX)": lambda: moe_direct(1, 32, dict(moe_gemv_config(1, 1, 32, True), HX=0),
                                                                      stage=2),
        "direct MoE FC1 mxfp4 (HX 2: a sum per MX group)": lambda: moe_direct(
            1, 32, dict(moe_gemv_config(1, 1, 32, True), HX=2), stage=1),
        "direct MoE FC2 mxfp4 (HX 2)": lambda: moe_direct(1, 32, dict(moe_gemv_config(1, 1, 32, True), HX=2), stage=2),
        "direct MoE FC1 mxfp4 (PAIRS: two K tiles per iteration)": lambda: moe_direct(
            1, 32, dict(moe_gemv_config(1, 1, 32, True), PAIRS=3), stage=1),
        "direct MoE FC2 mxfp4 (PAIRS)": lambda: moe_direct(1, 32, dict(moe_gemv_config(1, 1, 32, True), PAIRS=3),
                                                           stage=2),
        "direct MoE NVFP4 W4A4 FC1 (XQ: byte-table weights) 8x256": lambda: moe_w4a4(1, 8, 256, 4),
        "direct MoE NVFP4 W4A4 FC2 (XQ) 8x256": lambda: moe_w4a4(2, 8, 256, 4),
        "NVFP4 input rounding in one program (XQ)": lambda: moe_w4a4(0, 0, 0, 0),
        "W4A4 activation over many programs (XQ 2)": w4a4_act,
        "MoE activation over block rows, the ids first (WS)": lambda: w4a4_act(ids_first=True),
        "MoE block-row gather (WS)": gather_rows,
        "MoE block-row gather (WS), padding rows unwritten": lambda: gather_rows(False),
        "MoE block-row gather (WS), rows stored streaming (GATHER_STREAM)": lambda: gather_rows(False, True),
        "MoE alignment, 256-pair steps on 4 warps": lambda: align(256, 4),
        "MoE alignment, wide steps (ALIGN_WIDE: 4096 pairs on 16 warps)": lambda: align(4096, 16),
        "MoE alignment, wide steps, 256 experts": lambda: align(4096, 16, 256),
        "MoE alignment on a program per 1024 pairs (ALIGN_PARTS), 128 experts": lambda: align(1024, 4, 128, True),
        "direct MoE FC1 fp8_block W8A8": lambda: moe_direct(0, 128, moe_gemv_config(1, 0, 128), stage=1, act=1,
                                                            scale_rows=128),
        "row-walking GEMV mxfp4 (words)": lambda: fp4_rows(1, rows),
        "row-walking GEMV nvfp4 (words)": lambda: fp4_rows(2, rows),
    }


def words_cases():
    """The E2M1 bit-placement word decoder (gemm.e2m1_word_ptx) in each kernel that uses it, the words
    GEMM, FP8 QUANT_IN and the one-load quantizer."""
    from oracle_triton.launch import swap_config

    def c(bm, bn, warps, decode, split=2):
        return {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": 128, "SPLIT_K": split, "DECODE": decode,
                "num_warps": warps, "num_stages": 1}
    big = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 128, "SPLIT_K": 1, "GROUP_M": 8, "FULL_TILE": 2,
           "num_warps": 8, "num_stages": 3}
    return {
        "swap mxfp4 bit placement bm16 bn128": lambda: swap(1, 32, swap_config(16, 8192, 8192, 132, 1, True)),
        "swap nvfp4 bit placement fp16 bm16 bn128": lambda: swap(2, 16, c(16, 128, 4, 4), f16=True),
        "swap mxfp4 whole tile (JOIN) bm16 bn64": lambda: swap(1, 32, dict(c(16, 64, 4, 4), FULL_TILE=1)),
        "swap nvfp4 two tiles ahead (PREFETCH 2) bm16 bn128 w8": lambda: swap(2, 16, dict(c(16, 128, 8, 4), PREFETCH=2)),
        "dense mxfp4 words 128x128x128 w8": lambda: dense(1, 2, 32, big),
        "dense nvfp4 words 256x128x64 w8": lambda: dense(2, 2, 16, dict(big, BLOCK_M=256, BLOCK_K=64)),
        "dequant mxfp4 words": lambda: dequant(1, 2, 32, words=True),
        "dequant int4 zero points words": lambda: dequant(3, 8, 128, zero=True, words=True),
        "fp8 swap W8A8 per token, row rounded inside (M=1)": lambda: fp8_swap(c(16, 64, 4, 0), quant_in=1),
        "fp8 swap W8A8 per tensor, row rounded inside (M=1)": lambda: fp8_swap(c(16, 64, 4, 0), act=3, quant_in=1),
        "fp8 swap W8A8 per token, row rounded inside, row heads prefetched, evict-first (M=1)":
            lambda: fp8_swap(c(16, 64, 4, 0), quant_in=1, PF_HEAD=1024, EVICT=True),
        "fp8 swap W8A8 per token, PDL wait after the row heads' prefetch": lambda: fp8_swap(c(16, 64, 4, 0), PF_HEAD=1024,
                                                                                      GDC=True),
        "fp8 swap W8A8 per token, each program rounds its 16 rows (QUANT_IN 2)":
            lambda: fp8_swap(c(16, 64, 4, 0), quant_in=2, amax_k=256),
        "fp8 swap W8A8 per token, each program rounds its 32 rows (QUANT_IN 2) bn128":
            lambda: fp8_swap(c(32, 128, 4, 0), quant_in=2, amax_k=128),
        "fp8 swap W8A8 per token, rows quantized by the programs (COOP, 8192)":
            lambda: fp8_swap(c(16, 64, 4, 0), coop_k=8192),
        "fp8 swap W8A8 per token, rows quantized by the programs (COOP, 4096) bm32":
            lambda: fp8_swap(c(32, 64, 4, 0), coop_k=4096),
        "dense fp8 W8A8 per token 64x64x128, rows quantized by the programs (COOP, 4096)":
            lambda: dense(0, 1, 1, {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 128, "num_warps": 4, "num_stages": 4},
                          codes=2, coop_k=4096),
        "act codes per token, one tile of 8192": lambda: act_codes(2, 8192),
        "act codes per token, one tile of 16384": lambda: act_codes(2, 16384),
        "dynamic per-tensor scale, one program": lambda: compile_kernel(
            gemm.tensor_scale_kernel, {"x_ptr": "*bf16", "s_ptr": "*fp32"}, dict(DIV=448.0, BLOCK=1024), 4, 1),
        "dense int4 words 128x128x128 w8": lambda: dense(3, 8, 128, big),
        "dense int4 zero points words 256x128x128 w8": lambda: dense(3, 8, 128, dict(big, BLOCK_M=256, num_stages=2),
                                                                     zero=True),
    }


def rega(elem: int, warps: int, split: int, xt: int, pf: int, zero: bool = False):
    """w4_rega.w4_rega_kernel (Gluon) as launch.DenseGemm.rega launches it on the word layout."""
    from oracle_triton.w4_rega import w4_rega_kernel

    consts = dict(ELEM=elem, GROUP={1: 32, 2: 16, 3: 128}[elem], HAS_ZERO=zero, HAS_BIAS=True, SPLIT_K=split, XT=xt,
                  PF=pf, num_warps=warps, stride_wn=1, stride_sn=1)
    ptrs = {"x_ptr": "*bf16", "w_ptr": "*i32", "s_ptr": SCALE_T[elem], "z_ptr": "*i32", "y_ptr": "*bf16",
            "b_ptr": "*bf16", "cnt_ptr": "*i32"}
    return compile_kernel(w4_rega_kernel, ptrs, consts, warps, 1, which_loop="mma")


def rega_moe(warps: int, split: int, xt: int, pf: int, by_pair: bool, xdb: int = 0):
    """w4_rega.w4_rega_kernel's MoE mode (MOE 1) as TritonMoE._rega launches it for the one-token NVFP4 W4A4 path
    (XQ 2): the experts' [rows, K / 8] words (stride_wk 1), the exact byte-table decoder with 16-bit scale loads."""
    from oracle_triton.w4_rega import w4_rega_kernel

    consts = dict(ELEM=2, GROUP=16, HAS_ZERO=False, HAS_BIAS=False, SPLIT_K=split, XT=xt, PF=pf, num_warps=warps,
                  stride_wk=1, stride_sk=1, stride_zk=0, TABLE=2, MOE=1, A_BY_PAIR=by_pair, XDB=xdb)
    ptrs = {"x_ptr": "*bf16", "w_ptr": "*i32", "s_ptr": "*u8", "z_ptr": "*u8", "y_ptr": "*bf16", "b_ptr": "*u8",
            "cnt_ptr": "*i32", "ids_ptr": "*i64"}
    return compile_kernel(w4_rega_kernel, ptrs, consts, warps, 1, which_loop="mma")


def rega_grouped(elem: int, warps: int, bm: int, xt: int, pf: int, by_pair: bool, xdb: int = 1, kmask: int = 1,
                 table: int = 0, xp: int = 0):
    """w4_rega.w4_rega_kernel's grouped MoE mode (MOE 2) as moe_rega.apply_swap_rega launches it (SWAP 3): blocks of
    bm pairs of one expert (sorted pair ids), the experts' [rows, K / 8] words, K masked past gpt-oss's 2880."""
    from oracle_triton.w4_rega import w4_rega_kernel

    consts = dict(ELEM=elem, GROUP={1: 32, 2: 16}[elem], HAS_ZERO=False, HAS_BIAS=True, SPLIT_K=1, XT=xt, PF=pf,
                  num_warps=warps, stride_wk=1, stride_sk=1, stride_zk=0, TABLE=table, MOE=2, A_BY_PAIR=by_pair,
                  XDB=xdb, BM=bm, KMASK=kmask, XP=xp)
    ptrs = {"x_ptr": "*bf16", "w_ptr": "*i32", "s_ptr": "*u8", "z_ptr": "*u8", "y_ptr": "*bf16", "b_ptr": "*bf16",
            "cnt_ptr": "*i32", "ids_ptr": "*i32", "sid_ptr": "*i32", "g_ptr": "*fp32"}
    return compile_kernel(w4_rega_kernel, ptrs, consts, warps, 1, which_loop="mma")


def w4a4_act(ids_first: bool = False):
    """moe_w4a4.w4a4_act_kernel (XQ 2): the activation of FC1's outputs, many programs; ids_first: as moe_ws launches
    it over the block rows (gpt-oss's interleaved swigluoai with its limit)."""
    import oracle_triton.moe_w4a4 as mw

    if ids_first:
        return compile_kernel(mw.w4a4_act_kernel, {"y_ptr": "*bf16", "ids_ptr": "*i32", "out_ptr": "*bf16"},
                              dict(ACTFN=3, GATED=True, INTERLEAVED=True, HAS_LIMIT=True, BLOCK=1024,
                                   EXACT_BF16=False, IDS_FIRST=True), 4, 1)
    return compile_kernel(mw.w4a4_act_kernel, {"y_ptr": "*bf16", "ids_ptr": "*i64", "out_ptr": "*bf16"},
                          dict(ACTFN=0, GATED=True, INTERLEAVED=False, HAS_LIMIT=False, BLOCK=1024, EXACT_BF16=False),
                          4, 1)


def align(block: int, warps: int, e_pow2: int = 32, parts: bool = False):
    """moe_kernels.align_kernel as TritonMoE._align launches it beyond ALIGN_SMALL_PAIRS: 256-pair scatter steps on 4
    warps, or (ALIGN_WIDE) ALIGN_BLOCK-pair steps on ALIGN_WARPS (gpt-oss-20b: 32 experts, 256-pair blocks); parts
    (ALIGN_PARTS): a program per ALIGN_PART_PAIRS pairs, with the arrival counter."""
    from oracle_triton.moe_kernels import align_kernel

    names = ("ids_ptr", "rank_ptr", "cnt_ptr", "off_ptr", "sorted_ptr", "block_expert_ptr", "done_ptr")
    consts = dict(BLOCK_M=256, E_POW2=e_pow2, BLOCK=block, **({} if parts else {"done_ptr": None}))
    return compile_kernel(align_kernel, {name: "*i32" for name in names}, consts, warps, 1)


def gather_rows(zero_pad: bool = True, stream: bool = False):
    """moe_ws.gather_rows_kernel: FC1's input rows in block order (gpt-oss: top-4, 256-pair blocks); zero_pad False:
    padding rows left unwritten."""
    from oracle_triton.moe_ws import GATHER_COLS, GATHER_ROWS, gather_rows_kernel

    return compile_kernel(gather_rows_kernel, {"a_ptr": "*bf16", "sid_ptr": "*i32", "bexp_ptr": "*i32",
                                               "ids_ptr": "*i32", "out_ptr": "*bf16", "rid_ptr": "*i32"},
                          dict(BM=256, TOPK=4, BY_PAIR=False, ROWS=GATHER_ROWS, COLS=GATHER_COLS, ZERO_PAD=zero_pad,
                               STREAM=stream), 4, 1)


def rega_cases():
    """The register-A few-row kernel (w4_rega) for each format: its K loop keeps the decoded words in
    registers (no shared-memory traffic, no barrier) and issues 8 wgmma with one wait per K tile; its MoE mode
    (the one-token NVFP4 W4A4 path, XQ 2)."""
    return {
        "rega moe nvfp4 w4a4 fc1 w8 split 2 xt 4 pf 2 table 2": lambda: rega_moe(8, 2, 4, 2, False),
        "rega moe nvfp4 w4a4 fc2 w4 split 1 xt 4 pf 2 table 2 by pair": lambda: rega_moe(4, 1, 4, 2, True),
        "rega moe nvfp4 w4a4 fc1 w4 split 1 xt 2 pf 2 table 2 xdb (the H200 entry)": lambda: rega_moe(4, 1, 2, 2, False,
                                                                                                  xdb=1),
        "rega moe nvfp4 w4a4 fc2 w4 split 1 xt 2 pf 2 table 2 xdb by pair": lambda: rega_moe(4, 1, 2, 2, True, xdb=1),
        "rega moe nvfp4 w4a4 fc1 w4 split 1 xt 8 pf 2 table 2 xdb": lambda: rega_moe(4, 1, 8, 2, False, xdb=1),
        # the grouped MoE mode (SWAP 3) in the H200's entries: gpt-oss-20b at 256 tokens (64-pair blocks, one K tile a
        # chunk: the chunk loop is the K loop, with its copy and barriers), at 16 (and gpt-oss-120b at 256), Qwen3-235B
        # NVFP4 W4A4 at 256; K masked past gpt-oss's 2880, the activations permuted first (XP)
        "rega grouped moe mxfp4 fc1 w8 bm 64 xt 1 pf 1 xdb kmask xp": lambda: rega_grouped(1, 8, 64, 1, 1, False, xp=1),
        "rega grouped moe mxfp4 fc2 w8 bm 64 xt 1 pf 1 xdb kmask xp by pair": lambda: rega_grouped(1, 8, 64, 1, 1, True,
                                                                                                xp=1),
        "rega grouped moe mxfp4 fc1 w8 bm 16 xt 4 pf 2 xdb kmask xp": lambda: rega_grouped(1, 8, 16, 4, 2, False, xp=1),
        "rega grouped moe nvfp4 fc1 w8 bm 32 xt 2 pf 2 xdb table 2 xp": lambda: rega_grouped(2, 8, 32, 2, 2, False,
                                                                                            kmask=0, table=2, xp=1),
        "rega grouped moe mxfp4 fc1 w4 bm 64 xt 2 pf 2 xdb kmask (4-byte copies)": lambda: rega_grouped(1, 4, 64, 2, 2,
                                                                                                     False),
        "rega mxfp4 w8 split 4 xt 4 pf 2": lambda: rega(1, 8, 4, 4, 2),
        "rega nvfp4 w8 split 4 xt 4 pf 2": lambda: rega(2, 8, 4, 4, 2),
        "rega int4 zero points w8 split 4 xt 4 pf 1": lambda: rega(3, 8, 4, 4, 1, zero=True),
        "rega int4 w4 split 2 xt 4 pf 2": lambda: rega(3, 4, 2, 4, 2),
    }


def ws(elem: int, warps: int, bm: int, stages: int, dw: int, dregs: int, zero: bool = False, maxnreg: int = 168,
       moe: int = 0, kmajor: int = 1, has_bias: int = 1, **keys):
    """w4_ws.w4_ws_kernel (Gluon, warp-specialized) as launch.DenseGemm.ws launches it on the word layout (keys:
    BK, XCP, PFENCE, WPF, MW), or (moe 1 / 2) as moe_ws launches it on the MoE's [E, N, K/8] words, its output
    in block order (1) or scattered to the pairs' rows (2); kmajor 0: the MoE's INT4 experts in GPTQ's [E, K/8, N]
    words; has_bias 2: b_ptr the experts' fp32 output factors (moe_ws's NVFP4)."""
    from oracle_triton.w4_ws import w4_ws_kernel

    consts = dict(ELEM=elem, GROUP={1: 32, 2: 16, 3: 128}[elem], HAS_ZERO=zero,
                  HAS_BIAS=True if has_bias == 1 else has_bias, BM=bm, STAGES=stages, DW=dw, DREGS=dregs,
                  num_warps=warps, **{"BK": 64, **keys})
    ptrs = {"x_ptr": "*bf16", "w_ptr": "*i32", "s_ptr": SCALE_T[elem], "z_ptr": "*i32", "y_ptr": "*bf16",
            "b_ptr": "*fp32" if has_bias == 2 else "*bf16"}
    if moe:
        ptrs["ids_ptr"] = "*i32"
        if moe == 2:
            ptrs["sid_ptr"] = "*i32"
        else:
            consts["sid_ptr"] = None
        if kmajor:
            consts.update(stride_wk=1, stride_sk=1, MOE=1)
        else:
            consts.update(stride_wn=1, stride_sn=1, MOE=1, KMAJOR=0)
    else:
        consts.update(ids_ptr=None, sid_ptr=None, stride_wn=1, stride_sn=1)
    if keys.get("XTMA"):        # the activations' TMA descriptor as Triton 3.7 specializes w4_ws.x_tma_desc's
        ptrs["x_desc"] = f"tensordesc<bf16[{min(bm, 256)}, 64],NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, " \
                         "rank=2, transposed=False, fp4_padded=False, cga_layout=[])>"
    else:
        consts["x_desc"] = None
    if keys.get("TAIL"):        # the tail rows' descriptor (moe_ws: w4_ws.x_tma_desc with TAIL-row boxes)
        ptrs["t_desc"] = f"tensordesc<bf16[{keys['TAIL']}, 64],NVMMASharedLayout(swizzle_byte_width=128, " \
                         "element_bitwidth=16, rank=2, transposed=False, fp4_padded=False, cga_layout=[])>"
    else:
        consts["t_desc"] = None
    if keys.get("QACT"):        # FC2's static NVFP4 input scale (QACT 1), or the int32 amax state (QACT 2 / 3)
        ptrs["qs_ptr"] = "*i32" if keys["QACT"] >= 2 else "*fp32"
    else:
        consts["qs_ptr"] = None
    if keys.get("WT"):          # the words' TMA descriptor (w4_ws.w_tma_desc): [BK/8, BN] dense, [BN, BK/8] MoE
        bk8, bn = keys.get("BK", 64) // 8, 16 * warps // keys.get("WGN", 1)
        box = f"{bn}, {bk8}" if moe and kmajor else f"{bk8}, {bn}"
        ptrs["w_desc"] = f"tensordesc<i32[{box}],NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=32, " \
                         "rank=2, transposed=False, fp4_padded=False, cga_layout=[])>"
    else:
        consts["w_desc"] = None     # as a launch without WT passes it
    if keys.get("HALF") or keys.get("QACT", 0) >= 2:    # the sorted ids (HALF: row BM / 2 says if a block's second
        # half holds a pair; QACT 2 / 3: which rows count in the amax)
        ptrs["half_ptr"] = "*i32"
    else:
        consts["half_ptr"] = None
    return compile_kernel(w4_ws_kernel, ptrs, consts, warps, 1, which_loop="mma", maxnreg=maxnreg,
                          not16=("stride_wn", "stride_sn", "stride_se", "stride_be", "stride_ze") if moe else ())


def ws_cases():
    """The warp-specialized many-row 4-bit kernel (w4_ws): the H200's 256-row entries of the eighteenth pass (INT4 on
    two MMA warpgroups with 128-deep K tiles, the words 3-4 tiles ahead (2 with zero points: 3 spill 40 B under
    Triton 3.6) and slots handed back after their own MMA, R61, R62; MXFP4 / NVFP4 on one warpgroup with all 256
    rows a program, R60: 4 slots, XCP 1; 5 slots, XCP 3) and the R55 configuration (64-deep tiles, two ahead, MW 1);
    the activations by TMA (XTMA), two MMA warpgroups on their own (PP), and the nineteenth pass's entries: one
    warpgroup, 256 rows, the decode warps as 2 or 4 partitions (DP) with TMA activations (R71, R72)."""
    int4 = dict(maxnreg=128, BK=128, XCP=1, MW=0)
    fp4 = dict(maxnreg=168, XCP=1)
    return {
        "ws int4 zero points w8 bm 128 stages 3 dw 8 bk 128 xcp 1 wpf 2 mw 0":
            lambda: ws(3, 8, 128, 3, 8, 128, zero=True, WPF=2, **int4),
        "ws int4 w8 bm 128 stages 3 dw 8 bk 128 xcp 1 wpf 4 mw 0": lambda: ws(3, 8, 128, 3, 8, 128, WPF=4, **int4),
        "ws mxfp4 w4 bm 256 stages 4 dw 8 xcp 1": lambda: ws(1, 4, 256, 4, 8, 104, **fp4),
        "ws nvfp4 w4 bm 256 stages 4 dw 8 xcp 1": lambda: ws(2, 4, 256, 4, 8, 104, **fp4),
        "ws nvfp4 w4 bm 256 stages 5 dw 8 xcp 3": lambda: ws(2, 4, 256, 5, 8, 104, maxnreg=168, XCP=3),
        "ws int4 w8 bm 128 stages 6 dw 8 xcp 2": lambda: ws(3, 8, 128, 6, 8, 128, maxnreg=128, XCP=2),
        "ws int4 w8 bm 128 stages 3 dw 8 bk 128 xtma wpf 3 mw 0":
            lambda: ws(3, 8, 128, 3, 8, 128, maxnreg=128, BK=128, XTMA=1, WPF=3, MW=0),
        "ws mxfp4 w4 bm 256 stages 4 dw 8 xtma": lambda: ws(1, 4, 256, 4, 8, 104, maxnreg=168, XTMA=1),
        "ws nvfp4 w4 bm 256 stages 4 dw 8 xtma mw 0": lambda: ws(2, 4, 256, 4, 8, 104, maxnreg=168, XTMA=1, MW=0),
        # PP: the kernel's own warps are the decode warps (num_warps = DW), two MMA warpgroups its workers
        "ws int4 pp dw 8 bm 128 stages 3 bk 128 xtma 2 wpf 3 mw 0":
            lambda: ws(3, 8, 128, 3, 8, 128, maxnreg=128, BK=128, XTMA=2, WPF=3, MW=0, PP=1),
        "ws mxfp4 pp dw 8 bm 128 stages 3 bk 128 xtma 2 wpf 3 mw 1":
            lambda: ws(1, 8, 128, 3, 8, 128, maxnreg=128, BK=128, XTMA=2, WPF=3, MW=1, PP=1),
        # DP: the decode warps as 2 / 4 partitions, each on every DP-th K tile: the shipped 256-row entries (R71, R72)
        "ws int4 w4 bm 256 stages 4 dw 8 xtma 1 dp 4": lambda: ws(3, 4, 256, 4, 8, 104, maxnreg=168, XTMA=1, DP=4),
        "ws int4 zero points w4 bm 256 stages 4 dw 8 xtma 1 dp 2":
            lambda: ws(3, 4, 256, 4, 8, 104, zero=True, maxnreg=168, XTMA=1, DP=2),
        "ws int4 w4 bm 256 stages 4 dw 8 xtma 2 dp 4": lambda: ws(3, 4, 256, 4, 8, 104, maxnreg=168, XTMA=2, DP=4),
        "ws mxfp4 w4 bm 256 stages 4 dw 8 xtma 2 dp 4": lambda: ws(1, 4, 256, 4, 8, 104, maxnreg=168, XTMA=2, DP=4),
        "ws mxfp4 w4 bm 256 stages 4 dw 8 xtma 1 dp 2": lambda: ws(1, 4, 256, 4, 8, 104, maxnreg=168, XTMA=1, DP=2),
        "ws nvfp4 w4 bm 256 stages 4 dw 8 xtma 1 dp 2": lambda: ws(2, 4, 256, 4, 8, 104, maxnreg=168, XTMA=1, DP=2),
        # the MoE mode (moe_ws, WS): the expert's words [N, K/8] from the block's expert id, FC1's output in block
        # order, FC2's scattered to the pairs' rows
        "ws moe mxfp4 fc1 w4 bm 256 stages 4 dw 8 xtma 1 dp 2":
            lambda: ws(1, 4, 256, 4, 8, 104, maxnreg=168, XTMA=1, DP=2, moe=1),
        "ws moe mxfp4 fc2 scattered w4 bm 128 stages 4 dw 8 xtma 2 dp 4":
            lambda: ws(1, 4, 128, 4, 8, 104, maxnreg=168, XTMA=2, DP=4, moe=2),
        "ws moe mxfp4 fc2 scattered w4 bm 256 stages 4 dw 8 xtma 2 dp 4":
            lambda: ws(1, 4, 256, 4, 8, 104, maxnreg=168, XTMA=2, DP=4, moe=2),
        # WT: the words by TMA into their own ring of WT slots (the MMA warps' copies), the decode warps reading them
        "ws mxfp4 w4 bm 256 stages 4 dw 8 xtma 1 dp 2 wt 10":
            lambda: ws(1, 4, 256, 4, 8, 104, maxnreg=168, XTMA=1, DP=2, WT=10),
        "ws nvfp4 w4 bm 256 stages 4 dw 8 xtma 1 dp 2 wt 12":
            lambda: ws(2, 4, 256, 4, 8, 104, maxnreg=168, XTMA=1, DP=2, WT=12),
        "ws int4 zero points w4 bm 256 stages 4 dw 8 xtma 1 dp 4 wt 8":
            lambda: ws(3, 4, 256, 4, 8, 104, zero=True, maxnreg=168, XTMA=1, DP=4, WT=8),
        "ws moe mxfp4 fc1 w4 bm 256 stages 4 dw 8 xtma 1 dp 2 wt 10":
            lambda: ws(1, 4, 256, 4, 8, 104, maxnreg=168, XTMA=1, DP=2, WT=10, moe=1),
        "ws moe mxfp4 fc2 scattered w4 bm 256 stages 4 dw 8 xtma 1 dp 4 wt 12":
            lambda: ws(1, 4, 256, 4, 8, 104, maxnreg=168, XTMA=1, DP=4, WT=12, moe=2),
        # the MoE's INT4 experts (GPTQ's [E, K/8, N] words, zero points or not)
        "ws moe int4 zero points fc1 w4 bm 256 stages 4 dw 8 xtma 1 dp 2":
            lambda: ws(3, 4, 256, 4, 8, 104, zero=True, maxnreg=168, XTMA=1, DP=2, moe=1, kmajor=0),
        "ws moe int4 fc2 scattered w4 bm 256 stages 4 dw 8 xtma 1 dp 4 wt 12":
            lambda: ws(3, 4, 256, 4, 8, 104, maxnreg=168, XTMA=1, DP=4, WT=12, moe=2, kmajor=0),
        "ws moe int4 zero points fc2 scattered w4 bm 128 stages 4 dw 8 xtma 1 dp 2 wt 8":
            lambda: ws(3, 4, 128, 4, 8, 104, zero=True, maxnreg=168, XTMA=1, DP=2, WT=8, moe=2, kmajor=0),
        # ACT: gpt-oss's swigluoai in FC1's epilogue (rows paired by the decode warps, FC2's input stored)
        "ws moe mxfp4 fc1 act w4 bm 256 stages 4 dw 8 xtma 1 dp 2 wt 10":
            lambda: ws(1, 4, 256, 4, 8, 104, maxnreg=168, XTMA=1, DP=2, WT=10, moe=1, ACT=(0, 7.0, 1.702, 1.0)),
        "ws moe mxfp4 fc1 act w4 bm 256 stages 4 dw 8 xtma 2 dp 4":
            lambda: ws(1, 4, 256, 4, 8, 104, maxnreg=168, XTMA=2, DP=4, moe=1, ACT=(0, 7.0, 1.702, 1.0)),
        # HALF: a block whose pairs fit in its first half multiplied on that half (the K loop twice, N 256 / 128)
        "ws moe mxfp4 fc1 act half w4 bm 256 stages 4 dw 8 xtma 1 dp 2":
            lambda: ws(1, 4, 256, 4, 8, 104, maxnreg=168, XTMA=1, DP=2, moe=1, ACT=(0, 7.0, 1.702, 1.0), HALF=1),
        "ws moe mxfp4 fc2 scattered half w4 bm 256 stages 4 dw 8 xtma 1 dp 2":
            lambda: ws(1, 4, 256, 4, 8, 104, maxnreg=168, XTMA=1, DP=2, moe=2, HALF=1),
        "ws moe int4 zero points fc1 half w4 bm 256 stages 4 dw 8 xtma 1 dp 2":
            lambda: ws(3, 4, 256, 4, 8, 104, zero=True, maxnreg=168, XTMA=1, DP=2, moe=1, kmajor=0, HALF=1),
        # ACT_SILU: Qwen3's silu in FC1's epilogue, its gate / up halves decoded paired (w4_ws._act_rows)
        "ws moe int4 fc1 silu w4 bm 256 stages 4 dw 8 xtma 1 dp 2":
            lambda: ws(3, 4, 256, 4, 8, 104, maxnreg=168, XTMA=1, DP=2, moe=1, kmajor=0, ACT=(1, 0.0, 0.0, 0.0)),
        "ws moe int4 zero points fc1 silu half w4 bm 256 stages 4 dw 8 xtma 1 dp 2":
            lambda: ws(3, 4, 256, 4, 8, 104, zero=True, maxnreg=168, XTMA=1, DP=2, moe=1, kmajor=0,
                       ACT=(1, 0.0, 0.0, 0.0), HALF=1),
        "ws moe mxfp4 fc1 silu w4 bm 256 stages 4 dw 8 xtma 1 dp 2":
            lambda: ws(1, 4, 256, 4, 8, 104, maxnreg=168, XTMA=1, DP=2, moe=1, ACT=(1, 0.0, 0.0, 0.0)),
        # WGN 2: 8 MMA warps as two warpgroups on the halves of the block's rows (512: two TMA row boxes a tile)
        "ws moe mxfp4 fc1 act wgn 2 w8 bm 512 stages 2 dw 4 xtma 1 dp 2":
            lambda: ws(1, 8, 512, 2, 4, 104, maxnreg=168, XTMA=1, DP=2, moe=1, ACT=(0, 7.0, 1.702, 1.0), WGN=2),
        "ws moe mxfp4 fc1 act half wgn 2 w8 bm 256 stages 4 dw 8 xtma 1 dp 2":
            lambda: ws(1, 8, 256, 4, 8, 104, maxnreg=128, XTMA=1, DP=2, moe=1, ACT=(0, 7.0, 1.702, 1.0), HALF=1, WGN=2),
        # PT: a persistent program an SM over the output tiles, the ring running on across them (the shipped MoE
        # forms: INT4 with silu in FC1, gpt-oss's swigluoai, FC2 scattered, HALF; the dense 256-row entries)
        "ws pt moe int4 fc1 silu half w4 bm 256 stages 4 dw 8 xtma 1 dp 2":
            lambda: ws(3, 4, 256, 4, 8, 104, maxnreg=168, XTMA=1, DP=2, moe=1, kmajor=0, ACT=(1, 0.0, 0.0, 0.0),
                       HALF=1, PT=1),
        "ws pt moe int4 zero points fc2 scattered half w4 bm 256 stages 4 dw 8 xtma 1 dp 2":
            lambda: ws(3, 4, 256, 4, 8, 104, zero=True, maxnreg=168, XTMA=1, DP=2, moe=2, kmajor=0, HALF=1, PT=1),
        "ws pt moe mxfp4 fc1 act half w4 bm 256 stages 4 dw 8 xtma 1 dp 2":
            lambda: ws(1, 4, 256, 4, 8, 104, maxnreg=168, XTMA=1, DP=2, moe=1, ACT=(0, 7.0, 1.702, 1.0), HALF=1, PT=1),
        "ws pt nvfp4 w4 bm 256 stages 4 dw 8 xtma 1 dp 2":
            lambda: ws(2, 4, 256, 4, 8, 104, maxnreg=168, XTMA=1, DP=2, PT=1),
        "ws pt int4 w4 bm 256 stages 4 dw 8 xtma 1 dp 1": lambda: ws(3, 4, 256, 4, 8, 104, maxnreg=168, XTMA=1, PT=1),
        # the MoE's NVFP4 experts (moe_ws: the decode's g 2**-8, each expert's factor in the epilogue, HAS_BIAS 2)
        "ws moe nvfp4 fc1 silu half factor w4 bm 256 stages 4 dw 8 xtma 1 dp 2":
            lambda: ws(2, 4, 256, 4, 8, 104, maxnreg=168, XTMA=1, DP=2, moe=1, ACT=(1, 0.0, 0.0, 0.0), HALF=1,
                       has_bias=2),
        "ws pt moe nvfp4 fc1 half factor w4 bm 256 stages 4 dw 8 xtma 1 dp 2":
            lambda: ws(2, 4, 256, 4, 8, 104, maxnreg=168, XTMA=1, DP=2, moe=1, HALF=1, has_bias=2, PT=1),
        "ws pt 2 moe nvfp4 fc2 scattered half factor w4 bm 256 stages 4 dw 8 xtma 1 dp 2":
            lambda: ws(2, 4, 256, 4, 8, 104, maxnreg=168, XTMA=1, DP=2, moe=2, HALF=1, has_bias=2, PT=2, WPF=2),
        # HALF 2: quarter blocks too (the K loop three times: N 256 / 128 / 64)
        "ws moe int4 fc1 silu quarter w4 bm 256 stages 4 dw 8 xtma 1 dp 2":
            lambda: ws(3, 4, 256, 4, 8, 104, maxnreg=168, XTMA=1, DP=2, moe=1, kmajor=0, ACT=(1, 0.0, 0.0, 0.0),
                       HALF=2),
        "ws pt 2 moe nvfp4 fc2 scattered quarter factor w4 bm 256 stages 4 dw 8 xtma 1 dp 2":
            lambda: ws(2, 4, 256, 4, 8, 104, maxnreg=168, XTMA=1, DP=2, moe=2, HALF=2, has_bias=2, PT=2, WPF=2),
        # PT 2: the decode loop unrolled by two trips (w4_ws._decode_loop_xcp's WU)
        "ws pt 2 moe int4 zero points fc1 silu half w4 bm 256 stages 4 dw 8 xtma 1 dp 2":
            lambda: ws(3, 4, 256, 4, 8, 104, zero=True, maxnreg=168, XTMA=1, DP=2, moe=1, kmajor=0,
                       ACT=(1, 0.0, 0.0, 0.0), HALF=1, PT=2),
        "ws pt 2 moe mxfp4 fc1 act half w4 bm 256 stages 4 dw 8 xtma 1 dp 2":
            lambda: ws(1, 4, 256, 4, 8, 104, maxnreg=168, XTMA=1, DP=2, moe=1, ACT=(0, 7.0, 1.702, 1.0), HALF=1, PT=2),
        "ws pt 2 moe int4 fc2 scattered half w4 bm 256 stages 4 dw 8 xtma 1 dp 2":
            lambda: ws(3, 4, 256, 4, 8, 104, maxnreg=168, XTMA=1, DP=2, moe=2, kmajor=0, HALF=1, PT=2),
        "ws pt 2 nvfp4 w4 bm 256 stages 4 dw 8 xtma 1 dp 2":
            lambda: ws(2, 4, 256, 4, 8, 104, maxnreg=168, XTMA=1, DP=2, PT=2),
        # TAIL: blocks of 256 + 64 pairs (the thirty-first pass) or 256 + 32 (the 4096-token entries since R135), the
        # tail a second wgmma (N 64 / 32) into its own accumulator
        "ws moe int4 fc1 silu half tail 64 w4 bm 256 stages 4 dw 8 xtma 1 dp 2":
            lambda: ws(3, 4, 256, 4, 8, 104, maxnreg=168, XTMA=1, DP=2, moe=1, kmajor=0, ACT=(1, 0.0, 0.0, 0.0),
                       HALF=1, TAIL=64),
        "ws pt moe int4 zero points fc1 silu half tail 64 w4 bm 256 stages 4 dw 8 xtma 1 dp 2":
            lambda: ws(3, 4, 256, 4, 8, 104, zero=True, maxnreg=168, XTMA=1, DP=2, moe=1, kmajor=0,
                       ACT=(1, 0.0, 0.0, 0.0), HALF=1, PT=1, TAIL=64),
        "ws pt moe int4 zero points fc1 silu quarter tail 32 w4 bm 256 stages 4 dw 8 xtma 1 dp 2":
            lambda: ws(3, 4, 256, 4, 8, 104, zero=True, maxnreg=168, XTMA=1, DP=2, moe=1, kmajor=0,
                       ACT=(1, 0.0, 0.0, 0.0), HALF=2, PT=1, TAIL=32),
        "ws pt 2 moe nvfp4 fc1 half factor tail 64 w4 bm 256 stages 4 dw 8 xtma 1 dp 2":
            lambda: ws(2, 4, 256, 4, 8, 104, maxnreg=168, XTMA=1, DP=2, moe=1, HALF=1, has_bias=2, PT=2, WPF=2,
                       TAIL=64),
        **{f"ws pt moe int4 fc2 scattered quarter tail {tail} w4 bm 256 stages 4 dw 8 xtma 1 dp 2":
           (lambda tail=tail: ws(3, 4, 256, 4, 8, 104, maxnreg=168, XTMA=1, DP=2, moe=2, kmajor=0, HALF=2, PT=1,
                                 TAIL=tail)) for tail in (64, 32)},
        **{f"ws pt 2 moe nvfp4 fc2 scattered half factor tail {tail} w4 bm 256 stages 4 dw 8 xtma 1 dp 2":
           (lambda tail=tail: ws(2, 4, 256, 4, 8, 104, maxnreg=168, XTMA=1, DP=2, moe=2, HALF=1, has_bias=2, PT=2,
                                 WPF=2, TAIL=tail)) for tail in (64, 32)},
        **{f"ws moe mxfp4 fc1 act half tail {tail} w4 bm 256 stages 4 dw 8 xtma 1 dp 2":
           (lambda tail=tail: ws(1, 4, 256, 4, 8, 104, maxnreg=168, XTMA=1, DP=2, moe=1, ACT=(0, 7.0, 1.702, 1.0),
                                 HALF=1, TAIL=tail)) for tail in (64, 32)},
        # QACT 1: FC2's input rounded through NVFP4 in FC1's epilogue (W4A4 with a static FC2 input scale); QACT 2:
        # its amax over the rows holding a pair merged there instead (dynamic scales; with the 32-pair tail as shipped)
        **{f"ws pt 2 moe nvfp4 fc1 silu qact{' 2' * (q == 2)} half factor tail {tail} w4 bm 256 stages 4 dw 8 xtma 1 "
           f"dp 2": (lambda q=q, tail=tail: ws(2, 4, 256, 4, 8, 104, maxnreg=168, XTMA=1, DP=2, moe=1,
                                                ACT=(1, 0.0, 0.0, 0.0), HALF=1, has_bias=2, PT=2, WPF=2, TAIL=tail,
                                                QACT=q)) for q, tail in ((1, 64), (2, 64), (2, 32))},
        **{f"ws moe nvfp4 fc1 silu qact{' 2' * (q == 2)} quarter factor w4 bm 256 stages 4 dw 8 xtma 1 dp 2":
           (lambda q=q: ws(2, 4, 256, 4, 8, 104, maxnreg=168, XTMA=1, DP=2, moe=1, ACT=(1, 0.0, 0.0, 0.0), HALF=2,
                           has_bias=2, QACT=q)) for q in (1, 2)},
        # QACT 3: QACT 2's amax a warp at a time (moe_ws.AMAX_BY_WARP)
        "ws pt 2 moe nvfp4 fc1 silu qact 3 half factor tail 64 w4 bm 256 stages 4 dw 8 xtma 1 dp 2":
            lambda: ws(2, 4, 256, 4, 8, 104, maxnreg=168, XTMA=1, DP=2, moe=1, ACT=(1, 0.0, 0.0, 0.0), HALF=1,
                       has_bias=2, PT=2, WPF=2, TAIL=64, QACT=3),
        # (FC2 on 512-pair blocks with HALF spills 60 B in its scatter epilogue, every format: not a shipped form)
        "ws moe int4 fc2 scattered wgn 2 w8 bm 512 stages 2 dw 4 xtma 1 dp 2":
            lambda: ws(3, 8, 512, 2, 4, 104, maxnreg=168, XTMA=1, DP=2, moe=2, kmajor=0, WGN=2),
        "ws moe int4 zero points fc1 silu half wgn 2 w8 bm 512 stages 2 dw 4 xtma 1 dp 2":
            lambda: ws(3, 8, 512, 2, 4, 104, zero=True, maxnreg=168, XTMA=1, DP=2, moe=1, kmajor=0, HALF=1, WGN=2,
                       ACT=(1, 0.0, 0.0, 0.0)),
    }


def main(argv: list[str]) -> int:
    bad = 0
    cases = {"small": small_batch_cases, "swap": swap_cases, "words": words_cases,
             "moeswap": moe_swap_cases, "rega": rega_cases,
             "ws": ws_cases}.get(argv[0] if argv else "", default_cases)()
    for name, build in cases.items():
        try:
            r = build()
        except Exception as exc:  # noqa: BLE001 - report every kernel, then fail
            bad += 1
            print(f"FAIL {name}: {type(exc).__name__}: {str(exc)[-600:]}")
            continue
        loop = r["loop"]
        body = f", main loop {loop['instructions']} instructions / {loop['barriers']} barriers / " \
               f"{loop['global_loads']} global loads / {loop['wgmma']} wgmma / {loop['mma_waits']} wgmma waits / " \
               f"{loop['shared_ops']} shared-memory ops (loops {loop['loops']})" if loop else ""
        print(f"ok   {name}: shared {r['shared']} B, {r['regs']} registers, {r['spills']} B spilled, "
              f"float8 MMA {r['fp8_mma']}, cp.async {r['cp_async']}{body}", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
