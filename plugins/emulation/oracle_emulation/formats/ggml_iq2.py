"""GGML IQ2_XXS and IQ2_XS: 2-bit codebook ("i-quant") block codecs, 256 weights per block.

Layouts (block_iq2_xxs / block_iq2_xs in ggml/src/ggml-common.h, ggml-org/llama.cpp):
  iq2_xxs  66 bytes: fp16 d, then 8 sub-blocks of 32 weights x 8 bytes: bytes 0..3 are
           4 grid indices (iq2xxs_grid, 256 entries, one per 8 weights); bytes 4..7 a
           little-endian uint32 holding four 7-bit sign indices (bits 7l..7l+6) and a
           4-bit scale l (bits 28..31).  db = d * (0.5 + l) / 4.
  iq2_xs   74 bytes: fp16 d, 32 little-endian uint16 (bits 0..8 grid index into
           iq2xs_grid, 512 entries; bits 9..15 sign index), then 8 scale bytes, one per
           32 weights: low nibble for its first 16 weights, high nibble for the next 16.
  value = db * grid[index][j] * (-1 if bit j of ksigns_iq2xs[sign index] else 1)
Dequantization follows dequantize_row_iq2_xxs / dequantize_row_iq2_xs (ggml-quants.c)
exactly. The codebooks are data (iq2_grids.txt, cited there).

The quantizer here is a plain nearest-codeword search, NOT llama.cpp's optimized,
importance-weighted quantizer: signs are taken from the data (flipping the smallest
element when a group of 8 has an odd number of negatives, as the format requires),
sub-block scales are fitted by least squares, quantized to 4 bits, and then every group
takes the codeword nearest to it at that quantized scale (exhaustive search).
"""
from __future__ import annotations

import functools
import re
from pathlib import Path

import torch

from oracle.errors import TensorError
from oracle.formats import CODEC_BLOCKS
from oracle.tensors import check_dtype, shape_of

from .ieee import div


QK = CODEC_BLOCKS["iq2_xs"][0]
BLOCK_BYTES = {fmt: CODEC_BLOCKS[fmt][1] for fmt in ("iq2_xxs", "iq2_xs")}
_GRID_NAME = {"iq2_xxs": "iq2xxs_grid", "iq2_xs": "iq2xs_grid"}
#: Weights sharing one 4-bit scale.
_SCALE_GROUP = {"iq2_xxs": 32, "iq2_xs": 16}


@functools.lru_cache(maxsize=1)
def tables() -> dict[str, list[int]]:
    """The GGML tables as integers, read from the package data file."""
    out: dict[str, list[int]] = {}
    section = None
    for line in Path(__file__).with_name("iq2_grids.txt").read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        head = re.match(r"\[(\w+) (\d+)\]", line)
        if head:
            section = head.group(1)
            out[section] = []
            continue
        out[section] += [int(t, 0) for t in line.replace(",", " ").split()]
    return out


@functools.lru_cache(maxsize=8)
def _grid(fmt: str, device: str) -> torch.Tensor:
    """[entries, 8] float32 magnitudes: byte j (little-endian) of each uint64 entry."""
    entries = tables()[_GRID_NAME[fmt]]
    rows = [[(e >> (8 * j)) & 0xFF for j in range(8)] for e in entries]
    return torch.tensor(rows, dtype=torch.float32, device=device)


@functools.lru_cache(maxsize=8)
def _sign_table(device: str) -> torch.Tensor:
    """[128, 8] float32 of +-1: bit j of ksigns_iq2xs[i] set -> -1."""
    ks = tables()["ksigns_iq2xs"]
    rows = [[-1.0 if (s >> j) & 1 else 1.0 for j in range(8)] for s in ks]
    return torch.tensor(rows, dtype=torch.float32, device=device)


def _u16(lo: torch.Tensor, hi: torch.Tensor) -> torch.Tensor:
    return lo.to(torch.int64) | (hi.to(torch.int64) << 8)


def _check_blocks(weight: torch.Tensor, fmt: str, name: str) -> None:
    check_dtype(name, weight, (torch.uint8,), "GGML block bytes")
    nbytes = BLOCK_BYTES[fmt]
    if weight.dim() < 3 or shape_of(weight)[-1] != nbytes:
        raise TensorError(name, f"shape [..., N, K/{QK}, {nbytes}] ({fmt} blocks of {nbytes} bytes)",
                          str(shape_of(weight)))


def dequantize(weight: torch.Tensor, weight_format: str, name: str = "weight") -> torch.Tensor:
    """[..., N, K/256, block bytes] -> float32 [..., N, K]."""
    _check_blocks(weight, weight_format, name)
    dev = str(weight.device)
    raw = weight.long()
    d = torch.stack((raw[..., 0], raw[..., 1]), dim=-1).to(torch.uint8).contiguous().view(torch.float16).float()
    if not bool(torch.isfinite(d).all()):
        raise TensorError(name, "finite fp16 super-block scales d", "a NaN or infinite d")
    grid, signs = _grid(weight_format, dev), _sign_table(dev)
    if weight_format == "iq2_xxs":
        sub = raw[..., 2:66].unflatten(-1, (8, 8))                 # [..., 8 sub-blocks, 8 bytes]
        index = sub[..., 0:4]                                       # [..., 8, 4]
        aux = sub[..., 4] | (sub[..., 5] << 8) | (sub[..., 6] << 16) | (sub[..., 7] << 24)
        shifts = torch.tensor([0, 7, 14, 21], device=raw.device)
        sign_index = (aux[..., None] >> shifts) & 127               # [..., 8, 4]
        db = d * (0.5 + (aux >> 28).float()) * 0.25                 # [..., 8]
        db = db[..., None].expand(*db.shape, 4)                     # one scale for the 4 groups
    else:
        q = _u16(raw[..., 2:66:2], raw[..., 3:66:2]).unflatten(-1, (8, 4))   # [..., 8, 4]
        index, sign_index = q & 511, q >> 9
        sc = raw[..., 66:74]                                        # [..., 8]
        lo = d * (0.5 + (sc & 0xF).float()) * 0.25
        hi = d * (0.5 + (sc >> 4).float()) * 0.25
        db = torch.stack((lo, lo, hi, hi), dim=-1)                  # groups 0,1 low nibble; 2,3 high
    values = db[..., None] * grid[index] * signs[sign_index]        # [..., 8, 4, 8]
    return values.flatten(-4)


# ---------------------------------------------------------------------------- quantizer
def _signs(groups: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per group of 8: (sign byte with an even number of set bits, +-1 multipliers)."""
    neg = groups < 0
    odd = (neg.sum(dim=-1) % 2) == 1
    smallest = groups.abs().argmin(dim=-1)
    flip = torch.nn.functional.one_hot(smallest, 8).bool() & odd[..., None]
    neg = neg ^ flip
    bits = (neg.long() << torch.arange(8, device=groups.device)).sum(dim=-1)
    return bits, torch.where(neg, -1.0, 1.0)


def _nearest(target: torch.Tensor, scale: torch.Tensor, grid: torch.Tensor, chunk: int = 1 << 18) -> torch.Tensor:
    """Index of the codeword minimizing ||target - scale * grid[i]|| per group (exhaustive)."""
    flat_t, flat_s = target.reshape(-1, 8), scale.reshape(-1, 1)
    norms = (grid * grid).sum(dim=-1)
    out = torch.empty(flat_t.shape[0], dtype=torch.long, device=target.device)
    for start in range(0, flat_t.shape[0], chunk):
        t, s = flat_t[start:start + chunk], flat_s[start:start + chunk]
        cost = s * s * norms[None, :] - 2.0 * s * (t @ grid.t())
        out[start:start + chunk] = cost.argmin(dim=-1)
    return out.reshape(target.shape[:-1])


def quantize(w: torch.Tensor, weight_format: str) -> dict[str, torch.Tensor]:
    """Float weights [..., N, K] (K % 256 == 0) -> {weight: uint8 [..., N, K/256, block bytes]}."""
    k = w.shape[-1]
    if k % QK:
        raise TensorError("weight", f"K divisible by {QK} ({weight_format} blocks of 256)", f"K = {k}")
    dev = str(w.device)
    grid = _grid(weight_format, dev)
    groups = w.float().unflatten(-1, (-1, QK)).unflatten(-1, (32, 8))           # [..., nb, 32, 8]
    sign_bits, sign = _signs(groups)
    target = groups * sign                                                     # magnitudes (one may be < 0)
    per = _SCALE_GROUP[weight_format] // 8                                     # groups per scale
    # 1. a first scale per scale-group from its max magnitude, best codewords, then least squares
    unit_max = target.unflatten(-2, (-1, per)).amax(dim=(-2, -1))              # [..., nb, units]
    s0 = div(unit_max, 43.0).repeat_interleave(per, dim=-1)
    idx = _nearest(target, s0, grid)
    g = grid[idx]
    num = (target * g).sum(-1).unflatten(-1, (-1, per)).sum(-1)
    den = (g * g).sum(-1).unflatten(-1, (-1, per)).sum(-1)
    s = (num / den).clamp(min=0.0)
    # 2. quantize: d (fp16) per block, 4-bit l per unit with db = d * (0.5 + l) / 4
    d = div(s.amax(dim=-1), 3.875).to(torch.float16)
    d32 = d.float()[..., None]
    safe = torch.where(d32 > 0, d32, torch.ones_like(d32))
    level = torch.round(s / (safe * 0.25) - 0.5).clamp(0, 15)
    db = d32 * (0.5 + level) * 0.25
    # 3. final exhaustive codeword choice at the quantized scale
    idx = _nearest(target, db.repeat_interleave(per, dim=-1), grid)
    level, sign7 = level.long(), sign_bits & 127
    d_bytes = d.contiguous().view(torch.uint8).reshape(*d.shape, 2)
    if weight_format == "iq2_xxs":
        idx4, sg4 = idx.unflatten(-1, (8, 4)), sign7.unflatten(-1, (8, 4))
        aux = (sg4 << torch.tensor([0, 7, 14, 21], device=w.device)).sum(-1) | (level << 28)
        aux_bytes = torch.stack([(aux >> (8 * i)) & 0xFF for i in range(4)], dim=-1)
        body = torch.cat((idx4, aux_bytes), dim=-1).flatten(-2)                # [..., nb, 64]
        raw = torch.cat((d_bytes.long(), body), dim=-1)
    else:
        q16 = idx | (sign7 << 9)                                               # [..., nb, 32]
        body = torch.stack((q16 & 0xFF, q16 >> 8), dim=-1).flatten(-2)        # [..., nb, 64]
        lv = level.unflatten(-1, (8, 2))
        scales = lv[..., 0] | (lv[..., 1] << 4)                                # [..., nb, 8]
        raw = torch.cat((d_bytes.long(), body, scales), dim=-1)
    return {"weight": raw.to(torch.uint8)}
