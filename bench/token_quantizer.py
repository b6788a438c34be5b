"""GPU A/B of the per-token FP8 activation quantizer (launch.quantize_activation_codes, the first launch of an
FP8 W8A8 per-channel call), one process, graph replay: act_qdq_kernel (launch.TOKEN_ROW_CODES off: integer
rounding and encoding, the IEEE division), fp8_rowgemv.row_codes_kernel with the division (FAST_CODES_DIV off)
and with the quotients from the scale's reciprocal (the shipped setting), and for K above ONE_TILE_MAX_K the
row-chunk kernel (TOKEN_SPLIT_CHUNK 2048 / 4096 at any M) against act_qdq's two passes. Every variant's codes and scales
are checked bit for bit against torch's float8_e4m3fn cast of x / (amax / 448) (an independent reference) on
rows whose scales span 2**-70..2**70 with -0, zeros and E4M3 ties; a mismatch prints MISMATCH and the exit
status is 1. Then the 1x128-group quantizer (act_qdq_kernel, FP8 block W8A8) with the hardware conversion and the
reciprocal's quotients (launch.ACT_QDQ_FAST_CODES) and with the integer steps and the division, its codes and
scales checked against torch's per-group cast. Run from bench/ (the CPU smoke test runs it under the interpreter with --smoke).

    python3 token_quantizer.py [--smoke]
"""
from __future__ import annotations

import sys

import torch

from oracle_triton import launch
from oracle_triton.formats import ACT_GROUP, ACT_TOKEN

SHAPES_K = (4096, 7168, 8192, 18432)
ROWS = (1, 16, 256, 4096)


SWITCHES = ("TOKEN_ROW_CODES", "FAST_CODES_DIV", "TOKEN_SPLIT_CHUNK", "TOKEN_SPLIT_MAX_ROWS", "ACT_QDQ_FAST_CODES")


def variants(k: int, ship: dict) -> list[tuple[str, dict]]:
    """(label, launch module values), the first the shipped values `ship` (read before any variant set them)."""
    out = [("shipped", ship), ("act_qdq", {**ship, "TOKEN_ROW_CODES": False})]
    if k <= launch.ONE_TILE_MAX_K:
        out.append(("rows, division", {**ship, "TOKEN_ROW_CODES": True, "FAST_CODES_DIV": False}))
        out.append(("rows, reciprocal", {**ship, "TOKEN_ROW_CODES": True, "FAST_CODES_DIV": True}))
    else:
        for chunk in (2048, 4096):
            out.append((f"chunks {chunk}, reciprocal", {**ship, "TOKEN_ROW_CODES": True, "FAST_CODES_DIV": True,
                                                        "TOKEN_SPLIT_CHUNK": chunk, "TOKEN_SPLIT_MAX_ROWS": 1 << 30}))
    return out


def reference(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """torch's own per-token rounding: scales amax / 448 (IEEE), codes the float8_e4m3fn cast of x / scale."""
    xf = x.float()
    amax = xf.abs().amax(dim=1)
    s = amax / torch.full_like(amax, 448.0)
    s = torch.where(s > 0, s, torch.ones_like(s))
    return (xf / s[:, None]).clamp(-448.0, 448.0).to(torch.float8_e4m3fn).view(torch.uint8), s


def group_reference(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """torch's per-1x128-group rounding (K a multiple of 128): scales [K/128, M] amax / 448 (1 for a zero group),
    codes the float8_e4m3fn cast of x / its group's scale."""
    m, k = x.shape
    g = x.float().view(m, k // 128, 128)
    amax = g.abs().amax(-1)
    s = torch.where(amax > 0, amax / torch.full_like(amax, 448.0), torch.ones_like(amax))
    codes = (g / s[..., None]).clamp(-448.0, 448.0).to(torch.float8_e4m3fn).view(torch.uint8).view(m, k)
    return codes, s.T.contiguous()


def hostile_rows(m: int, k: int, device: str, seed: int = 0) -> torch.Tensor:
    """bf16 rows with scales from 2**-70 to 2**70 (inside and outside the reciprocal's range), -0 and +0, a zero
    row, and values that land on E4M3 ties (x / scale = a midpoint between two codes) and next to them."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=g) * torch.exp2(torch.randint(-70, 71, (m, 1), generator=g).float())
    codes = torch.arange(0, 126, dtype=torch.uint8).view(torch.float8_e4m3fn).float()
    mids = (codes[:-1] + codes[1:]) / 2                       # exact in fp32: E4M3's rounding boundaries
    pick = mids[torch.randint(0, len(mids), (m, k // 4), generator=g)]
    amax = x.abs().amax(dim=1, keepdim=True)
    x[:, : k // 4] = pick * (amax / 448.0)                    # x / scale at (about) a tie: bf16 rounds it near one
    x[:, 0] = amax[:, 0]                                      # the amax stays the row's
    x[:, 1], x[:, 2] = -0.0, 0.0
    xb = x.to(torch.bfloat16)
    if m > 2:
        xb[m // 2] = 0
    return xb.to(device)


def main() -> int:
    smoke = "--smoke" in sys.argv[1:]
    device = "cpu" if smoke else "cuda"
    facts = launch.device_facts(torch.device(device))
    rows, ks = ((1, 3), (384, 16512)) if smoke else (ROWS, SHAPES_K)
    if not smoke:
        from sweep_dense import gtime
    bad = 0
    saved = {n: getattr(launch, n) for n in SWITCHES}
    try:
        for k in ks:
            for m in rows:
                x = hostile_rows(max(m, 3), k, device)[:m]
                want_c, want_s = reference(x)
                xt = torch.randn(m, k, device=device, dtype=torch.bfloat16)
                cells = []
                for label, values in variants(k, saved):
                    for name, v in values.items():
                        setattr(launch, name, v)
                    codes, scales = launch.quantize_activation_codes(x, ACT_TOKEN, None, facts)
                    same = torch.equal(codes.view(torch.uint8), want_c) and torch.equal(scales, want_s)
                    bad += not same
                    us = 0.0 if smoke else gtime([lambda: launch.quantize_activation_codes(xt, ACT_TOKEN, None, facts)])
                    cells.append(f"{label} {us:6.1f}{'' if same else ' MISMATCH'}")
                print(f"K={k:6d} M={m:5d} | " + " | ".join(cells), flush=True)
                if k % 128:
                    continue
                want_c, want_s = group_reference(x)      # 1x128 groups (act_qdq_kernel), division on and off
                cells = []
                for label, fast in (("groups, hardware + reciprocal", True), ("groups, integer steps + division", False)):
                    launch.ACT_QDQ_FAST_CODES = fast
                    codes, scales = launch.quantize_activation_codes(x, ACT_GROUP, None, facts)
                    same = torch.equal(codes.view(torch.uint8), want_c) and torch.equal(scales, want_s)
                    bad += not same
                    us = 0.0 if smoke else gtime([lambda: launch.quantize_activation_codes(xt, ACT_GROUP, None, facts)])
                    cells.append(f"{label} {us:6.1f}{'' if same else ' MISMATCH'}")
                launch.ACT_QDQ_FAST_CODES = saved["ACT_QDQ_FAST_CODES"]
                print(f"K={k:6d} M={m:5d} | " + " | ".join(cells), flush=True)
    finally:
        for name, v in saved.items():
            setattr(launch, name, v)
    print("codes and scales: " + ("all equal to torch's cast" if not bad else f"{bad} MISMATCH(ES)"), flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
