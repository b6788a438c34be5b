"""The MX activation scale rule the kernels' emulation follows, against the OCP rule and compressed-tensors'.

Named rule (oracle_emulation.activations): the E8M0 exponent of a 32-value block is
ceil(log2(amax / element max)) -- the smallest power of two that keeps the block's largest value
representable (the b12x and cuBLAS quantizers). Two other rules exist and give other values:
- OCP MX v1.0 (section 6.3): floor(log2(amax)) - emax of the element (E2M1: 2, E4M3: 8); values above
  the element's max after scaling are clamped;
- compressed-tensors' `generate_mx_scales`: amax rounded to a power of two at the element's mantissa
  width, then the OCP floor.
Each expected block below is computed by hand from the rule (E2M1 nearest-value grid, torch's
float8_e4m3fn cast for E4M3), and compressed-tensors' exponent comes from its own function.
"""
from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("oracle_emulation")

from oracle_emulation.activations import mxfp4_qdq, mxfp8_qdq  # noqa: E402

E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


def _e2m1(v: float) -> float:
    mag = min(abs(v), 6.0)
    best = min(E2M1, key=lambda g: (abs(g - mag), g))     # the chosen values avoid ties
    return math.copysign(best, v)


def _e4m3(v: float) -> float:
    return float(torch.tensor(max(-448.0, min(448.0, v))).to(torch.float8_e4m3fn).float())


def _by_hand(block: list[float], exponent: int, element) -> list[float]:
    s = 2.0 ** exponent
    return [element(v / s) * s for v in block]


def _ct_exponent(amax: float, bits: int) -> int:
    from compressed_tensors.quantization.utils.mxfp_utils import generate_mx_scales
    return int(generate_mx_scales(torch.tensor([amax], dtype=torch.bfloat16), bits).item()) - 127


RULES = {
    "ceil (emulation, b12x, cuBLAS)": lambda amax, top, emax, bits: math.ceil(math.log2(amax / top)),
    "OCP MX v1.0": lambda amax, top, emax, bits: math.floor(math.log2(amax)) - emax,
    "compressed-tensors": lambda amax, top, emax, bits: _ct_exponent(amax, bits),
}
#: (format, block max, probe value): blocks where the rules disagree
CASES = [
    ("mxfp4", 3.25, 0.3),    # ceil 2**0; OCP and CT 2**-1 (the top clamps to 3, the probe rounds to 0.25)
    ("mxfp4", 6.25, 0.3),    # ceil 2**1 (the probe vanishes); OCP and CT 2**0 (the top clamps, the probe keeps 0.5)
    ("mxfp4", 7.5, 0.75),    # ceil and CT 2**1; OCP 2**0 clamps the top to 6
    ("mxfp8", 480.0, 0.011),  # ceil and CT 2**1; OCP 2**0 clamps the top to 448
]


@pytest.mark.parametrize("fmt,amax,probe", CASES)
def test_emulation_follows_the_ceil_rule(fmt, amax, probe):
    top, emax, bits, element, qdq = ((6.0, 2, 4, _e2m1, mxfp4_qdq) if fmt == "mxfp4"
                                     else (448.0, 8, 8, _e4m3, mxfp8_qdq))
    block = [amax, probe] + [0.0] * 30
    got = qdq(torch.tensor([block], dtype=torch.float32))[0].tolist()
    expected = {name: _by_hand(block, rule(amax, top, emax, bits), element) for name, rule in RULES.items()}
    assert got == expected["ceil (emulation, b12x, cuBLAS)"]
    assert any(expected[name] != got for name in RULES), "the case does not tell the rules apart"


def test_the_rules_differ_where_stated():
    """The named differences hold: CT rounds amax up near the next power of two, OCP floors, ceil keeps
    the top unclipped."""
    exp = {name[:4]: [rule(a, 6.0, 2, 4) for a in (3.25, 6.25, 7.5)] for name, rule in RULES.items()}
    assert exp == {"ceil": [0, 1, 1], "OCP ": [-1, 0, 0], "comp": [-1, 0, 1]}
