"""Format facts, checked against the specs and torch's own float8 types, and hand-computed blocks.

Every expected value here is written out by hand from the format definition (cited),
never computed by the code under test.
"""
from __future__ import annotations

import math
import struct

import pytest
import torch

from oracle_emulation.formats import e2m1, e8m0, fp8, ggml_iq2, ggml_q8_0, int4, mxfp, nvfp4

# ---------------------------------------------------------------------------- E2M1
# OCP MX v1.0 section 5.3.3: E2M1 has exponent bias 1, one mantissa bit, max normal 6.
E2M1_BY_HAND = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def test_e2m1_sixteen_values():
    values = e2m1.decode(torch.arange(16, dtype=torch.uint8)).tolist()
    assert values[:8] == E2M1_BY_HAND
    assert values[8:] == [-v for v in E2M1_BY_HAND]
    assert all(math.copysign(1.0, v) == -1.0 for v in values[8:])   # code 8 is -0.0


def test_e2m1_codes_round_trip():
    codes = torch.arange(16, dtype=torch.uint8)
    back = e2m1.encode(e2m1.decode(codes))
    assert back.tolist() == list(range(16))


@pytest.mark.parametrize("x, expected", [
    (0.25, 0.0), (0.26, 0.5), (0.75, 1.0), (1.25, 1.0), (1.75, 2.0), (2.5, 2.0),
    (3.5, 4.0), (5.0, 4.0), (5.01, 6.0), (7.0, 6.0), (100.0, 6.0), (-2.5, -2.0), (-0.75, -1.0),
])
def test_e2m1_rounds_to_nearest_ties_to_even(x, expected):
    # ties go to the code with an even mantissa bit: 0.25 -> 0, 0.75 -> 1.0, 2.5 -> 2, 5 -> 4
    assert e2m1.round_to_e2m1(torch.tensor([x])).item() == expected


def test_e2m1_packs_low_nibble_first():
    codes = torch.tensor([[0x1, 0x2, 0xF, 0x8]], dtype=torch.uint8)
    packed = e2m1.pack(codes)
    assert packed.tolist() == [[0x21, 0x8F]]
    assert e2m1.unpack(packed).tolist() == codes.tolist()


# ---------------------------------------------------------------------------- E8M0
@pytest.mark.parametrize("byte, value", [
    (127, 1.0), (128, 2.0), (126, 0.5), (0, 2.0 ** -127), (1, 2.0 ** -126), (254, 2.0 ** 127), (120, 2.0 ** -7),
])
def test_e8m0_decoding(byte, value):
    assert e8m0.decode(torch.tensor([byte], dtype=torch.uint8)).item() == value


def test_e8m0_nan_byte():
    assert math.isnan(e8m0.decode(torch.tensor([0xFF], dtype=torch.uint8)).item())


def test_e8m0_accepts_torch_e8m0_dtype():
    dtype = getattr(torch, "float8_e8m0fnu", None)
    if dtype is None:
        pytest.skip("this torch has no float8_e8m0fnu")
    b = torch.tensor([0, 100, 127, 200, 254], dtype=torch.uint8)
    assert torch.equal(e8m0.decode(b.view(dtype)), b.view(dtype).float())


@pytest.mark.parametrize("amax, rounding, element_max, emax, byte", [
    (6.0, "ceil", 6.0, 2, 127),      # 6/6 = 1 -> 2**0
    (6.5, "ceil", 6.0, 2, 128),      # 6.5/6 > 1 -> 2**1
    (1.0, "ceil", 448.0, 8, 119),    # 1/448 -> ceil(log2) = -8
    (448.0, "ceil", 448.0, 8, 127),
    (6.0, "floor", 6.0, 2, 127),     # OCP: floor(log2 6) - 2 = 0
    (7.9, "floor", 6.0, 2, 127),
    (8.0, "floor", 6.0, 2, 128),
    (0.0, "ceil", 6.0, 2, 0),        # all-zero block: smallest scale
])
def test_e8m0_scale_selection(amax, rounding, element_max, emax, byte):
    got = e8m0.scale_for(torch.tensor([amax]), element_max, emax, rounding)
    assert got.tolist() == [byte]


# ---------------------------------------------------------------------------- E4M3
def test_e4m3_bit_decoding_agrees_with_torch_on_all_256_patterns():
    bits = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    ours = fp8.decode_bits(bits)
    theirs = bits.view(torch.float8_e4m3fn).float()
    assert torch.equal(torch.isnan(ours), torch.isnan(theirs))
    finite = ~torch.isnan(theirs)
    assert torch.equal(ours[finite], theirs[finite])
    assert int(torch.isnan(theirs).sum()) == 2                        # 0x7F and 0xFF only


@pytest.mark.parametrize("byte, value", [(0x38, 1.0), (0x7E, 448.0), (0x01, 2.0 ** -9), (0x08, 2.0 ** -6),
                                         (0xB8, -1.0), (0x3C, 1.5), (0x07, 7 * 2.0 ** -9)])
def test_e4m3_hand_values(byte, value):
    # OCP FP8 v1.0: bias 7, 3 mantissa bits; 0x7E = 0.1111.110 = 2**8 * 1.75 = 448
    assert fp8.decode_bits(torch.tensor([byte], dtype=torch.uint8)).item() == value


def test_e4m3_rounding_agrees_with_torch_cast():
    finite = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(torch.float8_e4m3fn).float()
    grid = torch.unique(finite[~torch.isnan(finite)])
    mids = (grid[1:] + grid[:-1]) / 2                                 # every tie
    rand = (torch.randn(20000) * torch.exp2(torch.randint(-12, 9, (20000,)).float())).clamp(-448, 448)
    x = torch.cat([grid, mids, rand, mids + 1e-7, mids - 1e-7])
    assert torch.equal(fp8.round_to_e4m3(x), x.to(torch.float8_e4m3fn).float())


def test_e4m3_saturating_cast():
    x = torch.tensor([1000.0, -1e9, 448.0])
    assert fp8.to_e4m3(x).float().tolist() == [448.0, -448.0, 448.0]


# ---------------------------------------------------------------------------- hand-computed blocks
def test_fp8_tensor_block_by_hand():
    w = torch.tensor([[896.0, -2.0], [1.0, 0.0]])                     # amax 896 -> scale 2
    q = fp8.quantize(w, "fp8_tensor")
    assert q["weight_scale"].item() == 2.0
    assert q["weight"].float().tolist() == [[448.0, -1.0], [0.5, 0.0]]


def test_fp8_channel_and_block_by_hand():
    w = torch.tensor([[448.0, 1.0], [-4.48, 0.0]])
    q = fp8.quantize(w, "fp8_channel")
    assert q["weight_scale"].tolist() == pytest.approx([1.0, 0.01])
    w = torch.zeros(130, 129)
    w[0, 0], w[129, 128] = 896.0, 44.8                                # blocks (0,0) and (1,1)
    q = fp8.quantize(w, "fp8_block")
    assert list(q["weight_scale"].shape) == [2, 2]
    assert q["weight_scale"].flatten().tolist() == pytest.approx([2.0, 1.0, 1.0, 0.1])
    assert q["weight"][0, 0].float().item() == 448.0 and q["weight"][129, 128].float().item() == 448.0


def test_mxfp8_block_by_hand():
    w = torch.zeros(1, 32)
    w[0, 0], w[0, 1] = 1.0, -0.5                                      # amax 1: scale 2**-8 (byte 119)
    q = mxfp.quantize(w, "mxfp8")
    assert q["weight_scale"].tolist() == [[119]]
    assert q["weight"].float()[0, :2].tolist() == [256.0, -128.0]
    assert mxfp.dequantize(q["weight"], q["weight_scale"], "mxfp8")[0, :2].tolist() == [1.0, -0.5]


def test_mxfp4_block_by_hand():
    w = torch.zeros(1, 32)
    w[0, :4] = torch.tensor([0.5, -1.0, 3.0, 6.0])                    # amax 6: scale 2**0 (byte 127)
    q = mxfp.quantize(w, "mxfp4")
    assert q["weight_scale"].tolist() == [[127]]
    # codes 0.5 -> 1, -1 -> 0xA, 3 -> 5, 6 -> 7; low nibble first: 0xA1, 0x75
    assert q["weight"][0, :2].tolist() == [0xA1, 0x75]
    assert q["weight"][0, 2:].tolist() == [0] * 14
    w[0, 0] = 12.0                                                    # amax 12: scale 2 (byte 128)
    q = mxfp.quantize(w, "mxfp4")
    assert q["weight_scale"].tolist() == [[128]]
    assert mxfp.dequantize(q["weight"], q["weight_scale"], "mxfp4")[0, :4].tolist() == [12.0, -1.0, 3.0, 6.0]
    assert q["weight"][0, :2].tolist() == [0x97, 0x53]                # 6 -> 7, -0.5 -> 0x9; 1.5 -> 3, 3 -> 5


def test_nvfp4_block_by_hand():
    w = torch.zeros(1, 32)
    w[0, :4] = torch.tensor([0.5, -1.0, 3.0, 6.0])                    # block 0: amax 6
    w[0, 16] = 3.0                                                    # block 1: amax 3
    q = nvfp4.quantize(w, global_scale=torch.tensor(0.5))
    # block scale = amax / 6 / global: 2.0 (E4M3 0x40) and 1.0 (0x38)
    assert q["weight_scale"].view(torch.uint8).tolist() == [[0x40, 0x38]]
    # values / (scale * global) = w / 1 and w / 0.5: 0.5,-1,3,6 -> codes 1,0xA,5,7; 3/0.5 = 6 -> 7
    assert q["weight"][0, :2].tolist() == [0xA1, 0x75]
    assert q["weight"][0, 8].item() == 0x07
    back = nvfp4.dequantize(q["weight"], q["weight_scale"], q["weight_global_scale"])
    assert torch.equal(back, w)


def test_nvfp4_default_global_scale_is_amax_over_6_times_448():
    w = torch.zeros(2, 16)
    w[1, 3] = -2688.0
    q = nvfp4.quantize(w)
    assert q["weight_global_scale"].item() == 1.0                     # 2688 / (6 * 448)


def test_int4_gptq_block_by_hand():
    # one group of 8 rows (K = 8) for 8 columns; column 0 spans [-1.5, 6]: scale 0.5, zero 3
    w_kn = torch.zeros(8, 8)
    w_kn[:, 0] = torch.tensor([-1.5, 6.0, 0.0, 0.5, 1.0, 2.0, -1.0, 3.0])
    q = int4.quantize(w_kn.t(), group_size=8)
    assert q["weight_scale"].dtype == torch.float16 and q["weight_scale"][0, 0].item() == 0.5
    # q = w / 0.5 + 3 = [0, 15, 3, 4, 5, 7, 1, 9]; nibble i of the int32 is row i
    expected = sum(v << (4 * i) for i, v in enumerate([0, 15, 3, 4, 5, 7, 1, 9]))
    assert q["weight"][0, 0].item() == struct.unpack("<i", struct.pack("<I", expected))[0]
    # zero points: column 0 has 3, the all-zero columns 0 -> packed along N, low nibble first
    assert q["weight_zero_point"].tolist() == [[3]]
    back = int4.dequantize(q["weight"], q["weight_scale"], q["weight_zero_point"])
    assert torch.equal(back, w_kn.t())


def test_int4_symmetric_zero_is_8():
    packed = torch.tensor([[0x76543210 - 0]], dtype=torch.int64).to(torch.int32).expand(1, 8).contiguous()
    scale = torch.full((1, 8), 2.0, dtype=torch.float16)
    back = int4.dequantize(packed, scale, None)                       # (q - 8) * 2 for q = 0..7
    assert back[0].tolist() == [-16.0, -14.0, -12.0, -10.0, -8.0, -6.0, -4.0, -2.0]


def test_q8_0_block_by_hand():
    w = torch.zeros(1, 32)
    w[0, :3] = torch.tensor([127.0, -63.5, 2.0])                      # d = 127 / 127 = 1
    raw = ggml_q8_0.quantize(w)["weight"]
    assert list(raw.shape) == [1, 1, 34]
    assert raw[0, 0, :2].tolist() == [0x00, 0x3C]                     # fp16 1.0 = 0x3C00, little-endian
    # roundf rounds half away from zero: -63.5 -> -64 (0xC0 as a byte)
    assert raw[0, 0, 2:5].tolist() == [127, 0xC0, 2]
    assert ggml_q8_0.dequantize(raw)[0, :3].tolist() == [127.0, -64.0, 2.0]


def _fp16_bytes(v: float) -> list[int]:
    return list(struct.pack("<e", v))


def test_iq2_xxs_block_decoded_by_hand():
    block = [0] * 66
    block[0:2] = _fp16_bytes(1.0)
    # sub-block 0: grid indices 0, 1, 2, 3; sign indices 0, 1, 0, 0; scale l = 3 -> db = (0.5 + 3) / 4
    block[2:6] = [0, 1, 2, 3]
    aux = (0 << 0) | (1 << 7) | (3 << 28)
    block[6:10] = list(struct.pack("<I", aux))
    raw = torch.tensor(block, dtype=torch.uint8).reshape(1, 1, 66)
    out = ggml_iq2.dequantize(raw, "iq2_xxs")[0]
    db = 0.875
    # iq2xxs_grid[0] = 0x0808080808080808, [1] = 0x080808080808082b (byte 0 = 0x2b = 43),
    # [2] = 0x0808080808081919, [3] = 0x0808080808082b08; ksigns_iq2xs[1] = 129: elements 0 and 7 negative
    assert out[0:8].tolist() == [db * 8] * 8
    assert out[8:16].tolist() == [-db * 43] + [db * 8] * 6 + [-db * 8]
    assert out[16:24].tolist() == [db * 25, db * 25] + [db * 8] * 6
    assert out[24:32].tolist() == [db * 8, db * 43] + [db * 8] * 6
    # the other sub-blocks have l = 0 (db = 1/8), grid 0, no signs
    assert out[32:].tolist() == [0.125 * 8] * 224


def test_iq2_xs_block_decoded_by_hand():
    block = [0] * 74
    block[0:2] = _fp16_bytes(2.0)
    # first uint16: grid index 511 with sign index 5; second: index 3 with sign index 127
    block[2:4] = list(struct.pack("<H", 511 | (5 << 9)))
    block[4:6] = list(struct.pack("<H", 3 | (127 << 9)))
    block[66] = 0x21                                                  # scales: groups 0,1 -> 1; 2,3 -> 2
    raw = torch.tensor(block, dtype=torch.uint8).reshape(1, 1, 74)
    out = ggml_iq2.dequantize(raw, "iq2_xs")[0]
    lo, hi = 2.0 * 1.5 / 4, 2.0 * 2.5 / 4                             # d * (0.5 + l) / 4
    # iq2xs_grid[511] = 0x2b2b2b2b2b2b2b2b; ksigns_iq2xs[5] = 5: elements 0 and 2 negative
    assert out[0:8].tolist() == [-lo * 43, lo * 43, -lo * 43] + [lo * 43] * 5
    # iq2xs_grid[3] = 0x0808080808082b08 (byte 1 = 43); ksigns_iq2xs[127] = 255: all negative
    assert out[8:16].tolist() == [-lo * 8, -lo * 43] + [-lo * 8] * 6
    assert out[16:32].tolist() == [hi * 8] * 16                       # index 0, high-nibble scale
    assert out[32:].tolist() == [2.0 * 0.5 / 4 * 8] * 224


# ---------------------------------------------------------------------------- IQ2 codebooks
def _decode_gguf_hex(text: str) -> list[int]:
    raw, out = bytes.fromhex(text), []
    for i in range(0, len(raw), 2):
        u = raw[i] | (raw[i + 1] << 8)
        out.append(sum((0x08, 0x19, 0x2B)[(u >> (2 * j)) & 3] << (8 * j) for j in range(8)))
    return out


def test_iq2_grids_match_the_independent_gguf_py_encoding():
    from iq2_gguf_hex import IQ2XS_GRID_HEX, IQ2XXS_GRID_HEX

    tables = ggml_iq2.tables()
    assert len(tables["iq2xxs_grid"]) == 256 and len(tables["iq2xs_grid"]) == 512
    assert tables["iq2xxs_grid"] == _decode_gguf_hex(IQ2XXS_GRID_HEX)
    assert tables["iq2xs_grid"] == _decode_gguf_hex(IQ2XS_GRID_HEX)


def test_ksigns_is_the_even_parity_completion():
    # ksigns_iq2xs[i] = i with bit 7 set when i has an odd number of set bits (so 8 signs have even parity)
    ks = ggml_iq2.tables()["ksigns_iq2xs"]
    assert ks == [i | (0x80 if bin(i).count("1") % 2 else 0) for i in range(128)]


def test_iq2_grid_bytes_are_the_three_magnitudes():
    for name in ("iq2xxs_grid", "iq2xs_grid"):
        for entry in ggml_iq2.tables()[name]:
            assert all(((entry >> (8 * j)) & 0xFF) in (0x08, 0x19, 0x2B) for j in range(8))
