"""Launch parameters: tile sizes and split-K chosen from shapes only (never from tensor
values, so nothing synchronizes with the device and a CUDA graph can capture the call)."""
from __future__ import annotations

import functools
import os
from typing import Any

import torch
from oracle.errors import InputError

from . import fastlaunch
from .formats import (ACT_GROUP, ACT_TENSOR, ACT_TOKEN, E2M1_MX, E2M1_NV, FP8, INT4, Layout, check_config,
                      WS_BK, check_rowq, fused_scales_ok, is_words, rega_swap)


def interpreting() -> bool:
    """Were the kernels built under TRITON_INTERPRET=1 (Triton's CPU interpreter, the CPU tests)?

    Triton decides at decoration time, so the kernel objects themselves say it."""
    from .gemm import wgemm_kernel
    return type(wgemm_kernel).__name__ == "InterpretedFunction"


@functools.lru_cache(maxsize=None)
def _capability(index: int) -> tuple[int, int]:
    return torch.cuda.get_device_capability(index)


@functools.lru_cache(maxsize=None)
def _sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


#: w4_ws's PT grid: None for one program an SM, or this many (the GPU tests: a few programs, many output tiles each)
PT_PROGRAMS: int | None = None


def pt_programs(tiles: int, k_tiles: int, stages: int, device: torch.device) -> int:
    """w4_ws's PT grid: one program an SM (or PT_PROGRAMS), no more than the output tiles; 0 where the kernel's K
    tiles are fewer than its ring's slots (the next tile's first activation tiles are started from this tile's last
    STAGES MMAs: each must be a K tile of the next tile), and the one-tile grid serves the call."""
    if k_tiles < stages:
        return 0
    count = PT_PROGRAMS or _sm_count(device.index if device.index is not None else torch.cuda.current_device())
    return max(1, min(tiles, count))


@functools.lru_cache(maxsize=None)
def _device_name(index: int) -> str:
    return torch.cuda.get_device_name(index)


def device_facts(device: torch.device) -> dict[str, Any]:
    """hw_fp8 (cvt instructions, capability >= 8.9), fp8_dot (float8 tensor-core dot, 8.9 and up:
    W8A8 multiplies E4M3 codes), dot_f32 (interpreter), sm count, the device name and its capability (tuned
    tables: a device's own entries, else a sibling's of the same capability and SM count), pdl (programmatic
    dependent launch, griddepcontrol: capability >= 9.0)."""
    if device.type != "cuda" or interpreting():
        return {"hw_fp8": False, "fp8_dot": False, "dot_f32": True, "sms": 8, "name": None, "pdl": False,
                "cc": None}
    index = device.index if device.index is not None else torch.cuda.current_device()
    force_int = os.environ.get("ORACLE_TRITON_FP8_DECODE") == "int"   # exercise the SM80 path
    cc = tuple(_capability(index))
    hw = cc >= (8, 9) and not force_int
    return {"hw_fp8": hw, "fp8_dot": hw, "dot_f32": False, "sms": _sm_count(index), "name": _device_name(index),
            "pdl": cc >= (9, 0), "cc": cc}


def device_traits(facts: dict[str, Any]) -> tuple[tuple[int, int], int] | None:
    """(capability, SM count) of a device's facts, the key of its siblings in the tuned table; None in the
    interpreter (or facts without a capability)."""
    return (tuple(facts["cc"]), facts["sms"]) if facts.get("cc") else None


def dense_config(m: int, n: int, k: int, sms: int, pack: int = 1) -> dict[str, int]:
    """BLOCK_M/N/K, SPLIT_K, warps, stages, GROUP_M and FULL_TILE for an [M, K] x [K, N] product.

    A K tile spans one 128-wide FP8 scale block; 4-bit decoding gets 8 warps at small M
    (the decoded sub-tiles otherwise spill registers). From M > 16 on, 4-bit weights are decoded
    to whole tiles (one dot per K tile, FULL_TILE); from M > 64 on, programs walk the output in
    bands of 8 tile rows (GROUP_M) so that the weight tiles they share stay in L2; from M >= 256
    on, E2M1 weights get 256-row tiles (K tiles of 64), halving the decode per output. The large
    tiles are the largest that compile for sm_90 without register spills (ptxas -v, Triton 3.7)."""
    block_k = 128
    group_m, full = 1, 0
    if m <= 16:
        bm, bn, warps, stages = 16, 64, 4 if pack == 1 else 8, 4
    elif m <= 64:
        bm, bn, warps, stages = 64, 64, 4, 3
        full = int(pack > 1)
    elif pack == 2 and m >= 256:            # E2M1: decode once per 256 rows (see moe.moe_config)
        bm, bn, block_k, warps, stages = 256, 128, 64, 8, 3
        group_m, full = 8, 1
    else:
        bm, bn, warps, stages = 128, 128, 8, 4 if pack == 1 else 3
        group_m, full = 8, int(pack > 1)
    if bn == 64 and n <= 2048 and m <= 16:
        bn = 32
    tiles = -(-m // bm) * -(-n // bn)
    k_tiles = -(-k // block_k)
    split = 1
    while split < 16 and tiles * split < 2 * sms and k_tiles // (2 * split) >= 2:
        split *= 2
    return {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": block_k, "SPLIT_K": split,
            "num_warps": warps, "num_stages": stages, "GROUP_M": group_m, "FULL_TILE": full}


#: FP8 weights up to this many elements take the GEMV at M = 1; larger ones the tensor-core GEMM,
#: which measured faster on an H200 for 8192x8192 and DeepSeek's 7168x18432 (bench/sweep_gemv.py).
GEMV_FP8_MAX_ELEMENTS = 1 << 24


def use_gemv(m: int, n: int, k: int, elem: int) -> bool:
    """One activation row: 4-bit weights always take the GEMV (faster than the tensor-core tile for
    every measured shape); FP8 weights only when small (Qwen3 qkv, DeepSeek kv_a)."""
    return m == 1 and (elem != 0 or n * k <= GEMV_FP8_MAX_ELEMENTS)


def gemv_config(n: int, k: int, sms: int, elem: int, group: int = 1, words: bool = False,
                kn: bool = False) -> dict[str, int]:
    """BLOCK_N/K, SPLIT_K, DECODE, warps, stages for gemv.gemv_kernel (one activation row).

    A program accumulates BLOCK_N x BLOCK_K products elementwise (at most 64 fp32 registers per
    thread at 4 warps; an E2M1 byte holds two). BLOCK_N divides 128 so a program's rows share one
    FP8 block scales. words: decode whole 32-bit words by inline PTX (DECODE 3; compiled on
    capability >= 8.9, layer-dtype activations). Measured on an H200 with weights from HBM
    (bench/sweep_dense.py, 2026-12-01 R1): INT4 words are fastest in 64-column, 256-deep tiles with
    split-K up to three programs per SM (8192x8192: 17.4 us against 21.4 for 16-column tiles over
    the SMs once), 32 columns where the output alone gives four programs per SM (36864x7168);
    E2M1 words in 32 x 1024 tiles without split-K (8192x8192 MXFP4 27.9 us against 34.0). kn: E2M1
    weights repacked into GPTQ's word layout (formats.words_layout) take INT4's rules."""
    if kn:
        elem = 3
    bn = 16 if elem == 3 else 32
    # E2M1 words: a wide tile amortizes per-tile costs; W4A4's in-register rounding spills at 512
    bk = 1024 if elem in (1, 2) and words else 256
    waves = 1
    if elem == 3 and words:
        bn = 32 if -(-n // 64) >= 4 * sms else 64
        waves = 3
    tiles = -(-n // bn)
    k_tiles = -(-k // bk)
    split = 1
    if not (elem in (1, 2) and words):
        while split < 16 and tiles * split < waves * sms and k_tiles // (2 * split) >= 1:
            split *= 2
    from .gemv import DECODE_E4M3_PTX, DECODE_F16
    return {"BLOCK_N": bn, "BLOCK_K": bk, "SPLIT_K": split, "DECODE": DECODE_E4M3_PTX if words else DECODE_F16,
            "num_warps": 4, "num_stages": 3}


#: Few rows take the swap-AB kernels up to this M (measured to 32 rows; bench/sweep_dense.py).
SWAP_MAX_ROWS = 32
#: From this M on, layer-dtype activations take DEQUANT_MM and FP8 W8A8 per channel SCALED_MM
#: (when LIBRARY_PATHS: on once a GPU run has checked both paths at model shapes).
LIBRARY_MIN_ROWS = 256
LIBRARY_PATHS = True
#: The rules' SCALED_MM (FP8 W8A8 per channel from LIBRARY_MIN_ROWS rows) with torch._scaled_mm's use_fast_accum
#: (cfg FASTACC 1: the float8 products summed over K without a promotion every K tile), as vLLM's sm_90 CUTLASS
#: FP8 kernels (FP8FastAccum schedules) and gemlite sum them. H100, R153 (graph replay, weights from HBM, 256
#: rows): 36864x7168 138.9 -> 119.7 us (gemlite 136.5), 8192x8192 38.2 -> 34.8. The cost is in the error
#: (bench/fastacc_error.py, R153, 2048 x K): random rows 3.1e-3 -> 3.4e-3 / 3.7e-3 / 4.6e-3 at K = 4096 / 7168 /
#: 18432, but same-sign sums (no cancellation) 2e-3 -> 6.6e-2 / 1.2e-1 / 2.6e-1: the accumulator drops the low
#: bits of each product once the sum is large. ORACLE_TRITON_FP8_ACCUM=promote keeps the promotion.
SCALED_MM_FAST_ACCUM = True
ACCUM_ENV = "ORACLE_TRITON_FP8_ACCUM"


def scaled_mm_fast_accum() -> bool:
    """Does the rules' SCALED_MM sum without promotion: SCALED_MM_FAST_ACCUM unless ORACLE_TRITON_FP8_ACCUM is
    "promote" (or "fast"); any other value is an InputError naming the variable and its two values (`oracle run`:
    one line, exit 1)."""
    env = os.environ.get(ACCUM_ENV)
    if env is None:
        return SCALED_MM_FAST_ACCUM
    if env not in ("fast", "promote"):
        raise InputError(f"expected 'fast' (float8 sums without promotion, as vLLM's sm_90 kernels) or 'promote' "
                         f"(a promotion every K tile), got {env!r}", source=ACCUM_ENV)
    return env == "fast"


def swap_config(m: int, n: int, k: int, sms: int, elem: int, words: bool) -> dict[str, int]:
    """gemm.w4_swap_kernel / fp8_swap_kernel launch parameters for M <= SWAP_MAX_ROWS rows.

    Measured on an H200 (bench/sweep_dense.py R1, weights from HBM): INT4 at M=16 on 8192x8192
    26.5 us in 128-column tiles at 8 warps with split-K to about 1.5 programs per SM (the tiled GEMM:
    63.0 us); 64-column tiles once the output alone gives two programs per SM (36864x7168: 102 us);
    E2M1 128-column tiles at 4 warps (MXFP4 46.7 us against 91.5); FP8 W8A8 64-column tiles, K tiles
    of 128, 4 stages (8192x8192 M=16: 39.7 us with the old quantizer, 41.1 for the tiled GEMM)."""
    bm = 16 if m <= 16 else 32
    if elem == 0:
        bn, bk, warps, stages = 64, 128, 4, 4
    else:
        bn, bk, stages = 128, 128, 1
        warps = 8 if elem == 3 else 4
        if -(-n // 128) >= 2 * sms:
            bn, warps = 64, 4
    tiles = -(-n // bn) * -(-m // bm)
    k_tiles = -(-k // bk)
    split = 1
    while split < 16 and tiles * split < 1.5 * sms and k_tiles // (2 * split) >= 1:
        split *= 2
    cfg = {"SWAP": 1, "BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "SPLIT_K": split, "num_warps": warps,
           "num_stages": stages}
    if elem != 0:       # the word decoders (inline PTX): INT4 packed subtraction, E2M1 bit placement
        cfg["DECODE"] = (3 if elem == 3 else 4) if words else 0
    return cfg


#: NVFP4 roundings (act 4) take each quotient from its 16-group's reciprocal and two FMAs
#: (dequant.quotient_by_reciprocal: the IEEE division's bits) instead of a division an element; GPUs only (the
#: interpreter's FMA rounds twice). On since R109 (thirty-third pass, H100): Qwen3-235B's FC2 input rounding at
#: 4096 tokens 383.2 -> 177.8 us alone, the call 3635.1 -> 3529.8 us (medians of 7 interleaved rounds); the same
#: bits as the division on the GPU (tests/test_triton_quotient.py, R109)
FAST_NVFP4_DIV = True


def quantize_activations(x: torch.Tensor, act: int, act_scale: torch.Tensor | None, facts: dict,
                         rid: torch.Tensor | None = None, rid_tiles: bool = False) -> torch.Tensor:
    """x [M, K] rounded through the activation format (gemm.act_qdq_kernel), in x's dtype; with rid (int32 [M]),
    only the rows whose id is >= 0 (the rest left as the fresh buffer holds them), or with rid_tiles every row of
    the 16-row tiles that hold one such row (the other tiles skipped whole)."""
    from .gemm import act_qdq_kernel

    out = fastlaunch.temp(torch.empty_like(x))
    m, k = x.shape
    extra: dict = {"rid_ptr": rid} if rid is not None else {}
    if rid is not None and rid_tiles:
        extra["RID_TILES"] = True
    if act == 4 and FAST_NVFP4_DIV and not facts["dot_f32"]:     # a GPU (dot_f32: the interpreter's facts)
        extra["FAST_DIV"] = True
    fastlaunch.launch(act_qdq_kernel, (-(-m // 16), -(-k // 128), 1), 4, x_ptr=x,
                      xs_ptr=act_scale if act_scale is not None else x, out_ptr=out, M=m, K=k,
                      stride_xm=x.stride(0), stride_om=out.stride(0), ACT=act, BLOCK_M=16, BLOCK_K=128,
                      EXACT_BF16=facts["dot_f32"], **extra)
    return out


def quantize_activation_codes(x: torch.Tensor, act: int, act_scale: torch.Tensor | None,
                              facts: dict, gdc: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """x [M, K] through FP8 (act 1-3: per 1x128 group, token, tensor): E4M3 codes [M, K] (a
    float8_e4m3fn view where the GEMM multiplies float8, else uint8) and fp32 scales:
    [ceil(K/128), M] per group, [M] per token, act_scale itself per tensor. The codes and scales
    are those whose products quantize_activations writes (gemm.act_qdq_kernel, CODES=True; per token
    token_codes where TOKEN_ROW_CODES, TOKEN_SPLIT_CHUNK and TOKEN_SPLIT_MAX_ROWS say).
    gdc: the next launch is a GEMM launched with launch_pdl (sm_90), which may start at once."""
    m, k = x.shape
    chunks = TOKEN_SPLIT_CHUNK and m <= TOKEN_SPLIT_MAX_ROWS
    if act == ACT_TOKEN and TOKEN_ROW_CODES and x.stride(1) == 1 and (k <= ONE_TILE_MAX_K or chunks):
        codes, scales = token_codes(x, facts, gdc, 1 if k <= ONE_TILE_MAX_K else TOKEN_SPLIT_CHUNK)
        return (codes.view(torch.float8_e4m3fn) if facts["fp8_dot"] else codes), scales
    codes = fastlaunch.temp(torch.empty(m, k, dtype=torch.uint8, device=x.device))
    if act == ACT_GROUP:
        scales = fastlaunch.temp(torch.empty(-(-k // 128), m, dtype=torch.float32, device=x.device))
    elif act == ACT_TOKEN:
        scales = fastlaunch.temp(torch.empty(m, dtype=torch.float32, device=x.device))
    else:
        scales = act_scale
    warps, one = 4, False
    if act == ACT_TOKEN and k <= ONE_TILE_MAX_K:    # the whole row in registers: loaded once
        bm, bk, k_programs, one = 1, 1 << (k - 1).bit_length(), 1, True
        warps = 8 if bk <= 8192 else 16
    elif act == ACT_TOKEN:     # a row's amax pass, then its codes: one row x 4096-wide tiles per program
        bm, bk, k_programs, warps = TOKEN_ROWS, TOKEN_K, 1, TOKEN_WARPS
    else:                      # 1x128 groups (or one tensor scale): every rows x 128 tile is independent; a few
        bm, bk, k_programs = min(16, 1 << (m - 1).bit_length()), 128, -(-k // 128)     # rows: no masked rows
    xs = act_scale if act_scale is not None else x
    args = dict(x_ptr=x, xs_ptr=xs, out_ptr=codes, M=m, K=k, stride_xm=x.stride(0), stride_om=codes.stride(0),
                ACT=act, BLOCK_M=bm, BLOCK_K=bk, EXACT_BF16=facts["dot_f32"], scales_ptr=scales, CODES=True,
                ONE_TILE=one, HW_FP8=facts["hw_fp8"] and ACT_QDQ_FAST_CODES, **({"GDC": True} if gdc else {}))
    if act in (ACT_GROUP, ACT_TOKEN) and ACT_QDQ_FAST_CODES and fast_codes_div(x, facts):
        args["FAST_DIV"] = True
    grid = (-(-m // bm), k_programs, 1)
    from .gemm import act_qdq_kernel
    fastlaunch.launch(act_qdq_kernel, grid, warps, **args)
    return (codes.view(torch.float8_e4m3fn) if facts["fp8_dot"] else codes), scales


#: Per-token codes of rows up to ONE_TILE_MAX_K wide from token_codes (fp8_rowgemv.row_codes_kernel: the hardware
#: E4M3 conversion, and on GPUs FAST_CODES_DIV's quotients), not act_qdq_kernel's ONE_TILE, which then took ~45
#: instructions an element (the integer rounding and encoding, the IEEE division; with ACT_QDQ_FAST_CODES it
#: converts and divides as row_codes does). H100, R153 (bench/token_quantizer.py, graph replay, codes and scales equal to torch's float8
#: cast): 256 x 7168 6.8 -> 3.0 us, 256 x 8192 5.4 -> 3.2, 4096 x 7168 61.9 -> 32.1; with the division kept
#: (FAST_CODES_DIV off) 5.2, 3.7 and 47.7.
TOKEN_ROW_CODES = True
#: Per-token and per-group (1x128) quotients x / scale of bf16 rows from the scale's reciprocal on GPUs
#: (dequant.scaled_quotients: the division's bits, checked for every bf16 dividend and every scale amax / 448 by
#: tests/test_triton_quotient.py); per-tensor scales (any float a checkpoint gives) keep the division.
FAST_CODES_DIV = True
#: act_qdq_kernel's FP8 codes (1x128 groups, per tensor, per token above the row kernels) by the hardware conversion
#: and FAST_CODES_DIV's quotients (dequant.quantize_tile_bytes), as row_codes_kernel computes them. Checked on an H100
#: (R155: every act_qdq test bit for bit equal to torch's float8 cast, the block-scaled W8A8 and MoE GPU tests green);
#: 1x128 groups, graph replay (bench/token_quantizer.py): 256 x 7168 4.2 -> 2.9 us, 4096 x 7168 42.0 -> 34.6,
#: 256 x 18432 7.9 -> 5.1, 4096 x 18432 103.6 -> 86.3. scripts/gpu-check with it on (R161, H100): 380 GPU tests and
#: 388 device-aware tests passed, none failed.
ACT_QDQ_FAST_CODES = True


def fast_codes_div(x: torch.Tensor, facts: dict) -> bool:
    """May the FP8 quantizers take x's quotients from the scales' reciprocals: FAST_CODES_DIV, a GPU (the
    interpreter's FMA rounds twice) and bf16 rows (the dividends the exactness check covers)."""
    return FAST_CODES_DIV and not facts["dot_f32"] and x.dtype == torch.bfloat16


#: Per-token codes of rows wider than ONE_TILE_MAX_K, up to TOKEN_SPLIT_MAX_ROWS rows: token_codes in chunks this
#: wide (split_codes_kernel; 0: never), else act_qdq_kernel's two passes. Each chunk's program reads its row's
#: amax over the whole row, so the reads grow with the chunks: H100, R153 (bench/token_quantizer.py, K = 18432),
#: 4096-wide chunks 2.3 / 2.6 / 9.6 us at M = 1 / 16 / 256 against 9.7 / 10.2 / 13.3 for the two passes, and
#: 269.6 against 140.6 at M = 4096 (2048-wide chunks: 14.0 and 467.8 at 256 and 4096 rows).
TOKEN_SPLIT_CHUNK, TOKEN_SPLIT_MAX_ROWS = 4096, 256


def token_codes(x: torch.Tensor, facts: dict, gdc: bool = False, rowq: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token E4M3 codes (uint8 [M, K]) and scales [M] of x (rows contiguous along K), the bytes and scales of
    oracle-emulation's per-token rounding. rowq 1: fp8_rowgemv.row_codes_kernel, one program per row, the whole row
    in registers (16 values per thread up to K = 8192, 4-16 warps). rowq = a power of two CHUNK >=
    formats.ROWQ_SPLIT_MIN (cfg ROWQ of ROWGEMV 3 and of the FP8 swap GEMM): fp8_rowgemv.split_codes_kernel,
    cdiv(K, CHUNK) programs per row, each taking the row's amax itself and writing CHUNK codes (ROWQ_SPLIT_WARPS
    warps). The same bytes and scales either way. gdc: the GEMM launched next with launch_pdl."""
    from .fp8_rowgemv import row_codes_kernel, split_codes_kernel

    check_rowq(rowq)
    m, k = x.shape
    codes = fastlaunch.temp(torch.empty(m, k, dtype=torch.uint8, device=x.device))
    scales = fastlaunch.temp(torch.empty(m, dtype=torch.float32, device=x.device))
    row_k = 1 << (k - 1).bit_length()
    extra: dict = {"GDC": True} if gdc else {}
    if fast_codes_div(x, facts):
        extra["FAST_DIV"] = True
    if rowq == 1:
        fastlaunch.launch(row_codes_kernel, (m, 1, 1), max(4, min(16, row_k // 512)), x_ptr=x, codes_ptr=codes,
                          scales_ptr=scales, K=k, stride_xm=x.stride(0), ROW_K=row_k, HW_FP8=facts["hw_fp8"],
                          **extra)
        return codes, scales
    amax_k = min(row_k, ROWQ_SPLIT_AMAX_K)
    fastlaunch.launch(split_codes_kernel, (m, -(-k // rowq), 1), ROWQ_SPLIT_WARPS, x_ptr=x, codes_ptr=codes,
                      scales_ptr=scales, K=k, stride_xm=x.stride(0), CHUNK=rowq, AMAX_K=amax_k, N_FULL=k // amax_k,
                      TAIL=k % amax_k != 0, HW_FP8=facts["hw_fp8"], **extra)
    return codes, scales


#: Activations up to this many values get their dynamic per-tensor scale from one program
#: (tensor_scale: one launch a plan can repeat); larger ones from torch's reduction.
TENSOR_SCALE_MAX = 1 << 16


def tensor_scale(x: torch.Tensor, divisor: float) -> torch.Tensor:
    """oracle-emulation's dynamic per-tensor scale of x (contiguous, at most TENSOR_SCALE_MAX values):
    amax / divisor, 1 where the amax is 0, as fp32 [1] (gemm.tensor_scale_kernel, one program)."""
    from .gemm import tensor_scale_kernel

    s = fastlaunch.temp(torch.empty(1, dtype=torch.float32, device=x.device))
    fastlaunch.launch(tensor_scale_kernel, (1, 1, 1), 4, x_ptr=x, s_ptr=s, numel=x.numel(), DIV=float(divisor),
                      BLOCK=1024)
    return s


#: tensor_scale_wide: programs at most (two per SM of an H200) and values per program and step (8192 since R110:
#: a 4096 x 4096 input in 8 steps a program, each a load that waits for the one before, where 2048 took 31)
TENSOR_SCALE_PROGRAMS, TENSOR_SCALE_BLOCK = 264, 8192


def tensor_scale_wide(x: torch.Tensor, divisor: float, state: torch.Tensor) -> torch.Tensor:
    """tensor_scale's value for x of any size (contiguous) in one launch of many programs
    (gemm.tensor_scale_wide_kernel), where torch's reduction takes six or seven launches (the MoE's NVFP4
    W4A4 inputs at M=256: ~45 us a call, ninth pass R23). state: int32 [2], zero, kept by the caller between
    calls (the kernel leaves it zero)."""
    from .gemm import tensor_scale_wide_kernel

    s = fastlaunch.temp(torch.empty(1, dtype=torch.float32, device=x.device))
    programs = max(1, min(TENSOR_SCALE_PROGRAMS, -(-x.numel() // TENSOR_SCALE_BLOCK)))
    fastlaunch.launch(tensor_scale_wide_kernel, (programs, 1, 1), 4, x_ptr=x, s_ptr=s, state_ptr=state,
                      numel=x.numel(), DIV=float(divisor), BLOCK=TENSOR_SCALE_BLOCK)
    return s


def scale_from_amax(state: torch.Tensor, divisor: float) -> torch.Tensor:
    """tensor_scale_wide's scale from an amax another launch merged into state[0] (its fp32 bits by an atomic max:
    w4_ws's QACT 2, FC1's epilogue over FC2's input): tensor_scale_wide_kernel with nothing to read, its one
    program the last to arrive, so it turns state[0] into amax / divisor (1 where 0) and leaves state zero."""
    from .gemm import tensor_scale_wide_kernel

    s = fastlaunch.temp(torch.empty(1, dtype=torch.float32, device=state.device))
    fastlaunch.launch(tensor_scale_wide_kernel, (1, 1, 1), 4, x_ptr=state, s_ptr=s, state_ptr=state, numel=0,
                      DIV=float(divisor), BLOCK=TENSOR_SCALE_BLOCK)
    return s


FP8_CODES = (ACT_GROUP, ACT_TOKEN, ACT_TENSOR)
#: Per-token codes: rows and K width of one program, and its warps. A row's scale needs its whole
#: amax first, so each program walks its rows' K twice; the number of steps, not bandwidth, bounds
#: it. Measured on an H200 (bench/sweep_dense.py R1, K = 8192): one row in 4096-wide steps at 8 warps
#: 4.1 / 4.3 / 5.4 us at M = 1 / 16 / 256, against 45.6 / 16.7 / 16.9 us for 4 rows x 1024 (the
#: previous choice) and 7.1 / 7.2 / 7.9 us for one row x 1024 (a program per row fills the GPU from
#: a few hundred rows; fewer steps matter more below). The codes and scales are the same for any
#: tile (a max is exact in any order).
TOKEN_ROWS, TOKEN_K, TOKEN_WARPS = 1, 4096, 8
#: Up to this K a per-token row is quantized from one load (act_qdq_kernel ONE_TILE: at most 32 fp32
#: values per thread at 16 warps); longer rows take the two passes above, which walk K = 18432
#: (DeepSeek's down projection) in nine dependent steps twice: 9.6 us at M = 1 on an H200 (R7)
#: against 3.6 us for one load of K = 8192. One load of K = 18432 (a 32768-wide tile at 16 warps, 118
#: registers, no spills for sm_90) measured slower than the two passes on an H200 (seventh pass R18,
#: bench/quant_onetile_check.py, graph replay, the same codes and scales): the quantizer 11.6 against
#: 10.0 us at M = 16 and 23.4 against 13.0 at M = 256; the whole 7168x18432 W8A8 call 47.8 against 47.5
#: and 83.8 against 69.8 us. So longer rows keep the two passes.
ONE_TILE_MAX_K = 16384


#: cfg ROWQ CHUNK (fp8_rowgemv.split_codes_kernel, per-token codes with each row split into CHUNK-wide programs):
#: the warps of a program and the width of each of its loads for the row's amax (8 bf16 values, 16 bytes, a
#: thread at 8 warps). Compiled for sm_90 (Triton 3.7's ptxas), K = 18432 in nine such loads: the first five
#: issued before the first max, the rest within 70 instructions; at 4 warps and 4096-wide loads (64 bytes a
#: thread) ptxas issued the last 12 of 20 one at a time, each waiting for the one before.
ROWQ_SPLIT_WARPS, ROWQ_SPLIT_AMAX_K = 8, 2048


#: FP8 W8A8 with 2-32 rows on sm_90: chain the quantizer and the swap GEMM by programmatic dependent
#: launch (cfg PDL 1; gemm.fp8_swap_kernel GDC: the GEMM's programs become resident while the quantizer
#: runs and wait for it on the device; cfg PF_L2 / PF_HEAD add an L2 prefetch of their weights before the
#: wait). Off by default: no measured gain on an H200 (graph replay, weights from HBM). R11, with the
#: whole weight share prefetched: 2048x4096 M=16 10.3 us against 9.8 without, 8192x8192 24.2 -> 28.4.
#: Eighth pass R19 (bench/sweep_dense.py, one run): PDL alone 24.2 against 24.4 on 8192x8192 and 9.9
#: against 9.8 on 2048x4096; with 512 bytes of each weight row's head prefetched (PF_HEAD 512) 23.9 and
#: 10.6; evict-first weight loads (EVICT) changed nothing (24.4, 9.8). A tuned entry may turn them on
#: where a sweep finds them faster. The tiled GEMM of many rows (gemm.wgemm_kernel GDC) takes cfg PDL and
#: ROWQ too (sixteenth pass), off by default likewise.
FP8_PDL = 0

#: FP8 W8A8 per token with 2-32 rows: the swap GEMM's programs quantize the rows among themselves
#: (gemm.coop_token_codes) instead of a quantizer launch before it: one launch per call, the same
#: bits. Off by default: measured slower on an H200 (sixth session, graph replay, weights from HBM):
#: M=16 2048x4096 13.0 us (R13, waiters polling atomics) and 13.3 (R14, sleeping waiters) against 9.7
#: and 9.9 for the two launches, 8192x8192 29.7 against 24.2 (R13); M=256 tiles 20.6 against 15.4
#: (R14). A tuned entry may turn it on (cfg COOP 1) where a sweep finds it faster.
FP8_COOP = 0
#: coop_token_codes' chunk: a row up to this long is loaded once (at 4 warps 64 fp32 values a thread,
#: before the main loop needs its registers); longer rows take ceil(K / COOP_K) loads per pass.
COOP_K = 8192
#: The COOP waiters poll with sleeping acquire loads (pdl.wait_until_at_least), not atomics (cfg COOP_SPIN).
COOP_SPIN = 1

#: FP8 W8A8 per token / per tensor with 2-32 rows: the swap GEMM's programs round their own rows
#: (gemm.fp8_swap_kernel QUANT_IN 2, token_rows: each reads its rows' whole K for their amax, then rounds
#: each K tile before the MMA) instead of a quantizer launch first: one launch, no waiting, the same
#: bits. Off by default: measured slower on an H200 (seventh pass, R16, graph replay, weights from HBM,
#: bench/sweep_dense.py "qin"): 2048x4096 M=16 15.2 us at the default split-K 8 against 9.8 for the
#: two launches, and slower the fewer programs share K (split 4 / 2 / 1: 16.6 / 25.3 / 37.7 us);
#: 8192x8192 M=16 46.8-48.1 against 24.3. Each program's serial walk over its rows (the amax chunks,
#: then every K tile rounded in registers) costs more than the launch it saves. cfg QUANT_IN 1 turns it
#: on (a tuned entry may, where a sweep finds it faster). The same rounding inside the tiled GEMM at
#: M=256 (64-128 rows per program) measured 8-20x slower (123-745 us against 15.9-62.9) and was removed.
SWAP_QUANT_IN = 0

#: Call shapes (row counts) per layer with a launch plan (each keeps its small temporaries); more
#: shapes take the ordinary path (the eager graphs, bounded the same way).
MAX_PLANS = 8


@functools.cache
def _jit_kernel(name: str) -> Any:
    """gemm's, gemv's, w4_wgmma's, fp4_gemv's, w4_rowgemv's or fp8_rowgemv's @triton.jit function of that name (imported on
    first use: launch.py's shape rules import no Triton)."""
    from . import fp4_gemv, fp8_rowgemv, gemm, gemv, w4_rowgemv, w4_wgmma
    return getattr(gemm, name, None) or getattr(gemv, name, None) or getattr(w4_wgmma, name, None) or \
        getattr(fp4_gemv, name, None) or getattr(w4_rowgemv, name, None) or getattr(fp8_rowgemv, name)


class DenseGemm:
    """A packed weight and the launch of wgemm_kernel over it; owns the split-K counters."""

    def __init__(self, layout: Layout, n: int, k: int, weight: torch.Tensor, scale: torch.Tensor,
                 zero: torch.Tensor | None, global_scale: torch.Tensor | None, bias: torch.Tensor | None,
                 mode: str = "", weight_format: str = ""):
        self.layout, self.n, self.k = layout, n, k
        self.mode, self.weight_format = mode, weight_format      # the tuned table's key
        self.weight, self.scale, self.bias = weight, scale, bias
        self.zero = zero if zero is not None else scale
        self.global_scale = global_scale if global_scale is not None else scale
        self.facts = device_facts(weight.device)
        self.fused_ok = fused_scales_ok(layout, scale, self.global_scale)     # DECODE 5 may serve it
        self._counters: dict[tuple[int, int], torch.Tensor] = {}
        self._configs: dict[tuple[int, int], dict[str, int]] = {}
        self._plans: dict[tuple, Any] = {}     # planned(): call key -> fastlaunch.Plan, or False (not plannable)

    def launch(self, kernel: str, grid: tuple[int, int, int], cfg: dict[str, int], pdl: bool = False,
               **args: Any) -> None:
        """Launch gemm/gemv's `kernel` over `grid` with `args` and cfg's warps and stages."""
        fastlaunch.launch(_jit_kernel(kernel), grid, cfg["num_warps"], cfg["num_stages"], pdl, **args)

    def planned(self, x: torch.Tensor, rows: int, out_shape: tuple, call: Any,
                keep: tuple = ()) -> torch.Tensor | None:
        """`call(x.view(rows, K))` reshaped to out_shape, replayed from a plan (fastlaunch) from the
        second call of the same row count on (x contiguous on the layer's device; `call` the owner's
        launches of one call on this gemm, always the same for a row count; `keep` its persistent
        tensors besides the gemm's own, e.g. a static activation scale), or None where the caller
        should take its ordinary path: a call whose launches cannot be planned (cuBLAS paths;
        remembered so it is not recorded again), a graph being captured, launch hooks set. The first
        call of a row count runs the ordinary launches while recording them."""
        key = (rows, x.dtype, x.data_ptr() % 16 == 0)
        plan = self._plans.get(key)
        if plan:
            return plan(x, out_shape)
        if plan is not None or len(self._plans) >= MAX_PLANS or torch.cuda.is_current_stream_capturing():
            return None
        x2 = x.view(rows, self.k)
        rec = fastlaunch.recording()
        try:
            y = call(x2)
        finally:
            fastlaunch.stop()
        own = [self.weight, self.scale, self.zero, self.global_scale, self.bias, *self._counters.values(), *keep]
        self._plans[key] = fastlaunch.Plan.build(rec, x2, y, own) or False
        return y.view(out_shape)

    def counters(self, tiles: int, split: int) -> torch.Tensor:
        """Zeroed int32 counters [tiles] kept by the layer: split-K arrivals per tile (split >= 2), or
        coop_token_codes' three sync counters (split 0); kernels leave them at zero."""
        key = (tiles, split)
        c = self._counters.get(key)
        if c is None:
            c = self._counters[key] = torch.zeros(tiles, dtype=torch.int32, device=self.weight.device)
        return c

    def weight_operand(self, codes: bool) -> torch.Tensor:
        """The packed weight as wgemm_kernel reads it: a float8 view for the float8 dot (W8A8)."""
        return self.weight.view(torch.float8_e4m3fn) if codes and self.facts["fp8_dot"] else self.weight

    def __call__(self, x: torch.Tensor, act: int, act_scale: torch.Tensor | None, out_dtype: torch.dtype,
                 config: dict[str, int] | None = None) -> torch.Tensor:
        m = x.shape[0]
        cfg = config
        if config is not None:      # a caller's config (bench variants, tests), checked on every path
            check_config(config, self.layout)
            if (config.get("PROMO") or config.get("FASTACC")) and act not in (ACT_TOKEN, ACT_TENSOR):
                raise ValueError(f"{config} with activations {act}: PROMO and FASTACC serve scales constant along K "
                                 "(per-token or per-tensor activation codes)")
        if cfg is None:
            cfg = self._configs.get((m, act))
            if cfg is None:
                cfg = self._configs[(m, act)] = self.config_for(m, act)
        if cfg.get("DEQUANT_MM") and not act:       # many rows: dequantize once, multiply with cuBLAS
            return self.dequant_mm(x, out_dtype)
        if cfg.get("SCALED_MM"):                    # W8A8 per channel: our codes, cuBLASLt's rowwise GEMM
            if out_dtype == torch.bfloat16:
                return self.scaled_mm(x, act, act_scale, out_dtype, fast_accum=bool(cfg.get("FASTACC")))
            cfg = dense_config(m, self.n, self.k, self.facts["sms"], self.layout.pack)   # rowwise: bf16 out only
        if cfg.get("ROWGEMV"):                       # one row of FP8 W8A8 on CUDA cores (fp8_rowgemv)
            return self.fp8_row_gemv(x, act, act_scale, out_dtype, cfg)
        if cfg.get("REGA"):                          # few rows, decoded words as wgmma's register A operand
            if config is not None:
                check_config(config, self.layout)
            if self.rega_ok(act) and x.dtype == out_dtype == torch.bfloat16:
                return self.rega(x, cfg)
            return self(x, act, act_scale, out_dtype, self.rega_fallback(cfg, m, act))
        if cfg.get("WS"):                            # many rows, the decode in its own warps (w4_ws)
            if config is not None:
                check_config(config, self.layout)
            if self.ws_ok(act) and x.dtype == out_dtype == torch.bfloat16:
                return self.ws(x, cfg)
            return self(x, act, act_scale, out_dtype, self.rule_config(m, act))
        if cfg.get("WG"):                            # many rows, 4-bit words decoded into wgmma's A operand
            if config is not None:
                check_config(config, self.layout)
            return self.wgmma(x, out_dtype, cfg)
        if "SWAP" in cfg:                            # few rows on tensor cores, weights as the A operand
            if act in FP8_CODES:
                quant_in = self.quant_in(x, act, cfg, SWAP_QUANT_IN)
                if quant_in:
                    return self.fp8_swap(x, act_scale if act == ACT_TENSOR else x, act, out_dtype, cfg, quant_in)
                if self.coop_ok(x, act, cfg):
                    return self.fp8_swap_coop(x, out_dtype, cfg)
                pdl = bool(cfg.get("PDL", FP8_PDL)) and self.facts["pdl"]
                codes, xs = self.fp8_codes(x, act, act_scale, cfg, pdl)
                return self.fp8_swap(codes, xs, act, out_dtype, cfg, pdl=pdl)
            return self.swap(x, out_dtype, cfg)
        if "DECODE" in cfg:                          # a one-row (GEMV) configuration
            return self.gemv(x, act, act_scale, out_dtype, cfg)
        xs, coop, pdl = self.scale, None, False
        if act in FP8_CODES and self.coop_ok(x, act, cfg, default=0):    # the programs quantize the rows
            coop = (x, self.counters(3, 0))
            x, xs = self.coop_buffers(x)
        elif act in FP8_CODES:                       # W8A8: E4M3 codes and their scales
            pdl = bool(cfg.get("PDL", FP8_PDL)) and self.facts["pdl"]
            x, xs = self.fp8_codes(x, act, act_scale, cfg, pdl)
        elif act:
            x = quantize_activations(x, act, act_scale, self.facts)
        lay = self.layout
        y = torch.empty(m, self.n, dtype=out_dtype, device=x.device)
        grid_n, grid_m = -(-self.n // cfg["BLOCK_N"]), -(-m // cfg["BLOCK_M"])
        split = cfg["SPLIT_K"]
        part, cnt = self.workspace(m, grid_n * grid_m, split, y)
        codes = act in FP8_CODES
        self.launch(
            "wgemm_kernel", (grid_n, grid_m, split), cfg, pdl,
            x_ptr=x, w_ptr=self.weight_operand(codes), s_ptr=self.scale, z_ptr=self.zero, g_ptr=self.global_scale,
            b_ptr=self.bias if self.bias is not None else self.scale, y_ptr=y, part_ptr=part, cnt_ptr=cnt, as_ptr=xs,
            M=m, N=self.n, K=self.k, stride_xm=x.stride(0), stride_ym=y.stride(0),
            stride_wn=lay.stride_wn, stride_wk=lay.stride_wk, stride_sn=lay.stride_sn, stride_sk=lay.stride_sk,
            stride_zk=lay.stride_zk, stride_as=m, ELEM=lay.elem, PACK=lay.pack, GROUP=lay.group, SCALE_ROWS=lay.scale_rows,
            HAS_ZERO=lay.stride_zk != 0, EXACT_W=bool(act), HAS_BIAS=self.bias is not None, SPLIT_K=split,
            BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"], BLOCK_K=cfg["BLOCK_K"],
            HW_FP8=self.facts["hw_fp8"], DOT_F32=self.facts["dot_f32"], OUT_F16=out_dtype == torch.float16,
            A_CODES=act if codes else 0, FP8_DOT=codes and self.facts["fp8_dot"],
            UNIFORM_WS=codes and lay.scale_rows % cfg["BLOCK_N"] == 0, EVEN_K=self.k % cfg["BLOCK_K"] == 0,
            FULL_TILE=self.full_tile(cfg), GROUP_M=cfg.get("GROUP_M", 1), KN=is_words(lay),
            **({"GDC": True} if pdl else {}), **({"PROMO": True} if cfg.get("PROMO") and codes else {}),
            **({"FASTACC": True} if cfg.get("FASTACC") and codes else {}),
            **self.coop_args(coop, cfg))
        return y

    def fp8_codes(self, x: torch.Tensor, act: int, act_scale: torch.Tensor | None, cfg: dict[str, int],
                  pdl: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """The E4M3 codes (the float8 view where the GEMM multiplies float8) and scales an FP8 W8A8 GEMM
        multiplies: per-token rows from fp8_rowgemv's row quantizers where cfg ROWQ names one (row_codes:
        a program per row or per row chunk, where quantize_activation_codes gives a program 16 rows), else
        quantize_activation_codes. pdl: the GEMM is launched next with launch_pdl (the quantizer with GDC)."""
        if cfg.get("ROWQ") and act == ACT_TOKEN:
            codes, xs = token_codes(x, self.facts, pdl, cfg["ROWQ"])
            return (codes.view(torch.float8_e4m3fn) if self.facts["fp8_dot"] else codes), xs
        return quantize_activation_codes(x, act, act_scale, self.facts, gdc=pdl)

    def quant_in(self, x: torch.Tensor, act: int, cfg: dict[str, int], default: int = 0) -> int:
        """Does the swap FP8 GEMM round the activations itself (fp8_swap_kernel QUANT_IN): 1 for one row
        (the default), 2 for more rows (token_rows; cfg QUANT_IN 1, default SWAP_QUANT_IN), 0 where a
        quantizer launch runs first. Per-token or
        per-tensor codes, contiguous rows along K."""
        one = x.shape[0] == 1 and "SWAP" in cfg
        if act not in (ACT_TOKEN, ACT_TENSOR) or x.stride(1) != 1 or not cfg.get("QUANT_IN", 1 if one else default):
            return 0
        return 1 if one else 2

    def quant_in_args(self, quant_in: int, cfg: dict[str, int]) -> dict[str, Any]:
        """The kernel arguments of QUANT_IN: the rows' amax chunk, 32 values a thread per load and in the
        running max (AMAX_K x BLOCK_M elements; one row: the whole row in at most 8192-wide loads)."""
        if not quant_in:
            return {}
        width = 8192 if quant_in == 1 else max(16, 32 * 32 * cfg["num_warps"] // cfg["BLOCK_M"])
        return {"QUANT_IN": quant_in, "AMAX_K": min(1 << (self.k - 1).bit_length(), width)}

    def full_tile(self, cfg: dict[str, int]) -> int:
        """wgemm_kernel's FULL_TILE for cfg: 0 per-nibble sub-tiles, 1 whole 4-bit tiles, 2 whole 4-bit
        tiles (E2M1 and INT4) decoded a word at a time by inline PTX (needs capability >= 8.9; else 1)."""
        full = cfg.get("FULL_TILE", 0) if self.layout.pack > 1 else 0
        if full == 2 and not self.facts["hw_fp8"]:
            full = 1
        return full

    def config_for(self, m: int, act: int = 0) -> dict[str, int]:
        """The launch parameters an M-row call uses: a GEMV configuration (it has DECODE) or the
        tensor-core GEMM's (the tuned table's entry for this device, shape and M bucket, else the
        shape rules). The one place the choice is made (calls and warm-up keys)."""
        from .tuned import lookup
        found = lookup(self.facts["name"], "dense", self.mode, self.n, self.k, m, traits=device_traits(self.facts))
        if found is not None and found.get("REGA") and not self.serves(found, m, act):
            return self.rega_fallback(found, m, act)     # the swap entry it replaced, else the rules
        if found is not None and self.serves(found, m, act):
            return found if {"SWAP", "DECODE", "WG", "ROWGEMV", "WS"} & found.keys() else {"SPLIT_K": 1, "GROUP_M": 1, "FULL_TILE": 0,
                                                                       **found}
        return self.rule_config(m, act)

    def rega_fallback(self, cfg: dict[str, int], m: int, act: int) -> dict[str, int]:
        """The launch parameters of a call a REGA config cannot serve (fp16 activations or output; a weight
        or device w4_rega does not cover): the swap entry the REGA entry replaced where it carries it
        (formats.rega_swap) and that serves this weight, else the shape rules' choice (rule_config)."""
        swap = rega_swap(cfg)
        return swap if swap is not None and self.serves(swap, m, act) else self.rule_config(m, act)

    def rule_config(self, m: int, act: int = 0) -> dict[str, int]:
        """The shape rules' launch parameters for an M-row call (config_for's choice where no tuned entry
        serves it): cuBLAS from LIBRARY_MIN_ROWS rows, the swap-AB kernels for few rows, the GEMV for one
        row where it is faster, else the tiled GEMM."""
        lay, sms, words = self.layout, self.facts["sms"], self.facts["hw_fp8"] and act == 0
        if LIBRARY_PATHS and m >= LIBRARY_MIN_ROWS and not self.facts["dot_f32"]:
            if act == 0:
                return {"DEQUANT_MM": 1}
            if self.scaled_mm_ok(act) and self.facts["fp8_dot"]:
                return {"SCALED_MM": 1, **({"FASTACC": 1} if scaled_mm_fast_accum() else {})}
        fp8_codes = lay.elem == FP8 and act in FP8_CODES
        if m <= SWAP_MAX_ROWS and self.swap_ok(act) and (lay.elem != FP8 or fp8_codes) and \
                not (m == 1 and use_gemv(m, self.n, self.k, lay.elem) and not fp8_codes):
            return swap_config(m, self.n, self.k, sms, lay.elem, words)
        if use_gemv(m, self.n, self.k, lay.elem):
            return gemv_config(self.n, self.k, sms, lay.elem, lay.group, words=words, kn=is_words(lay))
        return dense_config(m, self.n, self.k, sms, lay.pack)

    def dequant_mm(self, x: torch.Tensor, out_dtype: torch.dtype) -> torch.Tensor:
        """Many rows, layer-dtype activations (W8A16 / W4A16): the weight dequantized once into a
        transient [N, K] buffer in the layer dtype (gemm.dequant_kernel: the reference's values), then
        one cuBLAS product with the bias fused. At hundreds of rows and more the dequantizing pass
        (read the packed weight, write 2 bytes per weight) costs less than decoding every weight tile
        once per row tile inside our own GEMM; the buffer (N x K x 2 bytes) is the price, so the tuned
        table chooses it per shape and M bucket."""
        fastlaunch.spoil("cuBLAS product")
        return torch.nn.functional.linear(x, self.dequantized(out_dtype), self.bias)

    def dequantized(self, out_dtype: torch.dtype) -> torch.Tensor:
        """The whole weight [N, K] in out_dtype as the reference dequantizes it (gemm.dequant_kernel;
        E2M1 words by bit placement where the device has the PTX decoders)."""
        lay = self.layout
        buf = torch.empty(self.n, self.k, dtype=out_dtype, device=self.weight.device)
        bn, bk = 64, 128
        self.launch(
            "dequant_kernel", (-(-self.n // bn), -(-self.k // bk), 1), {"num_warps": 4, "num_stages": 1},
            w_ptr=self.weight, s_ptr=self.scale, z_ptr=self.zero, g_ptr=self.global_scale, out_ptr=buf,
            N=self.n, K=self.k, stride_wn=lay.stride_wn, stride_wk=lay.stride_wk, stride_sn=lay.stride_sn,
            stride_sk=lay.stride_sk, stride_zk=lay.stride_zk, ELEM=lay.elem, PACK=lay.pack, GROUP=lay.group,
            SCALE_ROWS=lay.scale_rows, HAS_ZERO=lay.stride_zk != 0, HW_FP8=self.facts["hw_fp8"], BLOCK_N=bn,
            BLOCK_K=bk, EXACT_BF16=self.facts["dot_f32"], OUT_F16=out_dtype == torch.float16,
            WORDS=lay.elem in (E2M1_MX, E2M1_NV) and self.facts["hw_fp8"], KN=is_words(lay))
        return buf

    def scaled_mm_ok(self, act: int) -> bool:
        """Can the GEMM go to torch._scaled_mm rowwise: FP8 weights with one scale per channel or per
        tensor, W8A8 per token or per tensor (both expand to rowwise scale vectors)."""
        return self.layout.elem == FP8 and self.layout.group == 1 and act in (ACT_TOKEN, ACT_TENSOR) and \
            self.n % 16 == 0 and self.k % 16 == 0

    def scaled_mm(self, x: torch.Tensor, act: int, act_scale: torch.Tensor | None,
                  out_dtype: torch.dtype, fast_accum: bool = False) -> torch.Tensor:
        """W8A8 with scales constant along K: the activation codes from our quantizer (one launch),
        the product by torch._scaled_mm with rowwise scales (cuBLASLt; measured faster than our
        tiles from a few hundred rows on, bench/sweep_dense.py) and the bias fused into it (cuBLASLt's
        rowwise scaling writes bf16 only: other layer dtypes keep the tiles). fast_accum (cfg FASTACC; the rules'
        choice, scaled_mm_fast_accum): torch._scaled_mm's use_fast_accum, no promotion over K."""
        m = x.shape[0]
        fastlaunch.spoil("torch._scaled_mm")
        codes, xs = quantize_activation_codes(x, act, act_scale, self.facts)
        sa = xs.reshape(-1, 1).expand(m, 1) if act == ACT_TENSOR else xs.reshape(m, 1)
        sb = self.scale.reshape(1, -1).expand(1, self.n)
        return torch._scaled_mm(codes.view(torch.float8_e4m3fn), self.weight.view(torch.float8_e4m3fn).t(),
                                scale_a=sa.contiguous(), scale_b=sb.contiguous(), bias=self.bias, out_dtype=out_dtype,
                                use_fast_accum=fast_accum)

    def serves(self, cfg: dict[str, int], m: int, act: int) -> bool:
        """Can a tuned entry's path serve this weight and call (the table is keyed by mode and shape,
        not by group size or device capability): a swap entry needs swap_ok, a GEMV entry one row,
        the PTX word decoders capability >= 8.9 and layer-dtype activations; an entry with KN 1 was
        measured on E2M1 weights in the word layout (weights.repack_words), one without on any other."""
        if cfg.get("DECODE") in (3, 4, 5) and not (self.facts["hw_fp8"] and act == 0):
            return False
        if cfg.get("DECODE") == 5 and not self.fused_ok:
            return False
        if cfg.get("SCALED_MM"):
            return self.scaled_mm_ok(act) and self.facts["fp8_dot"]
        if cfg.get("ROWGEMV"):
            return m == 1 and self.row_gemv_ok(act) and self.tile_gemv_fits(cfg)
        if cfg.get("DEQUANT_MM"):
            return act == 0
        if bool(cfg.get("KN")) != is_words(self.layout):    # measured on the other E2M1 layout (KN 1: words)
            return False
        if cfg.get("SWAP"):
            return self.swap_ok(act)
        if cfg.get("REGA"):
            return self.rega_ok(act) and self.rega_fits(cfg)
        if cfg.get("WS"):       # K tiles inside this layer's INT4 groups (the table is not keyed by group)
            bk = cfg.get("BK", WS_BK)
            return self.ws_ok(act) and self.k % bk == 0 and (self.layout.elem != INT4 or self.layout.group % bk == 0)
        if cfg.get("WG"):       # and K tiles inside this layer's groups (the table is not keyed by group)
            if not self.wgmma_ok(act):
                return False
        if cfg.get("W4ROW"):
            return m == 1 and act == 0 and self.w4_tile_fits(cfg)
        if cfg.get("ROWS"):
            return m == 1 and act == 0 and self.layout.elem in (E2M1_MX, E2M1_NV) and not is_words(self.layout)
        if "DECODE" in cfg:
            return m == 1
        try:
            check_config(cfg, self.layout)
        except ValueError:
            return False
        return True

    def workspace(self, m: int, tiles: int, split: int, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Split-K partials [split, M, N] (fp32) and the per-tile arrival counters (placeholders at split 1)."""
        if split == 1:
            return y, self.scale
        part = fastlaunch.temp(torch.empty(split, m, self.n, dtype=torch.float32, device=y.device))
        return part, self.counters(tiles, split)

    def swap_ok(self, act: int) -> bool:
        """Can a swap-AB kernel serve this weight: gemm.w4_swap_kernel for 4-bit weights with
        layer-dtype activations (INT4 with 128-wide groups: a K tile is one group, 16 words, one
        16-deep MMA step per nibble; E2M1 with K a multiple of 128), gemm.fp8_swap_kernel for FP8
        W8A8 with scales constant along K (per-channel / per-tensor weights, per-token / per-tensor
        activations)."""
        lay = self.layout
        if lay.elem == FP8:
            return lay.group == 1 and act in (ACT_TOKEN, ACT_TENSOR)
        return act == 0 and (lay.group == 128 if lay.elem == INT4 else self.k % 128 == 0)

    def rega_ok(self, act: int) -> bool:
        """Can w4_rega.w4_rega_kernel serve this weight: INT4 with 128-wide groups, or MXFP4 / NVFP4 words
        whose scales the fused decoder covers (fused_ok), K a multiple of 128, layer-dtype activations, an
        sm_90 GPU (wgmma; the kernel is Gluon, compiled only). Calls with other than bf16 in and out take
        the swap kernel (__call__)."""
        lay = self.layout
        weights = (lay.elem == INT4 and lay.group == 128) or (is_words(lay) and self.fused_ok)
        return (act == 0 and weights and self.k % 128 == 0 and self.weight.device.type == "cuda"
                and not interpreting() and _capability(self.weight.device.index or 0) == (9, 0))

    def rega_fits(self, cfg: dict[str, int]) -> bool:
        """Does a REGA config cover this K: PF 0 (every K tile of a program loaded up front) needs exactly XT
        tiles per program, SPLIT_K x XT = K / 128; PF 1 / 2 any split."""
        return cfg.get("PF", 2) != 0 or cfg["SPLIT_K"] * cfg["XT"] * 128 == self.k

    def rega(self, x: torch.Tensor, cfg: dict[str, int]) -> torch.Tensor:
        """Few rows of 4-bit W4A16, bf16: w4_rega.w4_rega_kernel (16 activation rows and 16 x num_warps weight
        rows per program, K split SPLIT_K ways, XT activation tiles per shared-memory chunk, words PF tiles
        ahead; EARLY / TABLE / WAIT as w4_rega_kernel says, w4_rega.launch_keys; one launch)."""
        from .w4_rega import launch_keys, w4_rega_kernel

        if not self.rega_fits(cfg):
            raise ValueError(f"REGA PF 0 with SPLIT_K {cfg['SPLIT_K']} x XT {cfg['XT']} K tiles for K={self.k}: "
                             f"PF 0 needs SPLIT_K x XT = K / 128")
        m = x.shape[0]
        if x.stride(1) != 1:
            x = x.contiguous()
        y = torch.empty(m, self.n, dtype=torch.bfloat16, device=x.device)
        warps, split, lay = cfg["num_warps"], cfg["SPLIT_K"], self.layout
        grid = (-(-self.n // (16 * warps)), -(-m // 16), split)
        part, cnt = self.workspace(m, grid[0] * grid[1], split, y)
        fastlaunch.launch(w4_rega_kernel, grid, warps, None,
                          x_ptr=x, w_ptr=self.weight, s_ptr=self.scale, z_ptr=self.zero, g_ptr=self.global_scale,
                          b_ptr=self.bias if self.bias is not None else self.scale, y_ptr=y, part_ptr=part,
                          cnt_ptr=cnt, M=m, N=self.n, K=self.k, stride_xm=x.stride(0), stride_ym=y.stride(0),
                          stride_wn=lay.stride_wn, stride_wk=lay.stride_wk, stride_sn=lay.stride_sn,
                          stride_sk=lay.stride_sk, stride_zk=lay.stride_zk, ELEM=lay.elem, GROUP=lay.group,
                          HAS_ZERO=lay.stride_zk != 0, HAS_BIAS=self.bias is not None, SPLIT_K=split, XT=cfg["XT"],
                          PF=cfg.get("PF", 2), **launch_keys(cfg, self.scale.data_ptr(), lay.stride_sn))
        return y

    def ws_ok(self, act: int) -> bool:
        """Can w4_ws.w4_ws_kernel serve this weight: 4-bit words in GPTQ's [K/8, N] layout (INT4 with groups of a
        multiple of its 64-wide K tile; E2M1 words whose scales the fused decoder covers), K a multiple of 64,
        layer-dtype activations, an sm_90 GPU (Gluon: wgmma and warp specialization). bf16 calls only
        (__call__ gives the others the shape rules' path)."""
        lay = self.layout
        weights = (lay.elem == INT4 and lay.group % WS_BK == 0) or (is_words(lay) and self.fused_ok)
        return (act == 0 and weights and self.k % WS_BK == 0 and lay.stride_wn == 1
                and self.weight.device.type == "cuda" and not interpreting()
                and _capability(self.weight.device.index or 0) == (9, 0))

    def ws(self, x: torch.Tensor, cfg: dict[str, int]) -> torch.Tensor:
        """Many rows of 4-bit W4A16, bf16: w4_ws.w4_ws_kernel (16 x num_warps weight rows and BM activation rows
        per program, DW decode warps beside them, a ring of STAGES K tiles of BK, 64 unless told; one launch)."""
        from .w4_ws import tma_ok, w4_ws_kernel, w_tma_desc, x_tma_desc

        m = x.shape[0]
        xt = cfg.get("XTMA", 0)
        if x.stride(1) != 1:
            x = x.contiguous()
        if xt and not tma_ok(x):    # TMA wants a 16-byte base and rows: a fresh copy has them
            x = x.clone(memory_format=torch.contiguous_format)
        y = torch.empty(m, self.n, dtype=torch.bfloat16, device=x.device)
        warps, bm, lay = cfg["num_warps"], cfg["BM"], self.layout
        grid = (-(-self.n // (16 * warps)), -(-m // bm), 1)
        pt = pt_programs(grid[0] * grid[1], self.k // cfg.get("BK", WS_BK), cfg["STAGES"], x.device) \
            if cfg.get("PT") else 0
        if pt:      # PT: a persistent program an SM over the grid's output tiles
            grid = (pt, 1, 1)
        if xt:      # the descriptor holds this call's x: a replayed plan would read another call's
            fastlaunch.spoil("a TMA descriptor of the call's activations")
        pp = cfg.get("PP", 0)       # PP: the kernel's own warps are the DW decode warps, the MMA warpgroups workers
        words = self.weight.view(torch.int32)
        wt = cfg.get("WT", 0) if tma_ok(words) else 0       # WT 0: the same words through registers
        fastlaunch.launch(w4_ws_kernel, grid, cfg["DW"] if pp else warps, None, maxnreg=cfg["MAXNREG"],
                          x_ptr=x, w_ptr=self.weight, s_ptr=self.scale, z_ptr=self.zero, g_ptr=self.global_scale,
                          b_ptr=self.bias if self.bias is not None else self.scale, y_ptr=y, M=m, N=self.n, K=self.k,
                          stride_xm=x.stride(0), stride_ym=y.stride(0), stride_wk=lay.stride_wk,
                          stride_sk=lay.stride_sk, stride_zk=lay.stride_zk, ELEM=lay.elem, GROUP=lay.group,
                          HAS_ZERO=lay.stride_zk != 0, HAS_BIAS=self.bias is not None, BM=bm,
                          BK=cfg.get("BK", WS_BK), STAGES=cfg["STAGES"], DW=cfg["DW"], DREGS=cfg["DREGS"],
                          PFENCE=cfg.get("PFENCE", 0), XCP=cfg.get("XCP", 0), WPF=cfg.get("WPF", 2),
                          MW=cfg.get("MW", 1), XTMA=xt, PP=pp, DP=cfg.get("DP", 1),
                          x_desc=x_tma_desc(x, bm) if xt else None, WT=wt,
                          w_desc=w_tma_desc(self, words, [cfg.get("BK", WS_BK) // 8, 16 * warps]) if wt else None,
                          PT=cfg["PT"] if pt else 0)
        return y

    def wgmma_ok(self, act: int) -> bool:
        """Can w4_wgmma.w4_wgmma_kernel serve this weight: 4-bit words in GPTQ's [K/8, N] layout (INT4,
        or E2M1 repacked at load), layer-dtype activations, the PTX word decoders (capability >= 8.9)."""
        lay = self.layout
        return act == 0 and self.facts["hw_fp8"] and (is_words(lay) or lay.elem == INT4) and self.k % 8 == 0

    def wgmma(self, x: torch.Tensor, out_dtype: torch.dtype, cfg: dict[str, int]) -> torch.Tensor:
        """Many rows of 4-bit W4A16: w4_wgmma.w4_wgmma_kernel (one launch; no dequantized copy)."""
        m = x.shape[0]
        if x.stride(1) != 1:
            x = x.contiguous()
        y = torch.empty(m, self.n, dtype=out_dtype, device=x.device)
        grid_n, grid_m, split = -(-self.n // cfg["BLOCK_N"]), -(-m // cfg["BLOCK_M"]), cfg["SPLIT_K"]
        part, cnt = self.workspace(m, grid_n * grid_m, split, y)
        lay = self.layout
        self.launch(
            "w4_wgmma_kernel", (grid_n * grid_m, split, 1), cfg,
            x_ptr=x, w_ptr=self.weight, s_ptr=self.scale, z_ptr=self.zero, g_ptr=self.global_scale,
            b_ptr=self.bias if self.bias is not None else self.scale, y_ptr=y, part_ptr=part, cnt_ptr=cnt,
            M=m, N=self.n, K=self.k, stride_xm=x.stride(0), stride_ym=y.stride(0), stride_wk=lay.stride_wk,
            stride_sk=lay.stride_sk, stride_zk=lay.stride_zk, ELEM=lay.elem, HAS_ZERO=lay.stride_zk != 0,
            HAS_BIAS=self.bias is not None, GROUP=lay.group, SPLIT_K=split, BLOCK_M=cfg["BLOCK_M"],
            BLOCK_N=cfg["BLOCK_N"], BLOCK_K=cfg["BLOCK_K"], GROUP_M=cfg.get("GROUP_M", 8),
            OUT_F16=out_dtype == torch.float16, EVEN_K=self.k % cfg["BLOCK_K"] == 0)
        return y

    def coop_ok(self, x: torch.Tensor, act: int, cfg: dict[str, int], default: int = FP8_COOP) -> bool:
        """Do the GEMM's programs quantize the rows themselves (gemm.coop_token_codes): per-token
        codes, more than one row, in one contiguous block, cfg COOP (default: FP8_COOP for the swap
        kernel, off for the tiled one, where only a tuned entry turns it on), no PDL chain asked for."""
        return act == ACT_TOKEN and x.shape[0] > 1 and x.is_contiguous() and bool(cfg.get("COOP", default)) \
            and not cfg.get("PDL", FP8_PDL)

    def coop_buffers(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """This call's empty code [M, K] and scale [M] buffers that a COOP grid fills (the codes as the
        GEMM reads them: a float8 view where it multiplies float8)."""
        codes = fastlaunch.temp(torch.empty(x.shape[0], self.k, dtype=torch.uint8, device=x.device))
        scales = fastlaunch.temp(torch.empty(x.shape[0], dtype=torch.float32, device=x.device))
        return (codes.view(torch.float8_e4m3fn) if self.facts["fp8_dot"] else codes), scales

    def coop_args(self, coop: tuple | None, cfg: dict[str, int]) -> dict[str, Any]:
        """The COOP kernel arguments for coop = (x, its three sync counters), or none (coop None)."""
        if coop is None:
            return {}
        return {"xin_ptr": coop[0], "sync_ptr": coop[1], "COOP": True,
                "COOP_K": min(1 << (self.k - 1).bit_length(), cfg.get("COOP_K", COOP_K)),
                "COOP_SPIN": bool(cfg.get("COOP_SPIN", COOP_SPIN)) and not self.facts["dot_f32"]}

    def fp8_swap_coop(self, x: torch.Tensor, out_dtype: torch.dtype, cfg: dict[str, int]) -> torch.Tensor:
        """Few rows of FP8 W8A8 per token in one launch: gemm.fp8_swap_kernel COOP, whose programs write
        the codes and scales act_qdq_kernel would (into this call's temporaries) before the product."""
        codes, scales = self.coop_buffers(x)
        return self.fp8_swap(codes, scales, ACT_TOKEN, out_dtype, cfg, coop=(x, self.counters(3, 0)))

    def fp8_swap(self, codes: torch.Tensor, xs: torch.Tensor, act: int, out_dtype: torch.dtype,
                 cfg: dict[str, int], quant_in: int = 0, pdl: bool = False,
                 coop: tuple | None = None) -> torch.Tensor:
        """Few rows of FP8 W8A8 on the activation codes: gemm.fp8_swap_kernel. quant_in 1 (one row) or
        2 (any rows, quant_in()): `codes` is x itself in the layer dtype, rounded inside the kernel
        (QUANT_IN; xs: the per-tensor scale, or anything per token), so no quantizer launch: the
        default at M = 1, cfg QUANT_IN 0 turns it off. Measured on an H200 (bench/sweep_dense.py R5, weights from HBM, graph
        replay), against the quantizer launch: 8192x8192 21.7 us against 23.7, 36864x7168 67.2 against
        69.5, 2048x4096 7.4 against 9.1, 7168x18432 48.1 against 47.8 (K = 18432: three loads for the
        row's amax in every program). pdl (cfg PDL, sm_90): launched with launch_pdl after a quantizer
        launched with GDC, so its programs become resident while the quantizer runs and wait for it on the
        device (gemm.fp8_swap_kernel GDC; cfg PF_L2 / PF_HEAD add an L2 prefetch of their weights before
        the wait, cfg EVICT evict-first weight loads). coop (x, its three sync counters): the kernel writes `codes`
        and `xs` from x itself first (fp8_swap_coop)."""
        m = codes.shape[0]
        y = torch.empty(m, self.n, dtype=out_dtype, device=codes.device)
        grid_n, grid_m, split = -(-self.n // cfg["BLOCK_N"]), -(-m // cfg["BLOCK_M"]), cfg["SPLIT_K"]
        part, cnt = self.workspace(m, grid_n * grid_m, split, y)
        self.launch(
            "fp8_swap_kernel", (grid_n, grid_m, split), cfg, pdl,
            x_ptr=codes, as_ptr=xs, w_ptr=self.weight_operand(True), s_ptr=self.scale,
            b_ptr=self.bias if self.bias is not None else self.scale, y_ptr=y, part_ptr=part, cnt_ptr=cnt,
            M=m, N=self.n, K=self.k, stride_xm=codes.stride(0), stride_ym=y.stride(0),
            stride_wn=self.layout.stride_wn, stride_sn=self.layout.stride_sn, A_CODES=act,
            HAS_BIAS=self.bias is not None, SPLIT_K=split, BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"],
            BLOCK_K=cfg["BLOCK_K"], HW_FP8=self.facts["hw_fp8"], FP8_DOT=self.facts["fp8_dot"],
            DOT_F32=self.facts["dot_f32"], EVEN_K=self.k % cfg["BLOCK_K"] == 0, **self.quant_in_args(quant_in, cfg),
            **({"GDC": True} if pdl else {}),
            **({"PF_L2": True} if cfg.get("PF_L2") and self.facts["pdl"] and self.k % 16 == 0 else {}),
            **({"EVICT": True} if cfg.get("EVICT") else {}), **self.head_args(cfg), **self.coop_args(coop, cfg))
        return y

    def head_args(self, cfg: dict[str, int]) -> dict[str, Any]:
        """fp8_swap_kernel's PF_HEAD (cfg PF_HEAD bytes, sm_90's bulk L2 prefetch: 16-byte multiples, at most
        K): each program first asks L2 for the head of each of its weight rows' K range, so HBM streams
        while it takes its row's amax (QUANT_IN) or waits for the quantizer (PDL)."""
        head = cfg.get("PF_HEAD", 0)
        if not head or not self.facts["pdl"] or self.k % 16 or head % 16 or head > self.k:
            return {}
        return {"PF_HEAD": head}

    def row_gemv_ok(self, act: int) -> bool:
        """Can fp8_rowgemv.fp8_tile_gemv_kernel serve this weight: FP8 with scales constant along K (per
        channel / per tensor), W8A8 per-token or per-tensor activations."""
        return self.layout.elem == FP8 and self.layout.group == 1 and act in (ACT_TOKEN, ACT_TENSOR)

    def fp8_row_gemv(self, x: torch.Tensor, act: int, act_scale: torch.Tensor | None, out_dtype: torch.dtype,
                     cfg: dict[str, int]) -> torch.Tensor:
        """One row of FP8 W8A8 (cfg ROWGEMV 3, a tuned entry's choice at M = 1): fp8_tile_gemv."""
        if x.shape[0] != 1 or not self.row_gemv_ok(act) or (act == ACT_TENSOR and act_scale is None):
            raise ValueError(f"ROWGEMV serves one row of FP8 W8A8 per channel / per tensor (a per-tensor scale "
                             f"given), not {x.shape[0]} rows, act {act}, weight {self.layout}")
        if x.stride(1) != 1:
            x = x.contiguous()
        return self.fp8_tile_gemv(x, act, act_scale, out_dtype, cfg)

    def tile_gemv_fits(self, cfg: dict[str, int]) -> bool:
        """ROWGEMV 3 (the only row GEMV) covers K in SPLIT_K tiles of BLOCK_K, one per program
        (SPLIT_K = cdiv(K, BLOCK_K))."""
        return cfg.get("ROWGEMV") == 3 and cfg["SPLIT_K"] == -(-self.k // cfg["BLOCK_K"])

    def fp8_tile_gemv(self, x: torch.Tensor, act: int, act_scale: torch.Tensor | None, out_dtype: torch.dtype,
                      cfg: dict[str, int]) -> torch.Tensor:
        """cfg ROWGEMV 3: fp8_rowgemv.fp8_tile_gemv_kernel, each program's [BLOCK_N, BLOCK_K] weight tile in one
        load. The row's codes from the quantizer launch (cfg PDL 1 on sm_90: the GEMV launched with launch_pdl,
        its weight loads issued before it waits for the quantizer; cfg ROWQ 1: per-token codes from row_codes, not
        quantize_activation_codes), or with cfg QUANT_IN 1 rounded by every program (one launch). cfg EVICT 1:
        evict-first weight loads."""
        if cfg.get("ROWGEMV") != 3:
            raise ValueError(f"ROWGEMV={cfg.get('ROWGEMV')}: the FP8 row GEMV is ROWGEMV 3 (fp8_rowgemv)")
        if not self.tile_gemv_fits(cfg):
            raise ValueError(f"ROWGEMV 3 takes SPLIT_K = cdiv(K, BLOCK_K) = {-(-self.k // cfg['BLOCK_K'])} for "
                             f"K {self.k}, not {cfg['SPLIT_K']}")
        codes_in = not cfg.get("QUANT_IN", 0)
        pdl = codes_in and bool(cfg.get("PDL", 0)) and self.facts["pdl"]
        xs = act_scale if act == ACT_TENSOR else self.scale
        if codes_in and act == ACT_TOKEN and cfg.get("ROWQ"):
            x, xs = token_codes(x, self.facts, pdl, cfg["ROWQ"])
        elif codes_in:
            codes, xs = quantize_activation_codes(x, act, act_scale, self.facts, gdc=pdl)
            x = codes.view(torch.uint8)
        y = torch.empty(1, self.n, dtype=out_dtype, device=x.device)
        bn, bk, split = cfg["BLOCK_N"], cfg["BLOCK_K"], cfg["SPLIT_K"]
        grid_n = -(-self.n // bn)
        part, cnt = self.workspace(1, grid_n, split, y)
        self.launch(
            "fp8_tile_gemv_kernel", (grid_n, split, 1), cfg, pdl,
            x_ptr=x, as_ptr=xs, w_ptr=self.weight, s_ptr=self.scale,
            b_ptr=self.bias if self.bias is not None else self.scale, y_ptr=y, part_ptr=part, cnt_ptr=cnt,
            N=self.n, K=self.k, stride_wn=self.layout.stride_wn, stride_sn=self.layout.stride_sn, A_CODES=act,
            HAS_BIAS=self.bias is not None, SPLIT_K=split, BLOCK_N=bn, BLOCK_K=bk,
            ROW_K=1 << (self.k - 1).bit_length(), HW_FP8=self.facts["hw_fp8"], EXACT_BF16=self.facts["dot_f32"],
            EVEN=self.n % bn == 0 and self.k % bk == 0, CODES_IN=codes_in,
            **({"GDC": True} if pdl else {}), **({"EVICT": True} if cfg.get("EVICT") else {}))
        return y

    def swap(self, x: torch.Tensor, out_dtype: torch.dtype, cfg: dict[str, int]) -> torch.Tensor:
        """Few rows of 4-bit W4A16: gemm.w4_swap_kernel (one launch)."""
        m = x.shape[0]
        y = torch.empty(m, self.n, dtype=out_dtype, device=x.device)
        grid_n, grid_m, split = -(-self.n // cfg["BLOCK_N"]), -(-m // cfg["BLOCK_M"]), cfg["SPLIT_K"]
        part, cnt = self.workspace(m, grid_n * grid_m, split, y)
        lay = self.layout
        self.launch(
            "w4_swap_kernel", (grid_n, grid_m, split), cfg,
            x_ptr=x, w_ptr=self.weight, s_ptr=self.scale, z_ptr=self.zero, g_ptr=self.global_scale,
            b_ptr=self.bias if self.bias is not None else self.scale, y_ptr=y, part_ptr=part, cnt_ptr=cnt,
            M=m, N=self.n, K=self.k, stride_xm=x.stride(0), stride_ym=y.stride(0), stride_wn=lay.stride_wn,
            stride_wk=lay.stride_wk, stride_sn=lay.stride_sn, stride_sk=lay.stride_sk, stride_zk=lay.stride_zk,
            ELEM=lay.elem, HAS_ZERO=lay.stride_zk != 0, HAS_BIAS=self.bias is not None, SPLIT_K=split,
            GROUP=lay.group, BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"],
            BLOCK_K=lay.group if lay.elem == INT4 else cfg.get("BLOCK_K", 128),
            DECODE=4 if cfg["DECODE"] == 5 and not self.fused_ok else cfg["DECODE"],
            DOT_F32=self.facts["dot_f32"], OUT_F16=out_dtype == torch.float16, JOIN=bool(cfg.get("FULL_TILE", 0)),
            PREFETCH=cfg.get("PREFETCH", 1), KN=is_words(lay), PERM=bool(cfg.get("PERM", 0)),
            X_PIPE=bool(cfg.get("X_PIPE", 0)))
        return y

    def gemv(self, x: torch.Tensor, act: int, act_scale: torch.Tensor | None, out_dtype: torch.dtype,
             cfg: dict[str, int]) -> torch.Tensor:
        """One row: gemv.gemv_kernel, activations rounded in its prologue (one launch); E2M1 weights
        with a ROWS entry: fp4_gemv.fp4_rows_kernel."""
        if cfg.get("W4ROW"):
            return self.w4_tile_gemv(x, out_dtype, cfg)
        if cfg.get("ROWS"):
            if is_words(self.layout):
                raise ValueError("ROWS: the row-walking GEMV reads E2M1 weights in their checkpoint layout "
                                 "[N, K/2] only, not GPTQ's word layout (linear.WORD_LAYOUT)")
            return self.fp4_rows(x, out_dtype, cfg)
        lay = self.layout
        y = torch.empty(1, self.n, dtype=out_dtype, device=x.device)
        grid_n, split = -(-self.n // cfg["BLOCK_N"]), cfg["SPLIT_K"]
        part, cnt = self.workspace(1, grid_n, split, y)
        xs = act_scale if act_scale is not None else self.scale
        self.launch(
            "gemv_kernel", (grid_n, 1, split), cfg,
            x_ptr=x, w_ptr=self.weight, s_ptr=self.scale, z_ptr=self.zero, g_ptr=self.global_scale,
            b_ptr=self.bias if self.bias is not None else self.scale, xs_ptr=xs, y_ptr=y, part_ptr=part, cnt_ptr=cnt,
            N=self.n, K=self.k, stride_wn=lay.stride_wn, stride_wk=lay.stride_wk, stride_sn=lay.stride_sn,
            stride_sk=lay.stride_sk, stride_zk=lay.stride_zk, ELEM=lay.elem, GROUP=lay.group, SCALE_ROWS=lay.scale_rows, HAS_ZERO=lay.stride_zk != 0,
            HAS_BIAS=self.bias is not None, ACT=act, SPLIT_K=split,
            BLOCK_N=cfg["BLOCK_N"], BLOCK_K=cfg["BLOCK_K"], HW_FP8=self.facts["hw_fp8"], DECODE=cfg["DECODE"],
            EXACT_BF16=self.facts["dot_f32"], OUT_F16=out_dtype == torch.float16, KN=is_words(lay))
        return y

    def w4_tile_fits(self, cfg: dict[str, int]) -> bool:
        """W4ROW covers K in SPLIT_K tiles of BLOCK_K, one per program, on weights in GPTQ's [K/8, N] word layout
        (INT4, or E2M1 repacked at load) with layer-dtype activations."""
        return self.layout.pack == 8 and cfg["SPLIT_K"] == -(-self.k // cfg["BLOCK_K"])

    def w4_tile_gemv(self, x: torch.Tensor, out_dtype: torch.dtype, cfg: dict[str, int]) -> torch.Tensor:
        """cfg W4ROW 1: w4_rowgemv.w4_tile_gemv_kernel, each program's [BLOCK_K / 8, BLOCK_N] words in one load
        (SPLIT_K = cdiv(K, BLOCK_K) ranges of K; 1: the whole K per program, no reduction across programs). MAXNREG:
        ptxas's register cap (Triton's maxnreg), so that more programs fit an SM at once (at 16 warps, 4 per SM
        need at most 32 registers a thread)."""
        check_config(cfg, self.layout)
        if not self.w4_tile_fits(cfg):
            raise ValueError(f"W4ROW takes SPLIT_K = cdiv(K, BLOCK_K) = {-(-self.k // cfg['BLOCK_K'])} for K {self.k} "
                             f"on weights in the [K/8, N] word layout, not SPLIT_K {cfg['SPLIT_K']} on {self.layout}")
        lay, bn, bk, split = self.layout, cfg["BLOCK_N"], cfg["BLOCK_K"], cfg["SPLIT_K"]
        y = torch.empty(1, self.n, dtype=out_dtype, device=x.device)
        grid_n = -(-self.n // bn)
        part, cnt = self.workspace(1, grid_n, split, y)
        self.launch(
            "w4_tile_gemv_kernel", (grid_n, split, 1), cfg,
            x_ptr=x, w_ptr=self.weight, s_ptr=self.scale, z_ptr=self.zero, g_ptr=self.global_scale,
            b_ptr=self.bias if self.bias is not None else self.scale, y_ptr=y, part_ptr=part, cnt_ptr=cnt,
            N=self.n, K=self.k, stride_wk=lay.stride_wk, stride_sk=lay.stride_sk, stride_zk=lay.stride_zk,
            ELEM=lay.elem, GROUP=lay.group, HAS_ZERO=lay.stride_zk != 0, HAS_BIAS=self.bias is not None,
            SPLIT_K=split, BLOCK_N=bn, BLOCK_K=bk, DECODE=cfg["DECODE"], EVEN=self.n % bn == 0 and self.k % bk == 0,
            EXACT_BF16=self.facts["dot_f32"], EVICT=bool(cfg.get("EVICT", 0)), HX=cfg.get("HX", 0),
            **({"maxnreg": cfg["MAXNREG"]} if cfg.get("MAXNREG") else {}))
        return y

    def fp4_rows(self, x: torch.Tensor, out_dtype: torch.dtype, cfg: dict[str, int]) -> torch.Tensor:
        """One row of E2M1 W4A16: fp4_gemv.fp4_rows_kernel, K in chunks of BLOCK_K (one program
        per chunk and ROWS weight rows; split-K is the chunk count, whatever cfg's SPLIT_K says)."""
        y = torch.empty(1, self.n, dtype=out_dtype, device=x.device)
        grid_n, split = -(-self.n // cfg["ROWS"]), -(-self.k // cfg["BLOCK_K"])
        part, cnt = self.workspace(1, grid_n, split, y)
        self.launch(
            "fp4_rows_kernel", (grid_n, split, 1), cfg,
            x_ptr=x, w_ptr=self.weight, s_ptr=self.scale, g_ptr=self.global_scale,
            b_ptr=self.bias if self.bias is not None else self.scale, y_ptr=y, part_ptr=part, cnt_ptr=cnt, N=self.n,
            K=self.k, stride_wn=self.layout.stride_wn, stride_sn=self.layout.stride_sn, ELEM=self.layout.elem,
            HAS_BIAS=self.bias is not None, SPLIT=split > 1, ROWS=cfg["ROWS"], BLOCK_N=cfg["BLOCK_N"],
            BLOCK_K=cfg["BLOCK_K"], OUT_F16=out_dtype == torch.float16, PTX=cfg["DECODE"] == 3,
            EXACT_BF16=self.facts["dot_f32"], EVEN_K=self.k % cfg["BLOCK_K"] == 0)
        return y
