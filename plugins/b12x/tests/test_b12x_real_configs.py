"""The four b12x bug classes, decided on real model configs (examples/, see examples/SOURCES.md).

1. dynamic per-tensor FP8 must not get b12x tensor FP8 (it packs a static input scale);
2. block FP8 needs 128x128 2-D blocks, not only a 128 K-group;
3. more than 1024 experts is fine: the 1024 limit is b12x's native routing, and the plugin routes outside;
4. fp16 MXFP8 linears and fp16 NVFP4 W4A4 linears are served (b12x's fixed-contract entry points).

No shipped example is a plain per-tensor FP8 checkpoint (SOURCES.md found none), so class 1 uses the
real Qwen3-8B config.json with the quantization_config AutoFP8 writes for each activation scheme
(`{"quant_method": "fp8", "activation_scheme": ..., "ignored_layers": ["lm_head"]}`); the shipped
dynamic-FP8 checkpoints (DeepSeek-R1, Qwen3-30B-A3B-FP8 block; Llama-4-Scout FP8-dynamic per channel)
are checked as they are.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from oracle import KernelConfig, Platform, select_backend
from oracle.errors import InputError
from oracle.layer import MoELayer
from oracle.models import load_model

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "examples"
SM120 = Platform.preset("rtx-pro-6000", packages={"b12x": "1.5.1", "triton": "3.6.0"})


def _with_quant(tmp_path: Path, example: str, quant: dict | None = None, **top) -> Path:
    config = json.loads((EXAMPLES / example / "config.json").read_text())
    if quant is not None:
        config["quantization_config"] = quant
    config.update(top)
    folder = tmp_path / example
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    for sibling in (EXAMPLES / example).glob("hf_quant_config.json"):
        (folder / sibling.name).write_text(sibling.read_text())
    return folder


def _decisions(model, config: KernelConfig | None = None):
    return [(row, select_backend(row.layer, SM120, config or KernelConfig())) for row in model.layers
            if row.quantized]


def _explain(folder: Path, *extra: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "ORACLE_"))}
    out = subprocess.run([sys.executable, "-m", "oracle.cli", "explain", "--model", str(folder), "--device",
                          "rtx-pro-6000", "--with-package", "b12x=1.5.1", "--with-package", "triton=3.6.0", *extra],
                         capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)
    assert out.returncode in (0, 2), out.stderr
    return out.stdout


# ---- 1. dynamic per-tensor FP8 ---------------------------------------------------------------------
def test_dynamic_per_tensor_fp8_never_gets_b12x_tensor_fp8(tmp_path):
    folder = _with_quant(tmp_path, "qwen3-8b", {"quant_method": "fp8", "activation_scheme": "dynamic",
                                                "ignored_layers": ["lm_head"]})
    model = load_model(str(folder))
    assert "dynamic per-tensor activation scales" in model.dialect_detail
    decided = _decisions(model)
    assert decided and all(row.layer.activation_scale == "dynamic_tensor" for row, _ in decided)
    for row, d in decided:
        assert d.kernel != "b12x.linear.fp8_tensor", row.name
        rejected = next(c for c in d.candidates if c.kernel == "b12x.linear.fp8_tensor")
        assert "static per-tensor input scale" in rejected.reason and "dynamic_tensor" in rejected.reason
    text = _explain(folder)
    assert "b12x.linear.fp8_tensor (backend b12x)" not in text
    assert "static per-tensor input scale" in text


def test_static_per_tensor_fp8_keeps_b12x_tensor_fp8(tmp_path):
    folder = _with_quant(tmp_path, "qwen3-8b", {"quant_method": "fp8", "activation_scheme": "static",
                                                "ignored_layers": ["lm_head"]})
    decided = _decisions(load_model(str(folder)))
    assert decided and all(d.kernel == "b12x.linear.fp8_tensor" and d.mode == "tensor_fp8" for _, d in decided)
    assert "-> b12x.linear.fp8_tensor (backend b12x), mode tensor_fp8" in _explain(folder)


def test_shipped_dynamic_fp8_checkpoints_are_read_as_dynamic():
    for example, kind, block in (("deepseek-r1", "dynamic_group", (128, 128)),
                                 ("qwen3-30b-a3b-fp8", "dynamic_group", (128, 128)),
                                 ("llama-4-scout-17b-16e-instruct-fp8-dynamic", "dynamic_token", None)):
        rows = [r for r in load_model(example).layers if r.layer.weight_format.startswith("fp8")]
        assert rows and all(r.layer.activation_scale == kind and r.layer.weight_block == block for r in rows), example
        for row, d in _decisions(load_model(example)):
            assert d.kernel != "b12x.linear.fp8_tensor", (example, row.name)


# ---- 2. 2-D blocks -----------------------------------------------------------------------------------
def test_block_fp8_needs_128x128_blocks_not_just_a_128_k_group(tmp_path):
    good = _decisions(load_model("qwen3-30b-a3b-fp8"))
    assert any(d.kernel == "b12x.linear.fp8_block" for _, d in good)
    folder = _with_quant(tmp_path, "qwen3-30b-a3b-fp8", {"quant_method": "fp8", "activation_scheme": "dynamic",
                                                         "fmt": "e4m3", "weight_block_size": [64, 128]})
    model = load_model(str(folder))
    assert {r.layer.weight_block for r in model.layers if r.quantized} == {(64, 128)}
    for row, d in _decisions(model):
        assert d.kernel != "b12x.linear.fp8_block", row.name
    text = _explain(folder)
    assert "reads 128x128 weight blocks (its declared weight_block); the checkpoint's blocks are 64x128" in text


def test_contradictory_block_or_scale_declarations_name_the_key(tmp_path):
    folder = _with_quant(tmp_path, "qwen3-30b-a3b-fp8", {"quant_method": "fp8", "activation_scheme": "static",
                                                         "weight_block_size": [128, 128]})
    with pytest.raises(InputError, match=r"quantization_config\.activation_scheme.*contradicts weight_block_size"):
        load_model(str(folder))


# ---- 3. more than 1024 experts -------------------------------------------------------------------------
def test_more_than_1024_experts_are_served_with_external_routing(b12x_specs):
    layer = MoELayer(name="experts", num_experts=2048, top_k=8, hidden_size=4096, intermediate_size=1536,
                     weight_format="nvfp4", activation_format="nvfp4", activation_params={"limit": 7.0})
    d = select_backend(layer, SM120, KernelConfig(moe_backend="b12x"))
    assert (d.kernel, d.mode) == ("b12x.moe", "nvfp4"), [c.reason for c in d.candidates]


# ---- 4. fp16 MXFP8 and NVFP4 W4A4 linears -------------------------------------------------------------
def test_fp16_nvfp4_w4a4_linears_are_served(tmp_path):
    folder = _with_quant(tmp_path, "nvidia-qwen3-235b-a22b-nvfp4", None, torch_dtype="float16")
    linears = [(r, d) for r, d in _decisions(load_model(str(folder))) if r.layer.op == "linear"]
    assert linears and all(r.layer.dtype == "float16" for r, _ in linears)
    served = [(r, d) for r, d in linears if d.kernel == "b12x.linear.nvfp4"]
    assert served and all(d.mode == "nvfp4_w4a4" for _, d in served)


def test_fp16_mxfp8_linears_are_served_with_the_decode_prefill_note():
    from oracle.layer import LinearLayer

    for dtype in ("float16", "bfloat16"):
        layer = LinearLayer(name="proj", in_features=4096, out_features=4096, weight_format="mxfp8",
                            activation_format="mxfp8", dtype=dtype)
        d = select_backend(layer, SM120, KernelConfig())
        assert (d.kernel, d.mode) == ("b12x.linear.mxfp8", "mxfp8_w8a8"), d.candidates
        note = next(n for n in d.notes if n.startswith("b12x.linear.mxfp8 mxfp8_w8a8"))
        assert "<= 8 rows (decode) run BF16 activations" in note and "float16 input always runs MXFP8" in note
