"""What a read-only weight stream reaches on the large FP8 layers (issue 26 (k), (n), (r)): the ceiling of
the few-row kernels' access pattern, without the MMA, the quantizer or the split-K hand-off.

The FP8 W8A8 few-row kernels read an N x K row-major byte matrix once (8192x8192 64 MB, 7168x18432 132 MB,
36864x7168 264 MB) and time 1.15-1.3x the bytes over the copy bandwidth. This times, in one process, graph
replay, each call the next of > 256 MB of copies (sweep_dense.gtime), the loads alone:

  copy: torch's device copy of the same bytes (read + write; the bench's "hbm" column divides by its rate);
  flat P: P programs each summing a contiguous 1/P of the bytes, 16 kB a load step, 4 stages;
  rows BNxBK sS: the swap kernels' pattern: program (column tile of BN rows, K slice of S), [BN, BK] tiles
    along its slice (each row read BK bytes a step), `stages` deep; the row sums stored (no hand-off).

If `flat` reads near the copy rate while `rows` at the entries' tiles stays where the kernels are, the
row-major pattern is the bound; if `rows` is near `flat`, what the kernels lose is their own pipeline.

--ablate M: the FP8 W8A8 per-channel layer at M rows (oracle-triton, its shipped choice `cfg`) taken apart:
  call: the public call (the quantizer, then the GEMM, PDL where cfg has it);
  codes: the GEMM alone on ready codes (cfg without PDL: nothing to wait for);
  quantizer: the quantizer alone (cfg ROWQ's row quantizer, else quantize_activation_codes);
  chain: `rows` at cfg's tiles, split and stages (the GEMM's loads without its MMA and hand-off).

--tiles BNxBK:S:ST:W ...: the `rows` tiles to time instead of the default list (e.g. dense stand-ins for a
MoE launch's rows); --self-check: the kernels' sums against torch's on small matrices, then exit.

    python bench/stream_probe.py [--shapes 7168x18432 8192x8192 36864x7168] [--ablate 16] [--tiles ...]
"""
from __future__ import annotations

import argparse
import sys

import torch
import triton
import triton.language as tl


@triton.jit
def flat_kernel(w_ptr, y_ptr, per, BLOCK: tl.constexpr, STAGES: tl.constexpr):
    """Program p sums the int32 words [p * per, (p + 1) * per) (per a multiple of BLOCK)."""
    p = tl.program_id(0)
    base = w_ptr + p.to(tl.int64) * per
    acc = tl.zeros([BLOCK], dtype=tl.int32)
    for j in tl.range(0, per, BLOCK, num_stages=STAGES):
        acc += tl.load(base + j + tl.arange(0, BLOCK))
    tl.store(y_ptr + p, tl.sum(acc))


@triton.jit
def rows_kernel(w_ptr, y_ptr, N, K4, BLOCK_N: tl.constexpr, BLOCK_K4: tl.constexpr, SPLIT: tl.constexpr,
                STAGES: tl.constexpr):
    """Program (column tile, K slice): [BLOCK_N, BLOCK_K4] int32 tiles of rows K4 words long along its slice."""
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    rows = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    per = K4 // SPLIT
    acc = tl.zeros([BLOCK_N, BLOCK_K4], dtype=tl.int32)
    ptrs = w_ptr + rows.to(tl.int64)[:, None] * K4 + tl.arange(0, BLOCK_K4)[None, :]
    for j in tl.range(pid_k * per, pid_k * per + per, BLOCK_K4, num_stages=STAGES):
        acc += tl.load(ptrs + j)
    tl.store(y_ptr + pid_k * N + rows, tl.sum(acc, axis=1))


def self_check(device: str) -> None:
    """The kernels read every word once: their sums against torch's on small matrices (tests run this in Triton's
    CPU interpreter: --self-check with TRITON_INTERPRET=1 set before Triton is imported)."""
    n, k4 = 128, 64                               # 128 rows of 256 bytes (64 int32 words)
    w = torch.randint(-1000, 1000, (n, k4), dtype=torch.int32, device=device)
    y = torch.zeros(8 * n, dtype=torch.int32, device=device)
    rows_kernel[(n // 64, 2)](w, y, n, k4, BLOCK_N=64, BLOCK_K4=16, SPLIT=2, STAGES=2)
    assert torch.equal(y[:n], w[:, :k4 // 2].sum(1, dtype=torch.int32)), "rows: split 0"
    assert torch.equal(y[n:2 * n], w[:, k4 // 2:].sum(1, dtype=torch.int32)), "rows: split 1"
    y.zero_()
    flat_kernel[(4,)](w, y, n * k4 // 4, BLOCK=512, STAGES=2)
    assert torch.equal(y[:4], w.view(4, -1).sum(1, dtype=torch.int32)), "flat"


def tile_spec(spec: str) -> tuple[int, ...]:
    """--tiles BNxBK:S:ST:W -> (BLOCK_N, BLOCK_K bytes, split, stages, warps)."""
    parts = tuple(int(v) for v in spec.replace("x", ":").split(":"))
    if len(parts) != 5:
        raise argparse.ArgumentTypeError(f"{spec!r}: want BNxBK:SPLIT:STAGES:WARPS, e.g. 64x256:1:4:4")
    return parts


#: the default `rows` tiles: (BLOCK_N, BLOCK_K bytes, split, stages, warps); the FP8 entries' own first
TILES = [(64, 256, 1, 4, 4), (64, 256, 2, 4, 4), (64, 256, 1, 6, 4), (64, 512, 1, 3, 4), (128, 256, 1, 4, 8),
         (32, 512, 1, 4, 4), (16, 1024, 1, 4, 4), (64, 128, 1, 8, 4)]


def ablate(n: int, k: int, m: int) -> list[str]:
    """The --ablate rows for one shape (docstring above); the GEMM on codes checked against the call's output."""
    from bench_triton import dense_pair
    from oracle_triton.formats import ACT_TOKEN
    from oracle_triton.linear import TritonLinear
    from sweep_dense import copies, gtime

    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5
    t, _, tensors, layer, mode = dense_pair("probe", "fp8_channel", n, k, w, "w8a8_fp8_channel", "fp8",
                                            {"activation_granularity": "token"})
    del w
    layers = [t]
    for _ in range(copies(n * k) - 1):
        o = TritonLinear(layer, mode, None)
        o.process_weights(**{key: (v.clone() if isinstance(v, torch.Tensor) else v) for key, v in tensors.items()})
        layers.append(o)
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    g = t.gemm
    cfg = g.config_for(m, ACT_TOKEN)
    plain = {key: v for key, v in cfg.items() if key not in ("PDL", "PF_L2", "PF_HEAD")}
    rowq = cfg.get("ROWQ")

    def quantize():
        return g.row_codes(x, False, rowq) if rowq else g.fp8_codes(x, ACT_TOKEN, None, plain, False)
    codes, xs = quantize()
    if rowq and g.facts["fp8_dot"]:
        codes = codes.view(torch.float8_e4m3fn)
    out = [f"  ablate M={m}: cfg {cfg}"]
    if "SWAP" not in cfg:
        return out + ["  (not the swap GEMM: only the call timed)",
                      f"  call {gtime([lambda o=o: o.apply(x) for o in layers], 20):.1f} us"]
    diff = (layers[0].apply(x).float() - g.fp8_swap(codes, xs, ACT_TOKEN, torch.bfloat16, plain).float()).abs().max()
    call = gtime([lambda o=o: o.apply(x) for o in layers], 20)
    on_codes = gtime([lambda o=o: o.gemm.fp8_swap(codes, xs, ACT_TOKEN, torch.bfloat16, plain) for o in layers], 20)
    quant = gtime([quantize], 20)
    y = torch.zeros(8 * n, device="cuda", dtype=torch.int32)
    bn, bk, split = cfg["BLOCK_N"], cfg["BLOCK_K"], cfg["SPLIT_K"]
    words = [o.gemm.weight_operand(True).view(torch.int32) for o in layers]
    chain = gtime([lambda wd=wd: rows_kernel[(n // bn, split)](wd, y, n, k // 4, BLOCK_N=bn, BLOCK_K4=bk // 4,
                                                                 SPLIT=split, STAGES=cfg["num_stages"],
                                                                 num_warps=cfg["num_warps"]) for wd in words], 20)
    return out + [f"  call {call:.1f} us; GEMM on codes {on_codes:.1f}; quantizer {quant:.1f}; chain {chain:.1f} "
                  f"(max |call - codes GEMM| {diff.item():.3g})"]


def main(argv=None) -> int:
    from gpu_timing import start
    from sweep_dense import copies, gtime

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", nargs="+", default=["7168x18432", "8192x8192", "36864x7168"])
    ap.add_argument("--ablate", type=int, nargs="*", default=[], help="M rows of the FP8 layer to take apart")
    ap.add_argument("--no-streams", action="store_true", help="the copy and --ablate only (no flat / rows rows)")
    ap.add_argument("--self-check", action="store_true", help="check the kernels' sums on small matrices and exit")
    ap.add_argument("--tiles", nargs="+", type=tile_spec, default=None, metavar="BNxBK:S:ST:W",
                    help="the `rows` tiles to time (split S, ST stages, W warps) instead of the default list; e.g. "
                         "DeepSeek-R1's MoE as dense stand-ins (its 8 experts' rows end to end): --shapes "
                         "32768x7168 57344x2048 --tiles 256x128:1:4:8 128x128:1:3:4")
    args = ap.parse_args(argv)
    if args.self_check:
        self_check("cuda" if torch.cuda.is_available() else "cpu")
        print("stream_probe kernels: every word read once")
        return 0
    if not start("stream_probe"):
        return 2
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    tiles = args.tiles or TILES
    for shape in args.shapes:
        n, k = (int(v) for v in shape.split("x"))
        nbytes = n * k
        ws = [torch.randint(-2**31, 2**31 - 1, (n, k // 4), device="cuda", dtype=torch.int32)
              for _ in range(copies(nbytes))]
        dst = torch.empty_like(ws[0])
        cp = gtime([lambda w=w: dst.copy_(w) for w in ws], 20)
        line = [f"{shape}: {nbytes / 1e6:.0f} MB; copy {cp:.1f} us ({2 * nbytes / cp / 1e6:.2f} TB/s r+w, "
                f"read time at that rate {cp / 2:.1f} us)"]
        y = torch.zeros(8 * n, device="cuda", dtype=torch.int32)
        for progs in () if args.no_streams else (sms, 2 * sms, 4 * sms, 8 * sms):
            words = nbytes // 4
            block = 4096
            per = words // progs // block * block
            if per == 0:
                continue
            us = gtime([lambda w=w: flat_kernel[(progs,)](w, y, per, BLOCK=block, STAGES=4, num_warps=4)
                        for w in ws], 20)
            frac = per * progs * 4 / nbytes
            line.append(f"  flat {progs}: {us:.1f} us for {frac:.3f} of the bytes -> {us / frac:.1f} us all "
                        f"({nbytes / (us / frac) / 1e6:.2f} TB/s)")
        for bn, bk, split, stages, warps in () if args.no_streams else tiles:
            if n % bn or (k // 4) % (split * bk // 4):
                continue
            us = gtime([lambda w=w: rows_kernel[(n // bn, split)](w, y, n, k // 4, BLOCK_N=bn, BLOCK_K4=bk // 4,
                                                                    SPLIT=split, STAGES=stages, num_warps=warps)
                        for w in ws], 20)
            line.append(f"  rows {bn}x{bk} s{split} st{stages} w{warps} ({n // bn * split} programs): {us:.1f} us "
                        f"({nbytes / us / 1e6:.2f} TB/s, {us / (cp / 2):.3f}x the copy's read time)")
        del ws, dst
        torch.cuda.empty_cache()
        for m in args.ablate:
            line += ablate(n, k, m)
        print("\n".join(line), flush=True)
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
