"""Many-token E2M1 fused MoE on w4_rega's register-A wgmma (config SWAP 3): each weight decoded once per block of
its expert's pairs, straight into wgmma's A registers.

Why: at 256 tokens gpt-oss-20b routes about 32 pairs to each of its 32 experts, so the MoE is one pass over every
expert's weights with a narrow activation side; the swap-AB tiles (SWAP 2: tl.dot on weights decoded into shared
memory) decoded 1.50 G weights/us there (541.6 us against 408.8 for this MoE's BF16 mode, R93). w4_rega's K loop
hands the decoded words to wgmma with no layout change; its grouped MoE mode (MOE 2) takes the alignment's blocks
(TritonMoE._align: pair ids sorted by expert, BLOCK_M to a block) as the MMA's N side: BLOCK_M columns of one
expert, the activation rows gathered by pair id. K tiles of 128 with the tail masked (KMASK: gpt-oss's 2880).
With XP the activation rows are first permuted into the order the kernel copies them in (permute_rows), so its
copies are 16 bytes wide: 349.9 us there (R93; 535.3 with 4-byte copies, R89).

The launches: the alignment (one or two), permute_rows (XP), FC1 (the w13 rows of each pair, in the layer dtype),
the activation over many programs (moe_w4a4.w4a4_act_kernel: gated halves or interleaved, limits), permute_rows
(XP), FC2 (A_BY_PAIR: the pair's own activation row), the router-weighted top-k sum (TritonMoE._topk_sum). NVFP4
activations (W4A4) are rounded as the reference before each GEMM (TritonMoE._round, as SWAP 2). Calls the kernel
cannot serve (no sm_90 GPU, fp16, K not a multiple of 32, MXFP4 scales above the fused decoder's 2.0) run the same
entry as SWAP 2 (TritonMoE.apply_swap).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from .formats import ACT_NONE, ACT_NVFP4, E2M1_MX, E2M1_NV
from .launch import interpreting

#: permute_rows_kernel: K tiles of 128 per program
PERM_TILES = 8


@triton.jit
def permute_rows_kernel(a_ptr, out_ptr, K, stride_a, stride_o, TILES: tl.constexpr):
    """XP: row r of a [rows, K] -> out[r] in w4_rega's copy order, zero past K to whole 128-wide tiles: out's value
    64p + 16j + 8h + 2c + e of tile t is a's k = 128t + 32c + 16h + 8p + 2j + e (w4_rega_kernel's docstring)."""
    row = tl.program_id(0).to(tl.int64)
    t = tl.program_id(1) * TILES + tl.arange(0, TILES)[:, None]
    q = tl.arange(0, 128)[None, :]
    col = q % 64
    k = 128 * t + 32 * ((col // 2) % 4) + 16 * ((col // 8) % 2) + 8 * (q // 64) + 2 * (col // 16) + col % 2
    v = tl.load(a_ptr + row * stride_a + k, mask=k < K, other=0.0)
    dst = 128 * t + q
    tl.store(out_ptr + row * stride_o + dst, v, mask=dst < tl.cdiv(K, 128) * 128)


def permute_rows(a: torch.Tensor) -> torch.Tensor:
    """a [rows, K] in w4_rega's copy order (permute_rows_kernel), [rows, K rounded up to 128]."""
    rows, k = a.shape
    kp = -(-k // 128) * 128
    out = torch.empty(rows, kp, dtype=a.dtype, device=a.device)
    permute_rows_kernel[(rows, -(-kp // (128 * PERM_TILES)))](a, out, k, a.stride(0), out.stride(0), TILES=PERM_TILES,
                                                               num_warps=4)
    return out


def mx_fused_ok(scale: torch.Tensor) -> bool:
    """MXFP4 E8M0 scale bytes that w4_rega's fused decoder (value x 2**-126 times bf16(2**126 x scale)) keeps finite
    and exact: every byte <= 128, a scale <= 2.0 (formats.FUSED_SCALE_MAX). One reduction: call it at load."""
    return scale.numel() > 0 and int(scale.max()) <= 128


def rega_layer_ok(moe, k_multiple: int) -> bool:
    """The layer's part of whether w4_rega can serve its experts (XQ 2, SWAP 3): a bf16 layer on an sm_90 GPU
    (w4_rega is Gluon: wgmma, compiled only), the hidden and intermediate sizes multiples of k_multiple, both
    weights [E, N, K/2] contiguous bytes (their int32 view: words of 8 codes along K) with contiguous scales."""
    w = moe.w13.weight
    return (moe.dtype == torch.bfloat16 and w.device.type == "cuda" and not interpreting()
            and torch.cuda.get_device_capability(w.device) == (9, 0)
            and moe.hidden % k_multiple == 0 and moe.inter % k_multiple == 0
            and all(p.weight.is_contiguous() and p.scale.is_contiguous() and p.weight.dtype == torch.uint8
                    and p.weight.dim() == 3 and p.weight.shape[-1] * 2 == kdim
                    for p, kdim in ((moe.w13, moe.hidden), (moe.w2, moe.inter))))


def grouped_ok(moe, x: torch.Tensor) -> bool:
    """Can SWAP 3 serve this call: bf16 activations and layer, an sm_90 GPU (w4_rega is Gluon: wgmma, compiled
    only), MXFP4 / NVFP4 experts in the [E, N, K/2] byte layout (their int32 view: rows of whole 16-byte pieces,
    K a multiple of 32), layer-dtype or NVFP4 activations, MXFP4 scales the fused decoder covers (moe.fused_ok,
    checked at load). The layer's part is checked once."""
    ok = getattr(moe, "_rega_grouped_ok", None)
    if ok is None:
        lay = moe.w13.layout
        ok = moe._rega_grouped_ok = (
            lay.elem in (E2M1_MX, E2M1_NV) and moe.act in (ACT_NONE, ACT_NVFP4)
            and (lay.elem == E2M1_NV or bool(getattr(moe, "fused_ok", False))) and rega_layer_ok(moe, 32))
    return ok and x.dtype == torch.bfloat16


def apply_swap_rega(moe, x: torch.Tensor, topw: torch.Tensor, ids: torch.Tensor, m: int, k: int,
                    cfg: dict[str, int]) -> torch.Tensor:
    """The SWAP 3 call (module docstring). cfg: BLOCK_M (pairs a block, 16-128), RWARPS / RWARPS2 (FC1's / FC2's
    16 x warps weight rows a program), XT / PF / XDB (as w4_rega's: K tiles a chunk of activations, words loaded PF
    tiles ahead, the chunks double-buffered), TABLE (NVFP4: the byte-table decoder; 1 where absent), VEC, XP (the
    activation rows permuted into the copy's order first, permute_rows: 16-byte copies)."""
    t, dev, bm = m * k, moe.device, cfg["BLOCK_M"]
    by_pair = bool(moe.layer.apply_router_weight_on_input)
    sorted_ids, block_expert, blocks = moe._align(ids, t, bm)
    a1 = moe._input(x, topw, k)
    if moe.act == ACT_NVFP4:                # rounded as the reference (as SWAP 2: _round's launches)
        a1 = moe._round(0, a1)[0]
    xp = bool(cfg.get("XP", 0))
    if xp:
        a1 = permute_rows(a1)
    y1 = torch.empty(t, moe.rows, dtype=moe.dtype, device=dev)
    _grouped(moe, a1, sorted_ids, block_expert, blocks, y1, k, by_pair, moe.w13, moe.b13, cfg["RWARPS"], cfg)
    inter = moe._activation(y1, ids)
    a2 = moe._round(1, inter)[0] if moe.act == ACT_NVFP4 else inter
    if xp:
        a2 = permute_rows(a2)
    y2 = torch.empty(t, moe.hidden, dtype=moe.dtype, device=dev)
    _grouped(moe, a2, sorted_ids, block_expert, blocks, y2, k, True, moe.w2, moe.b2, cfg.get("RWARPS2", cfg["RWARPS"]),
             cfg)
    out = torch.empty(m, moe.hidden, dtype=moe.dtype, device=dev)
    moe._topk_sum(y2, ids, out, m, k, weigh=None if by_pair else topw)
    return out


def _grouped(moe, a: torch.Tensor, sorted_ids: torch.Tensor, block_expert: torch.Tensor, blocks: int,
             y: torch.Tensor, k: int, by_pair: bool, w, bias: torch.Tensor | None, warps: int,
             cfg: dict[str, int]) -> None:
    """y[p] = a's row of pair p (p // k, or p with by_pair) times its expert's weights w (+ bias), for every pair
    in the blocks: one w4_rega_kernel launch in its grouped mode, grid (rows / (16 x warps), blocks)."""
    from .w4_rega import launch_keys, w4_rega_kernel

    lay = w.layout
    words = w.weight.view(torch.int32)          # [E, rows, K / 8]: word j = codes k 8j..8j+7
    n, kdim = words.shape[1], (moe.hidden if w is moe.w13 else moe.inter)
    keys = launch_keys(dict(cfg, TABLE=cfg.get("TABLE", 1)) if lay.elem == E2M1_NV else dict(cfg, TABLE=0),
                       w.scale.data_ptr() | w.scale.stride(0), w.scale.stride(1))
    g = w.global_scale if w.global_scale is not None else w.scale
    w4_rega_kernel[(-(-n // (16 * warps)), blocks, 1)](
        a, words, w.scale, w.scale, g, bias if bias is not None else w.scale, y, y, sorted_ids, y.shape[0], n, kdim,
        a.stride(0), y.stride(0), words.stride(1), 1, w.scale.stride(1), 1, 0, ELEM=lay.elem, GROUP=lay.group,
        HAS_ZERO=False, HAS_BIAS=bias is not None, SPLIT_K=1, XT=cfg["XT"], PF=cfg.get("PF", 2), **keys,
        ids_ptr=block_expert, E=moe.experts, TOPK=k, stride_we=words.stride(0), stride_se=w.scale.stride(0),
        stride_be=bias.stride(0) if bias is not None else 0, MOE=2, A_BY_PAIR=by_pair, XDB=cfg.get("XDB", 0),
        sid_ptr=sorted_ids, BM=cfg["BLOCK_M"], KMASK=int(kdim % 128 != 0), XP=cfg.get("XP", 0), num_warps=warps)
