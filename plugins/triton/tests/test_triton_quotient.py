"""NVFP4 rounding's quotient by a reciprocal and two FMAs (dequant.quotient_by_reciprocal, launch.FAST_NVFP4_DIV)
against the IEEE division: on the CPU the two FMAs' arithmetic modelled exactly (float64 products, exact sums
where float64 could round twice), on a GPU the kernel's bits."""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
import torch

F32 = np.float32
#: E2M1's rounding boundaries: the quotients where a wrong last bit changes the code
TIES = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0], dtype=F32)


def _f32_exact(fr: Fraction) -> np.float32:
    """fr rounded to the nearest float32 (ties to even), with no intermediate rounding."""
    if fr == 0:
        return F32(0)
    sign, fr = (-1 if fr < 0 else 1), abs(fr)
    ex = fr.numerator.bit_length() - fr.denominator.bit_length()
    while Fraction(2) ** ex > fr:
        ex -= 1
    while Fraction(2) ** (ex + 1) <= fr:
        ex += 1
    ulp = Fraction(2) ** (ex - 23)
    k = fr / ulp
    low = k.numerator // k.denominator
    rest = k - low
    if rest > Fraction(1, 2) or (rest == Fraction(1, 2) and low % 2):
        low += 1
    return F32(sign * float(low * ulp))


def by_reciprocal(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The kernel's steps on float32 arrays with fused FMAs: y = RN(1 / b), q0 = RN(a y), e = RN(a - b q0),
    RN(q0 + e y). The products of two float32 are exact in float64; a - b q0 cancels to at most 48 bits, so
    float64 holds it exactly; q0 + e y may need more, so where float64's sum lands on a float32 midpoint it is
    redone in exact rationals."""
    y = (1.0 / b.astype(np.float64)).astype(F32)     # float32 operands: float64 then float32 rounds correctly
    q0 = (a.astype(np.float64) * y).astype(F32)
    e = (a.astype(np.float64) - b.astype(np.float64) * q0).astype(F32)
    wide = q0.astype(np.float64) + e.astype(np.float64) * y.astype(np.float64)
    out = wide.astype(F32)
    ulp = np.spacing(np.abs(out)).astype(np.float64)
    for i in np.nonzero(np.abs(np.abs(wide - out) / ulp - 0.5) < 1e-6)[0]:
        out[i] = _f32_exact(Fraction(float(q0[i])) + Fraction(float(e[i])) * Fraction(float(y[i])))
    return out


def _ieee(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a.astype(np.float64) / b.astype(np.float64)).astype(F32)


def _bf16(v: np.ndarray) -> np.ndarray:
    return torch.from_numpy(np.ascontiguousarray(v, dtype=F32)).to(torch.bfloat16).float().numpy()


def nvfp4_quotients(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Dividends (bf16 values, as FC1 writes them) and divisors (an E4M3 scale times a global scale) as NVFP4's
    rounding meets them: |a / b| <= 6.5, plus a = tie x b exactly and its two float32 neighbours."""
    rng = np.random.default_rng(seed)
    e4m3 = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).float().numpy()
    e4m3 = e4m3[np.isfinite(e4m3) & (e4m3 > 0)]
    b = (e4m3[rng.integers(0, len(e4m3), n)] * rng.lognormal(-6, 3, n).astype(F32)).astype(F32)
    b = np.where(b > 0, b, F32(1))
    a = _bf16(rng.uniform(-6.5, 6.5, n).astype(F32) * b)
    tie = (TIES[rng.integers(0, len(TIES), n)] * b).astype(F32)
    a = np.concatenate([a, tie, np.nextafter(tie, F32(np.inf)), np.nextafter(tie, F32(0))])
    return a, np.tile(b, 4)


def test_the_two_fmas_give_the_ieee_quotient_on_nvfp4s_range():
    a, b = nvfp4_quotients(200_000)
    assert np.array_equal(by_reciprocal(a, b), _ieee(a, b))


def test_the_two_fmas_give_the_ieee_quotient_for_extreme_divisor_mantissas():
    """Divisors whose mantissa is all ones, one ulp over a power of two, or repeating, over 2**-60..2**39, each
    against every bf16 dividend with |a / b| in [1e-6, 6.5]."""
    mant = np.array([0x7FFFFF, 0x7FFFFE, 0x000001, 0x000002, 0x400001, 0x3FFFFF, 0x555555], dtype=np.int64)
    exps = np.arange(-60, 40, 11)
    divisors = (((exps[:, None] + 127) << 23) | mant[None, :]).astype(np.int32).view(F32).ravel()
    bf = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(torch.bfloat16).float().numpy()
    bf = bf[np.isfinite(bf)]
    for b in divisors:
        lim = 6.5 * float(b)
        a = bf[(np.abs(bf) <= lim) & (np.abs(bf) >= lim * 1e-6)].astype(F32)
        bb = np.full_like(a, b)
        assert np.array_equal(by_reciprocal(a, bb), _ieee(a, bb)), b


def test_the_model_sees_a_wrong_quotient():
    """The check above can fail: one FMA step left out (q0 = RN(a y) alone) misses the IEEE quotient often."""
    a, b = nvfp4_quotients(20_000, seed=1)
    y = (1.0 / b.astype(np.float64)).astype(F32)
    q0 = (a.astype(np.float64) * y).astype(F32)
    assert (q0 != _ieee(a, b)).sum() > 100


@pytest.mark.parametrize("gpu", [False, True])
def test_the_fast_division_is_asked_for_on_gpus_only(gpu, monkeypatch):
    """launch.quantize_activations asks act_qdq_kernel for FAST_DIV on NVFP4 roundings where the device facts say
    a GPU (the interpreter's FMA rounds twice, so its facts keep the division), and never for FP8 or with the
    switch off."""
    from oracle_triton import fastlaunch, launch
    from oracle_triton.formats import ACT_NVFP4, ACT_TENSOR

    asked: list = []
    monkeypatch.setattr(fastlaunch, "launch", lambda fn, grid, warps, **kw: asked.append(kw.get("FAST_DIV", False)))
    facts = dict(launch.device_facts(torch.device("cpu")), dot_f32=not gpu)
    x, scale = torch.zeros(16, 128, dtype=torch.bfloat16), torch.ones(1)
    launch.quantize_activations(x, ACT_NVFP4, scale, facts)
    launch.quantize_activations(x, ACT_TENSOR, scale, facts)
    monkeypatch.setattr(launch, "FAST_NVFP4_DIV", False)
    launch.quantize_activations(x, ACT_NVFP4, scale, facts)
    assert asked == [gpu, False, False]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
@pytest.mark.parametrize("scale", [1e-3, 0.37, 1.0, 3.0e4])
def test_fast_nvfp4_division_rounds_to_the_same_bits_on_a_gpu(scale, monkeypatch):
    """launch.quantize_activations through NVFP4 with FAST_NVFP4_DIV on and off (act_qdq_kernel's FAST_DIV): the
    same bf16 bits, on normal rows, on rows built on E2M1's ties (each 16-group's amax 6 x scale x a power of two,
    the other values a tie x scale x that power) and their bf16 neighbours, over scales from 1e-3 to 3e4; and
    within NVFP4's step of the values themselves."""
    from oracle_triton import launch
    from oracle_triton.formats import ACT_NVFP4

    facts = launch.device_facts(torch.device("cuda"))
    g = torch.Generator(device="cpu").manual_seed(7)
    normal = torch.randn(64, 1024, generator=g) * scale
    ties = torch.tensor(np.resize(np.concatenate([[6.0], TIES, -TIES]), 16), dtype=torch.float32)
    tie_rows = (ties.repeat(32, 64) * scale * 2.0 ** torch.randint(-3, 4, (32, 1), generator=g)).to(torch.bfloat16)
    up = tie_rows.view(torch.int16) + 1
    down = tie_rows.view(torch.int16) - 1
    a = torch.cat([normal.to(torch.bfloat16), tie_rows, up.view(torch.bfloat16), down.view(torch.bfloat16)]).cuda()
    gs = torch.tensor([float(a.float().abs().max()) / 2688.0], device="cuda")
    monkeypatch.setattr(launch, "FAST_NVFP4_DIV", False)
    exact = launch.quantize_activations(a, ACT_NVFP4, gs, facts)
    monkeypatch.setattr(launch, "FAST_NVFP4_DIV", True)
    fast = launch.quantize_activations(a, ACT_NVFP4, gs, facts)
    torch.cuda.synchronize()
    assert torch.equal(fast.view(torch.int16), exact.view(torch.int16))
    assert float((fast.float() - a.float()).abs().max()) <= float(a.float().abs().max()) / 6.0 * 1.1


def test_the_two_fmas_give_the_ieee_quotient_for_every_per_token_fp8_quotient():
    """Per-token FP8 codes (launch.FAST_CODES_DIV, dequant.scaled_quotients): the divisor is s = amax / 448 of a
    bf16 amax and the dividend a bf16 value of the row (|a| <= amax). For every bf16 amax of three binades (the
    reciprocal range's ends, 2**-51 and 2**67, and 1: inside the range every step scales exactly by powers of
    two) and every bf16 dividend from the amax down to 2**-24 of it (quotients far below E4M3's smallest code,
    2**-9), the two FMAs give the IEEE quotient's bits."""
    bf = torch.arange(0, 32768, dtype=torch.int32).to(torch.int16).view(torch.bfloat16).float().numpy()
    bf = bf[np.isfinite(bf) & (bf > 0)]
    checked = 0
    for e in (-51, 0, 67):
        for amax in bf[(bf >= 2.0 ** e) & (bf < 2.0 ** (e + 1))]:
            b = F32(np.float64(amax) / 448.0)                      # float32 / float32 division, rounded once
            assert 2.0 ** -60 <= b <= 2.0 ** 60
            a = bf[(bf <= amax) & (bf >= amax * 2.0 ** -24)].astype(F32)
            bb = np.full_like(a, b)
            assert np.array_equal(by_reciprocal(a, bb), _ieee(a, bb)), amax
            checked += len(a)
    assert checked > 1_000_000


@pytest.mark.parametrize("gpu", [False, True])
def test_the_fp8_quantizers_ask_for_reciprocal_quotients_where_they_are_exact(gpu, monkeypatch):
    """launch.quantize_activation_codes asks its kernels (row_codes_kernel per token, act_qdq_kernel per 1x128
    group, with launch.ACT_QDQ_FAST_CODES) for FAST_DIV on a GPU's facts with bf16 rows, the case the check above
    covers; not per tensor (a checkpoint's static scale may be any float), not for fp16 rows, not in the
    interpreter, not with FAST_CODES_DIV off; the hardware conversion wherever the facts say the GPU has it. With
    ACT_QDQ_FAST_CODES turned off act_qdq_kernel gets neither."""
    from oracle_triton import fastlaunch, launch
    from oracle_triton.formats import ACT_GROUP, ACT_TENSOR, ACT_TOKEN

    asked: list = []
    monkeypatch.setattr(launch, "ACT_QDQ_FAST_CODES", True)
    monkeypatch.setattr(fastlaunch, "launch", lambda fn, grid, warps, **kw: asked.append(
        (kw.get("FAST_DIV", False), kw.get("HW_FP8"))))
    facts = dict(launch.device_facts(torch.device("cpu")), dot_f32=not gpu, hw_fp8=gpu)
    scale = torch.ones(1)
    for act in (ACT_TOKEN, ACT_GROUP, ACT_TENSOR):
        launch.quantize_activation_codes(torch.zeros(4, 256, dtype=torch.bfloat16), act, scale, facts)
    launch.quantize_activation_codes(torch.zeros(4, 256, dtype=torch.float16), ACT_TOKEN, None, facts)
    monkeypatch.setattr(launch, "FAST_CODES_DIV", False)
    launch.quantize_activation_codes(torch.zeros(4, 256, dtype=torch.bfloat16), ACT_GROUP, None, facts)
    assert asked == [(gpu, gpu), (gpu, gpu), (False, gpu), (False, gpu), (False, gpu)]
    monkeypatch.setattr(launch, "FAST_CODES_DIV", True)
    monkeypatch.setattr(launch, "ACT_QDQ_FAST_CODES", False)
    asked.clear()
    launch.quantize_activation_codes(torch.zeros(4, 256, dtype=torch.bfloat16), ACT_GROUP, None, facts)
    assert asked == [(False, False)]
