"""Large-M 4-bit fused MoE (config key DEQUANT_MM): each expert's packed weights decoded once per call into
a bounded transient BF16 workspace, multiplied by the BF16 mode's grouped GEMM (moe_kernels.moe_gemm_kernel).

At thousands of tokens every expert's weight tile is used by several row blocks, and the aligned 4-bit tiles
decode it once per block (2.49 decodes per weight for Qwen3-30B at M = 4096 with 128-row blocks) in the MMA's
own warps. Here each weight is decoded once (gemm.words_tile_decode / dequant.w4_tile: the reference's values,
rounded once to the layer dtype), then the products run on tensor cores as the BF16 mode's. The reference
(oracle-emulation) multiplies exactly those BF16 weights, so only the fp32 summation order differs.

Memory: the expert blocks of the alignment (sorted by expert) are taken CHUNK blocks at a time (the config's
DEQUANT_MM value; a chunk spans at most CHUNK experts, which are contiguous: the window [first, last] of its
blocks' experts, found on the device by window_kernel, no host sync); only that window is decoded, into a
workspace of min(CHUNK, E) experts, reused by every chunk of the call and freed after it. No BF16 copy of the
layer outlives the call; with CHUNK >= the block count the workspace holds every expert during the call.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .dequant import expert_operands, w4_tile
from .formats import ACT_NONE, ACT_NVFP4, E2M1_MX, E2M1_NV, INT4, is_words, layout_for
from .gemm import words_tile_decode, words_tile_load
from .launch import interpreting
from .weights import Packed

#: decode tile: 64 weight rows x 128 along K per program, 4 warps (gemm.dequant_kernel's, the dense DEQUANT_MM)
DECODE_N, DECODE_K, DECODE_WARPS = 64, 128, 4


@triton.jit
def window_kernel(bexp_ptr, first_ptr, last_ptr, local_ptr, BLOCKS, CHUNK: tl.constexpr, CHUNK_P2: tl.constexpr):
    """Program j: chunk j's blocks [j CHUNK, (j + 1) CHUNK): the first and last expert id among them (-1:
    none; ids ascend along the blocks, unused blocks hold -1 at the end) and each block's id minus the
    first (its workspace slot; -1 stays -1, a block no GEMM program computes)."""
    j = tl.program_id(0)
    lane = tl.arange(0, CHUNK_P2)
    offs = j * CHUNK + lane
    ok = (lane < CHUNK) & (offs < BLOCKS)
    e = tl.load(bexp_ptr + offs, mask=ok, other=-1)
    first = tl.load(bexp_ptr + j * CHUNK)
    tl.store(first_ptr + j, first)
    tl.store(last_ptr + j, tl.max(e, axis=0))
    tl.store(local_ptr + offs, tl.where(e >= 0, e - first, -1), mask=ok)


@triton.jit
def expert_dequant_kernel(w_ptr, s_ptr, z_ptr, g_ptr, b_ptr, out_ptr, bout_ptr, first_ptr, last_ptr, N, K,
                          stride_we, stride_se, stride_ze, stride_be,
                          stride_wn, stride_wk, stride_sn, stride_sk, stride_zk,
                          ELEM: tl.constexpr, PACK: tl.constexpr, GROUP: tl.constexpr, HAS_ZERO: tl.constexpr,
                          HAS_BIAS: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                          EXACT_BF16: tl.constexpr, OUT_F16: tl.constexpr, WORDS: tl.constexpr, KN: tl.constexpr):
    """Workspace slot s (program axis 2) = expert first + s of the window [first, last] (first_ptr /
    last_ptr: the chunk's, from window_kernel): its weight tile W[offs_n, k0 : k0 + BLOCK_K] in the
    layer dtype at out[s] ([N, K], K contiguous), as gemm.dequant_kernel decodes a dense weight
    (WORDS: a 32-bit word at a time by the PTX decoders, compiled only). HAS_BIAS: the programs of
    the first K tile also copy the expert's bias rows to bout[s] (the GEMM indexes it by slot)."""
    io_t = tl.float16 if OUT_F16 else tl.bfloat16
    slot = tl.program_id(2)
    first = tl.load(first_ptr)
    e = first + slot
    if (first >= 0) & (e <= tl.load(last_ptr)):
        offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
        k0 = tl.program_id(1) * BLOCK_K
        offs_k = k0 + tl.arange(0, BLOCK_K)
        w_e, s_e, z_e, gscale = expert_operands(e, w_ptr, s_ptr, z_ptr, g_ptr, stride_we, stride_se, stride_ze,
                                                ELEM)
        if WORDS:
            u, s, z = words_tile_load(k0, offs_n, w_e, s_e, z_e, K, N, stride_wn, stride_wk, stride_sn,
                                      stride_sk, stride_zk, ELEM, HAS_ZERO, GROUP, BLOCK_N, BLOCK_K, False, KN)
            w = words_tile_decode(u, s, z, gscale, ELEM, GROUP, BLOCK_N, BLOCK_K, io_t, KN)
        else:
            w = w4_tile(k0, offs_n, w_e, s_e, z_e, gscale, K, N, stride_wn, stride_wk, stride_sn, stride_sk,
                        stride_zk, ELEM, PACK, GROUP, HAS_ZERO, BLOCK_N, BLOCK_K, io_t, EXACT_BF16)
        base = out_ptr + slot.to(tl.int64) * N * K
        mask = (offs_n < N)[:, None] & (offs_k < K)[None, :]
        tl.store(base + offs_n[:, None].to(tl.int64) * K + offs_k[None, :], w, mask=mask)
        if HAS_BIAS:
            if k0 == 0:
                b = tl.load(b_ptr + e.to(tl.int64) * stride_be + offs_n, mask=offs_n < N, other=0.0)
                tl.store(bout_ptr + slot.to(tl.int64) * N + offs_n, b, mask=offs_n < N)


def dequant_ok(moe) -> bool:
    """Can the DEQUANT_MM path serve this MoE: 4-bit experts (INT4, MXFP4, NVFP4) with layer-dtype or NVFP4
    activations (W8A8 multiplies FP8 codes, which a BF16 product would not reproduce)."""
    return moe.w13.layout.pack > 1 and moe.act in (ACT_NONE, ACT_NVFP4)


def _decode(moe, packed: Packed, bias: torch.Tensor | None, out: torch.Tensor, bout: torch.Tensor,
            first: torch.Tensor, last: torch.Tensor, n: int, kdim: int) -> None:
    """The chunk's window of `packed`'s experts into out [slots, n, kdim] (and their bias rows into bout)."""
    lay = packed.layout
    words = moe.facts["hw_fp8"] and not interpreting() and (
        lay.elem in (E2M1_MX, E2M1_NV) or (lay.elem == INT4 and lay.group % DECODE_K == 0))
    stride = lambda tt: tt.stride(0) if tt is not None else 0   # noqa: E731
    s, z, g = packed.scale, packed.zero, packed.global_scale
    expert_dequant_kernel[(-(-n // DECODE_N), -(-kdim // DECODE_K), out.shape[0])](
        packed.weight, s, z if z is not None else s, g if g is not None else s, bias if bias is not None else s,
        out, bout, first, last, n, kdim, stride(packed.weight), stride(s), stride(z), stride(bias),
        lay.stride_wn, lay.stride_wk, lay.stride_sn, lay.stride_sk, lay.stride_zk,
        ELEM=lay.elem, PACK=lay.pack, GROUP=lay.group, HAS_ZERO=lay.stride_zk != 0, HAS_BIAS=bias is not None,
        BLOCK_N=DECODE_N, BLOCK_K=DECODE_K, EXACT_BF16=moe.facts["dot_f32"], OUT_F16=moe.dtype == torch.float16,
        WORDS=words, KN=is_words(lay), num_warps=DECODE_WARPS, num_stages=1)


def gemm_config(cfg: dict[str, int]) -> dict[str, int]:
    """The BF16 grouped GEMM's launch parameters in a DEQUANT_MM config (the tile keys; no 4-bit options)."""
    return {key: v for key, v in cfg.items() if key in ("BLOCK_M", "BLOCK_N", "BLOCK_N1", "BLOCK_K", "num_warps",
                                                       "num_stages", "N_FAST")}


def apply_dequant(moe, x: torch.Tensor, topw: torch.Tensor, ids: torch.Tensor, m: int, k: int,
                  cfg: dict[str, int]) -> torch.Tensor:
    """TritonMoE's aligned forward with each GEMM's experts decoded chunk by chunk (module docstring):
    align, then per chunk of cfg["DEQUANT_MM"] blocks decode w13's window and run FC1 on those blocks;
    FC2's input rounded as the aligned path does (NVFP4 activations: after all of FC1); per chunk decode
    w2's window and run FC2; the top-k sum. cfg's tile keys (gemm_config) are the BF16 GEMM's."""
    if not dequant_ok(moe):
        raise ValueError(f"DEQUANT_MM: 4-bit experts with unquantized or NVFP4 activations, not {moe.mode.name}")
    gcfg = gemm_config(cfg)
    bm = gcfg["BLOCK_M"]
    t, dev, dt = m * k, moe.device, moe.dtype
    e_all, h, i, rows = moe.experts, moe.hidden, moe.inter, moe.rows
    by_pair = bool(moe.layer.apply_router_weight_on_input)
    a1 = moe._input(x, topw, k)
    sorted_ids, block_expert, blocks, a_in = moe._align_round(ids, t, bm, a1)
    chunk = max(1, min(int(cfg["DEQUANT_MM"]), blocks))
    chunks = -(-blocks // chunk)
    slots = min(chunk, e_all)
    first = torch.empty(chunks, dtype=torch.int32, device=dev)
    last = torch.empty(chunks, dtype=torch.int32, device=dev)
    local = torch.empty(blocks, dtype=torch.int32, device=dev)
    window_kernel[(chunks,)](block_expert, first, last, local, blocks, CHUNK=chunk,
                             CHUNK_P2=triton.next_power_of_2(chunk))
    overlap = bool(cfg.get("DQ_OVERLAP", 0)) and chunks > 1 and dev.type == "cuda"
    copies = 2 if overlap else 1
    per = slots * max(rows * h, h * i)
    ws = torch.empty(copies * per, dtype=dt, device=dev)
    unit = torch.ones(1, dtype=torch.float32, device=dev)
    w13 = [Packed(layout_for("bf16", rows, h), ws[c * per:c * per + slots * rows * h].view(slots, rows, h), unit,
                  None, None) for c in range(copies)]
    w2 = [Packed(layout_for("bf16", h, i), ws[c * per:c * per + slots * h * i].view(slots, h, i), unit, None, None)
          for c in range(copies)]
    b13 = [None if moe.b13 is None else torch.empty(slots, rows, dtype=dt, device=dev) for _ in range(copies)]
    b2 = [None if moe.b2 is None else torch.empty(slots, h, dtype=dt, device=dev) for _ in range(copies)]
    inter = torch.empty(t, i, dtype=dt, device=dev)

    def fc1(j: int, c: int) -> None:
        b0, nb = j * chunk, min(chunk, blocks - j * chunk)
        moe._gemm(1, a_in, by_pair, w13[c], b13[c], topw, sorted_ids[b0 * bm:], local[b0:], inter, t, k, i, rows, h,
                  gcfg, nb)

    _chunked(moe, moe.w13, moe.b13, [p.weight for p in w13], [_or(b, unit) for b in b13], first, last, rows, h,
             chunks, fc1, overlap)
    a2 = moe._round(1, inter)
    pairs = torch.empty(t, h, dtype=dt, device=dev)

    def fc2(j: int, c: int) -> None:
        b0, nb = j * chunk, min(chunk, blocks - j * chunk)
        moe._gemm(2, a2, True, w2[c], b2[c], topw, sorted_ids[b0 * bm:], local[b0:], pairs, t, k, h, h, i, gcfg, nb,
                  raw_pairs=True)

    _chunked(moe, moe.w2, moe.b2, [p.weight for p in w2], [_or(b, unit) for b in b2], first, last, h, i, chunks,
             fc2, overlap)
    out = torch.empty(m, h, dtype=dt, device=dev)
    moe._topk_sum(pairs, ids, out, m, k, None if by_pair else topw)
    return out


def _chunked(moe, packed: Packed, bias: torch.Tensor | None, bufs: list, bbufs: list, first: torch.Tensor,
             last: torch.Tensor, n: int, kdim: int, chunks: int, gemm, overlap: bool) -> None:
    """For each chunk j: decode its window of `packed` (and bias) into workspace copy c, then gemm(j, c). overlap
    (DQ_OVERLAP, two copies): the decodes run on a side stream one chunk ahead of the GEMMs, each waiting for
    the GEMM that last read its copy (events; capturable: the side stream forks from and joins the caller's)."""
    if not overlap:
        for j in range(chunks):
            _decode(moe, packed, bias, bufs[0], bbufs[0], first[j:], last[j:], n, kdim)
            gemm(j, 0)
        return
    main = torch.cuda.current_stream()
    side = getattr(moe, "_dequant_stream", None)
    if side is None:
        side = moe._dequant_stream = torch.cuda.Stream(device=moe.device)
    side.wait_stream(main)
    decoded = [torch.cuda.Event() for _ in range(chunks)]
    used = [torch.cuda.Event() for _ in range(chunks)]

    def decode(j: int) -> None:
        with torch.cuda.stream(side):
            if j >= 2:
                side.wait_event(used[j - 2])
            _decode(moe, packed, bias, bufs[j % 2], bbufs[j % 2], first[j:], last[j:], n, kdim)
            decoded[j].record(side)

    decode(0)
    for j in range(chunks):
        if j + 1 < chunks:
            decode(j + 1)
        main.wait_event(decoded[j])
        gemm(j, j % 2)
        used[j].record(main)
    main.wait_stream(side)


def _or(t: torch.Tensor | None, placeholder: torch.Tensor) -> torch.Tensor:
    return t if t is not None else placeholder
