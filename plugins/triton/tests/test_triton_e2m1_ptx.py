"""The E2M1 word decoders' PTX (gemm.e2m1_word_ptx, e2m1_word_ptx_table in both orders) run by a small bit-level model of
the instructions they use, on CPU, against oracle-emulation's NVFP4 dequantization: every code, every
finite E4M3 scale, several global scales. The model: 32-bit integer ops as PTX defines them, PRMT's
default mode (a selector nibble picks one of 8 bytes, its bit 3 replicates that byte's sign), and
fma.rn.bf16x2 as one rounding (to nearest even) of the exact a x b + c per half, subnormals kept."""
from __future__ import annotations

import math
import re
import struct

import pytest
import torch

M32 = 0xFFFFFFFF


def _bf16_value(h: int) -> float:
    return struct.unpack("<f", struct.pack("<I", (h & 0xFFFF) << 16))[0]


def _bf16_bits(v: float) -> int:
    """float64 v (exactly an fp32 here: products of two bf16s) -> bf16 bits, to nearest even."""
    b = struct.unpack("<I", struct.pack("<f", v))[0]
    if struct.unpack("<f", struct.pack("<I", b))[0] != v and v == v:
        raise AssertionError("the model's products must be exact in fp32")
    return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) & 0xFFFF


def _prmt(a: int, b: int, sel: int) -> int:
    src = (a & M32) | ((b & M32) << 32)
    out = 0
    for i in range(4):
        n = (sel >> (4 * i)) & 15
        byte = (src >> (8 * (n & 7))) & 0xFF
        if n & 8:
            byte = 0xFF if byte & 0x80 else 0
        out |= byte << (8 * i)
    return out


def _fma_bf16x2(a: int, b: int, c: int) -> int:
    out = 0
    for sh in (0, 16):
        x, y, z = (_bf16_value(v >> sh) for v in (a, b, c))
        r = x * y + z
        if r == 0.0:            # an exact zero sum: -0 only if both terms are -0 (round to nearest)
            bits = 0x8000 if math.copysign(1.0, x * y) < 0 and math.copysign(1.0, z) < 0 else 0
        else:
            bits = _bf16_bits(r)
        out |= bits << sh
    return out


def _sub_bf16x2(a: int, b: int) -> int:
    return sum(_bf16_bits(_bf16_value(a >> sh) - _bf16_value(b >> sh)) << sh for sh in (0, 16))


def _lop3(a: int, b: int, c: int, lut: int) -> int:
    """lop3.b32: each result bit is bit (4a + 2b + c) of the 8-bit truth table."""
    return sum(((lut >> (((a >> i) & 1) << 2 | ((b >> i) & 1) << 1 | ((c >> i) & 1))) & 1) << i for i in range(32))


def run_ptx(src: str, inputs: dict[int, int]) -> dict[int, int]:
    """Execute the decoder's PTX on 32-bit inputs {$n: value} -> {$n: output}: 16-bit halves a mov.b32 {$lo, $hi}
    writes, and 32-bit values of $n registers an instruction writes (w4_ws.pairs_ptx's packed pairs)."""
    regs: dict[str, int] = {f"${k}": v & M32 for k, v in inputs.items()}
    outs: dict[int, int] = {}

    def val(tok: str) -> int:
        tok = tok.strip()
        return int(tok, 0) & M32 if tok[0].isdigit() else regs[tok]

    for line in src.splitlines():
        line = line.strip().rstrip(";")
        if not line or line in "{}" or line.startswith(".reg"):
            continue
        op, rest = line.split(None, 1)
        if op == "mov.b32" and rest.startswith("{"):        # {$lo, $hi}, src: the two halves out
            lo, hi, srcreg = re.fullmatch(r"\{\$(\d+), \$(\d+)\}, (\w+)", rest).group(1, 2, 3)
            outs[int(lo)], outs[int(hi)] = regs[srcreg] & 0xFFFF, regs[srcreg] >> 16
            continue
        args = [t.strip() for t in rest.split(",")]
        d = args[0]
        if op == "mov.b32":
            regs[d] = val(args[1])
        elif op == "shl.b32":
            regs[d] = (val(args[1]) << int(args[2])) & M32
        elif op == "shr.b32":
            regs[d] = val(args[1]) >> int(args[2])
        elif op == "and.b32":
            regs[d] = val(args[1]) & val(args[2])
        elif op == "or.b32":
            regs[d] = val(args[1]) | val(args[2])
        elif op == "xor.b32":
            regs[d] = val(args[1]) ^ val(args[2])
        elif op == "prmt.b32":
            regs[d] = _prmt(val(args[1]), val(args[2]), val(args[3]))
        elif op == "fma.rn.bf16x2":
            regs[d] = _fma_bf16x2(val(args[1]), val(args[2]), val(args[3]))
        elif op == "sub.rn.bf16x2":
            regs[d] = _sub_bf16x2(val(args[1]), val(args[2]))
        elif op == "lop3.b32":
            regs[d] = _lop3(val(args[1]), val(args[2]), val(args[3]), int(args[4], 0))
        else:
            raise NotImplementedError(op)
        if d.startswith("$") and int(d[1:]) not in inputs:
            outs[int(d[1:])] = regs[d]
    return outs


def _pair(x: torch.Tensor) -> int:
    h = int(x.to(torch.bfloat16).view(torch.int16).item()) & 0xFFFF
    return h * 65537


def _reference(codes: list[int], s_byte: int, g: float) -> list[int]:
    """oracle-emulation's NVFP4 dequantization of one 16-value group (codes, E4M3 scale byte, global scale)
    -> the bf16 bits of the values a layer multiplies."""
    from oracle_emulation.formats import nvfp4

    packed = torch.tensor([[codes[2 * j] | (codes[2 * j + 1] << 4) for j in range(8)]], dtype=torch.uint8)
    scale = torch.tensor([[s_byte]], dtype=torch.uint8).view(torch.float8_e4m3fn)
    w = nvfp4.dequantize(packed, scale, torch.tensor(g, dtype=torch.float32)).to(torch.bfloat16)
    return [int(v) & 0xFFFF for v in w.view(torch.int16)[0]]


def _decode(ptx: str, codes: list[int], extra: dict[int, int]) -> list[int]:
    out = []
    for word in range(2):
        u = sum(codes[8 * word + i] << (4 * i) for i in range(8))
        o = run_ptx(ptx, {8: u, **extra})
        out += [o[i] for i in range(8)]
    return out


CODES = list(range(16))                       # every code once: 0, 0.5, ..., 6 and their negatives
GLOBALS = [1.0, 0.37, 1.0 / 2688.0, 3.1e-5, 0.0123]


@pytest.mark.parametrize("g", GLOBALS)
def test_table_decoder_gives_the_nvfp4_reference_bits(g):
    """gemm.e2m1_word_ptx_table with e2m1_scale_word's {A, B} (A = bf16(s x g), B = bf16((1.5 s) x g), fp32
    products): every code times every finite E4M3 scale is oracle-emulation's bf16 weight, bit for bit."""
    from oracle_triton.gemm import e2m1_word_ptx_table

    ptx = e2m1_word_ptx_table()
    gt = torch.tensor(g, dtype=torch.float32)
    for s_byte in range(0x7F):                         # 0x7F is NaN; the sign bit is never set in a scale
        sv = torch.tensor([s_byte], dtype=torch.uint8).view(torch.float8_e4m3fn).float()
        extra = {9: (_pair(sv * gt) & 0xFFFF) | (_pair((sv * 1.5) * gt) & 0xFFFF0000)}
        assert _decode(ptx, CODES, extra) == _reference(CODES, s_byte, g), (g, s_byte)


def test_table_generator_orders_hold_the_same_weights():
    """gemm.e2m1_word_ptx_table, the one generator of both byte-table decoders: on random words and NVFP4 scale
    words (random E4M3 scales and global scales) its A-fragment order (w4_rega's TABLE: codes 2j / 2j + 1 as $j / $(j + 4)) is its k order (the MoE and
    swap word paths: $0..$7) permuted, and the shared table and lookup lines are one text."""
    from oracle_triton.gemm import e2m1_word_ptx_table

    k_order, a_order = e2m1_word_ptx_table(), e2m1_word_ptx_table(a_fragment=True)
    shared = k_order.splitlines()[2:20]                # the table and the lookups (after the register line)
    assert shared == a_order.splitlines()[2:20] and shared[-1] == "shl.b32 se, $8, 4;"
    gen = torch.Generator().manual_seed(11)
    for _ in range(300):
        u = int(torch.randint(0, 2 ** 32, (1,), generator=gen, dtype=torch.int64))
        sv = torch.randint(1, 0x7F, (1,), generator=gen, dtype=torch.uint8).view(torch.float8_e4m3fn).float()
        gt = torch.tensor(GLOBALS[int(torch.randint(0, len(GLOBALS), (1,), generator=gen))], dtype=torch.float32)
        sw = (_pair(sv * gt) & 0xFFFF) | (_pair((sv * 1.5) * gt) & 0xFFFF0000)
        k_out, a_out = run_ptx(k_order, {8: u, 9: sw}), run_ptx(a_order, {8: u, 9: sw})
        assert [k_out[i] for i in range(8)] == [a_out[i // 2 + 4 * (i % 2)] for i in range(8)], (hex(u), hex(sw))


def test_single_factor_decoder_rounds_nvfp4_scales_twice():
    """The bit-placement decoder with one factor bf16(s x g) (gemm.e2m1_word_ptx, the word paths' default) is
    the reference's for the power-of-two codes and one bf16 ulp off for some 1.5 p codes: the double rounding
    e2m1_word_ptx_table removes."""
    from oracle_triton.gemm import e2m1_word_ptx

    ptx = e2m1_word_ptx(False)
    gt = torch.tensor(1.0 / 2688.0, dtype=torch.float32)
    assert ulps_off_the_reference(lambda sv: _decode(ptx, CODES, {9: _pair(sv * gt)}), 1.0 / 2688.0) > 0


def ulps_off_the_reference(decode, g: float) -> int:
    """decode(sv) (a decoder's bf16 bits for CODES with the scale value sv, an fp32 [1] tensor) against
    oracle-emulation for every finite E4M3 scale and global scale g: the power-of-two codes must be exact and
    the 1.5 p codes within one bf16 ulp; returns how many are one ulp off (a decoder that rounds the scale
    first, then multiplies, misses some)."""
    off = 0
    for s_byte in range(1, 0x7F):
        sv = torch.tensor([s_byte], dtype=torch.uint8).view(torch.float8_e4m3fn).float()
        for c, a, b in zip(CODES, decode(sv), _reference(CODES, s_byte, g)):
            if (c & 7) in (0, 1, 2, 4, 6):
                assert a == b, (s_byte, c)
            else:
                assert abs(a - b) <= 1, (s_byte, c)
                off += a != b
    return off


#: NVFP4 W4A4 on the swap words path with the table decoder (the default), against emulation on the GPU: R27 of the
#: eleventh pass measured 0 / 1.9e-6 at M=8 / 128 (the single-factor decoder 4.3e-2 / 3.3e-2)
TOL_TABLE = 1e-2


@pytest.mark.gpu
@pytest.mark.parametrize("m,per_expert", [(8, 1.0), (128, 16.0)])
def test_nvfp4_w4a4_swap_words_table_decoder_matches_emulation_closely(m, per_expert, capsys):
    """The fused MoE's NVFP4 W4A4 swap words path (moe.swap_words_config: 16-pair blocks at one pair per expert,
    32-pair blocks at 16) with TABLE (gemm.e2m1_word_values_table) decodes each weight to the reference's bits,
    so only the fp32 sums' order separates it from emulation; FC2's input is rounded to FP4, where a bf16 ulp
    moved a value across an FP4 boundary with the single-factor decoder (TABLE 0, reported beside it). The
    default config takes the table."""
    from helpers import moe_pair, rel, routing
    from oracle_triton.moe import swap_words_config

    if not torch.cuda.is_available():
        pytest.skip("needs a GPU")
    t, ref = moe_pair("nvfp4", 32, 1024, 768, 4, "w4a4_nvfp4", "nvfp4", {}, device="cuda")   # Qwen3's kernels
    x = torch.randn(m, 1024, dtype=torch.bfloat16, device="cuda")
    w, ids = routing(m, 32, 4, "cuda")
    expect = ref.apply(x, w, ids)
    cfg = swap_words_config(per_expert)
    t.config = cfg
    err = rel(t.apply(x, w, ids), expect)
    t.config = dict(cfg, TABLE=0)
    err_single = rel(t.apply(x, w, ids), expect)
    with capsys.disabled():
        print(f"\nNVFP4 W4A4 swap words M={m}: table decoder {err:.2e}, single-factor decoder {err_single:.2e}")
    assert err < TOL_TABLE, (m, err, err_single)
