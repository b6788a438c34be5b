"""Probe: does Triton's warp specialization help the many-row 4-bit GEMM on sm_90 (issue 26, M = 256)?

The shipped many-row kernel (oracle_triton.w4_wgmma) decodes each K tile and then issues the wgmma, in
the same warps; decoding alone takes about 60% of BF16's time at 8192x8192 M = 256, so 0.8x BF16 needs
the decode to overlap the MMA. Triton 3.6 builds a warp-specialized loop (`tl.range(...,
warp_specialize=True)`: a producer warp with setmaxnreg and mbarriers) only where the loop's loads are
tensor-descriptor (TMA) loads; plain pointer loads fail its partitioner ("unsupported load type for
producer commit"). This times such a loop, INT4 symmetric with bf16 group scales of 128 (the simplest
4-bit decode: no zero points, no masks: shapes multiples of the tiles), with and without warp
specialization, beside the shipped kernel and BF16 cuBLAS, weights rotated through > 256 MB, graph
replay, one process. Numerics: against a product computed here from the codes by hand
((q - 8) x scale rounded to bf16, fp32 matmul).

    python bench/ws_probe.py [--shape 8192x8192] [--m 256]
"""
from __future__ import annotations

import argparse
import sys

import torch
import triton
import triton.language as tl

from gpu_timing import rel, start
from sweep_dense import copies, gtime
from oracle_triton.gemm import int4_word_values, interleave8


@triton.jit
def ws_int4_kernel(x_ptr, w_ptr, s_ptr, y_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                   BLOCK_K: tl.constexpr, WS: tl.constexpr, STAGES: tl.constexpr):
    """y^T tile [BN, BM] = sum over K tiles of W_dec[BN, BK] @ x^T[BK, BM]; x, the [K/8, N] words and
    the [K/128, N] scales by tensor descriptors (TMA), so WS can move the loads into a producer warp."""
    pid_n = tl.program_id(0)
    pid_m = tl.program_id(1)
    UJ: tl.constexpr = BLOCK_K // 8
    xd = tl.make_tensor_descriptor(x_ptr, shape=[M, K], strides=[K, 1], block_shape=[BLOCK_M, BLOCK_K])
    wd = tl.make_tensor_descriptor(w_ptr, shape=[K // 8, N], strides=[N, 1], block_shape=[UJ, BLOCK_N])
    sd = tl.make_tensor_descriptor(s_ptr, shape=[K // 128, N], strides=[N, 1], block_shape=[1, BLOCK_N])
    acc = tl.zeros([BLOCK_N, BLOCK_M], dtype=tl.float32)
    for t in tl.range(0, K // BLOCK_K, warp_specialize=WS, num_stages=STAGES):
        x = xd.load([pid_m * BLOCK_M, t * BLOCK_K])
        u = tl.trans(wd.load([t * UJ, pid_n * BLOCK_N]))
        s = tl.trans(sd.load([t * BLOCK_K // 128, pid_n * BLOCK_N]))
        w0, w1, w2, w3, w4, w5, w6, w7 = int4_word_values(u, tl.full([BLOCK_N, 1], 8, tl.int32), 3, tl.bfloat16)
        w = (interleave8(w0, w1, w2, w3, w4, w5, w6, w7).to(tl.float32) * s.to(tl.float32)).to(tl.bfloat16)
        acc = tl.dot(w, tl.trans(x), acc)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    tl.store(y_ptr + offs_m[None, :] * N + offs_n[:, None], acc.to(tl.bfloat16))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="8192x8192")
    ap.add_argument("--m", type=int, default=256)
    args = ap.parse_args(argv)
    if not start("ws_probe"):
        return 2
    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
    n, k = map(int, args.shape.split("x"))
    m = args.m
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    q = torch.randint(0, 16, (k, n), device="cuda", dtype=torch.int32)
    v = (q.view(k // 8, 8, n).to(torch.int64) << (torch.arange(8, device="cuda") * 4)[None, :, None]).sum(1)
    words = torch.where(v >= 2**31, v - 2**32, v).to(torch.int32)         # [K/8, N], nibble i = k % 8
    scales = (torch.rand(k // 128, n, device="cuda") * 0.02 + 0.005).to(torch.bfloat16)
    wref = ((q - 8).float() * scales.float().repeat_interleave(128, 0)).to(torch.bfloat16)     # [K, N]
    ref = (x.float() @ wref.float()).to(torch.bfloat16)
    sets = [(words, scales)] + [(words.clone(), scales.clone()) for _ in range(copies(words.nbytes) - 1)]
    bf16 = [wref.t().contiguous()]
    bf16 += [bf16[0].clone() for _ in range(copies(n * k * 2) - 1)]
    b = gtime([lambda w=w: x @ w.t() for w in bf16], 4)
    print(f"{args.shape} M={m}: BF16 {b:.1f} us (0.8x: {b / 0.8:.1f} us)", flush=True)
    # (8 warps with WS: Triton 3.6 builds no specialized loop; 256-row tiles with WS fail to build)
    for bm, bn, ws, nw, st in ((128, 64, True, 4, 3), (128, 64, False, 4, 3), (128, 64, True, 4, 4),
                               (256, 64, False, 4, 3)):
        y = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)

        def call(ww, ss, bm=bm, bn=bn, ws=ws, nw=nw, st=st, y=y):
            ws_int4_kernel[(n // bn, m // bm)](x, ww, ss, y, m, n, k, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=64, WS=ws,
                                                STAGES=st, num_warps=nw)
            return y
        try:
            err = rel(call(*sets[0]), ref)
            us = gtime([lambda ww=ww, ss=ss: call(ww, ss) for ww, ss in sets], 4)
        except Exception as exc:  # noqa: BLE001 - a configuration Triton cannot build is reported
            print(f"  bm{bm} bn{bn} ws={ws} w{nw} st{st}: FAILED {type(exc).__name__}: {str(exc)[:200]}", flush=True)
            continue
        print(f"  bm{bm} bn{bn} warp_specialize={ws} w{nw} st{st}: {us:.1f} us  xBF16 {b / us:.2f}  err {err:.1e}"
              f"{'' if err < 1e-2 else '  DISAGREES'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
