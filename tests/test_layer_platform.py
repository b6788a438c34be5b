"""Layers, formats and platforms: the vocabulary, validation, presets, detection."""
from __future__ import annotations

import pytest
from pydantic import ValidationError

from oracle import EmbeddingLayer, LinearLayer, MoELayer, Platform
from oracle.errors import InputError
from oracle.formats import ACTIVATION_FORMATS, FORMAT_FACTS, MOE_ACTIVATIONS, OPS, WEIGHT_FORMATS
from oracle.platform import memory_bandwidth_gbps


def test_vocabulary_is_exactly_the_issue_strings():
    assert set(WEIGHT_FORMATS) == {"bf16", "fp16", "fp32", "fp8_tensor", "fp8_channel", "fp8_block", "mxfp8",
                                   "nvfp4", "mxfp4", "int4", "int8", "q8_0", "iq2_xs", "iq2_xxs"}
    # int8: compressed-tensors' INT8 / W8A8 / W8A16 and W4A8 schemes (issue #27)
    assert set(ACTIVATION_FORMATS) == {"bf16", "fp16", "fp8", "int8", "mxfp8", "nvfp4", "mxfp4"}
    assert set(OPS) == {"linear", "moe", "embedding"}
    assert set(MOE_ACTIVATIONS) == {"silu", "situ", "swigluoai", "swigluoai_uninterleave", "relu2",
                                    "relu2_no_mul", "gelu"}
    assert set(FORMAT_FACTS) == set(WEIGHT_FORMATS)


def test_format_facts_match_spec_table():
    assert FORMAT_FACTS["nvfp4"].block == (1, 16) and FORMAT_FACTS["mxfp4"].block == (1, 32)
    assert FORMAT_FACTS["fp8_block"].block == (128, 128)
    assert (FORMAT_FACTS["q8_0"].block, FORMAT_FACTS["q8_0"].block_bytes) == ((1, 32), 34)
    assert FORMAT_FACTS["iq2_xs"].block_bytes == 74 and FORMAT_FACTS["iq2_xxs"].block_bytes == 66


def test_layers_are_frozen_hashable_and_signature_ignores_name():
    a = MoELayer(name="a", num_experts=8, top_k=2, hidden_size=64, intermediate_size=64, weight_format="mxfp4",
                 activation_params={"limit": 7.0})
    b = a.model_copy(update={"name": "b"})
    assert a.signature == b.signature and hash(a) != hash(b) and len({a, b}) == 2
    with pytest.raises(ValidationError):
        a.top_k = 3  # type: ignore[misc]


def test_per_rank_fields():
    layer = MoELayer(name="e", num_experts=128, top_k=8, hidden_size=4096, intermediate_size=1536,
                     weight_format="nvfp4", tp_size=4, ep_size=2)
    f = layer.rule_fields()
    assert (f["intermediate_size_per_rank"], f["experts_per_rank"], f["expert_parallel"]) == (384, 64, True)
    lin = LinearLayer(name="q", in_features=7168, out_features=1536, weight_format="fp8_block")
    assert (lin.rule_fields()["K"], lin.rule_fields()["N"]) == (7168, 1536)


@pytest.mark.parametrize("kwargs, message", [
    (dict(num_experts=-8), "num_experts"),
    (dict(top_k=9), "top_k (9) must not exceed num_experts (8)"),
    (dict(weight_format="nvfp5"), "weight_format"),
    (dict(activation="swish"), "activation"),
    (dict(intermediate_size=100, tp_size=3), "not divisible by tp_size"),
    (dict(dtype="float8"), "dtype"),
    (dict(colour="red"), "colour"),
])
def test_impossible_layers_are_rejected_clearly(kwargs, message):
    base = dict(name="e", num_experts=8, top_k=2, hidden_size=64, intermediate_size=64, weight_format="mxfp4")
    base.update(kwargs)
    with pytest.raises(ValidationError) as err:
        MoELayer(**base)
    assert message in str(err.value)


def test_embedding_and_linear_validation():
    with pytest.raises(ValidationError, match="in_features"):
        LinearLayer(name="x", in_features=0, out_features=8, weight_format="fp8_block")
    assert EmbeddingLayer(name="e", num_embeddings=10, embedding_dim=4, weight_format="q8_0").activation_format is None


@pytest.mark.parametrize("name, cap", [("rtx-pro-6000", (12, 0)), ("RTX_5090", (12, 0)), ("dgx-spark", (12, 1)),
                                       ("b200", (10, 0)), ("h200", (9, 0)), ("h100", (9, 0)), ("l40s", (8, 9)),
                                       ("a100", (8, 0)), ("sm120", (12, 0)), ("sm_121", (12, 1)), ("sm90", (9, 0)),
                                       ("sm100", (10, 0))])
def test_presets(name, cap):
    p = Platform.preset(name)
    assert p.capability == cap and p.vendor == "nvidia" and p.simulated


def test_cpu_preset_and_unknown_device():
    assert Platform.preset("cpu").capability is None
    with pytest.raises(InputError, match="unknown device 'rtx-9999'; expected one of"):
        Platform.preset("rtx-9999")


@pytest.mark.parametrize("device, gbps", [
    # NVIDIA's datasheets: H200 4.8 TB/s HBM3e, H100 SXM 3.35 TB/s, A100 80GB SXM 2,039 GB/s,
    # RTX PRO 6000 Blackwell 1,792 GB/s GDDR7; no figure for a device the presets do not know
    (Platform.preset("h200"), 4800.0),
    (Platform(vendor="nvidia", device_name="NVIDIA H100 80GB HBM3"), 3350.0),
    (Platform(vendor="nvidia", device_name="NVIDIA A100-SXM4-80GB"), 2039.0),
    (Platform(vendor="nvidia", device_name="NVIDIA RTX PRO 6000 Blackwell Workstation Edition"), 1792.0),
    (Platform(vendor="nvidia", device_name="NVIDIA GB200"), 8000.0),      # not B200's word match: GB200's own
    (Platform(vendor="nvidia", device_name="NVIDIA GeForce RTX 4090"), None),
    (Platform.preset("sm120"), None),
])
def test_memory_bandwidth_comes_from_the_device_presets(device, gbps):
    assert memory_bandwidth_gbps(device) == gbps


def test_packages_from_environment_or_stated():
    p = Platform.preset("h200")
    assert p.package_version("pydantic") is not None
    assert p.package_version("surely-not-installed-pkg") is None
    q = p.with_packages({"b12x": "1.5.1", "pydantic": None})
    assert q.package_version("b12x") == "1.5.1" and q.package_version("pydantic") is None
    only = p.with_packages({"b12x": "1.5.1"}, only=True)
    assert only.package_version("pydantic") is None
    assert p != q and hash(p) != hash(q)


def test_detect_without_device_nodes_skips_torch(monkeypatch):
    import oracle.platform as plat
    plat._detect.cache_clear()
    monkeypatch.setattr(plat.os.path, "exists", lambda p: False)
    monkeypatch.setattr(plat.sys, "platform", "linux")
    monkeypatch.setattr(plat.importlib.util, "find_spec", lambda name: pytest.fail("torch was looked up"))
    assert Platform.detect() == Platform.cpu()
    plat._detect.cache_clear()


def test_detect_never_fails(monkeypatch):
    import oracle.platform as plat
    plat._detect.cache_clear()
    monkeypatch.setattr(plat, "_no_gpu_possible", lambda: False)
    monkeypatch.setattr(plat.importlib.util, "find_spec", lambda name: (_ for _ in ()).throw(RuntimeError("x")))
    monkeypatch.setattr(plat.shutil, "which", lambda name: None)
    assert Platform.detect() == Platform.cpu()
    plat._detect.cache_clear()


def test_detect_reads_nvidia_smi(monkeypatch):
    import oracle.platform as plat
    plat._detect.cache_clear()

    class Done:
        stdout = "NVIDIA RTX PRO 6000 Blackwell Server Edition, 12.0\n"
    monkeypatch.setattr(plat, "_no_gpu_possible", lambda: False)
    monkeypatch.setattr(plat.importlib.util, "find_spec", lambda name: None)
    monkeypatch.setattr(plat.shutil, "which", lambda name: "/usr/bin/nvidia-smi")
    monkeypatch.setattr(plat.subprocess, "run", lambda *a, **k: Done())
    p = Platform.detect()
    assert (p.vendor, p.capability, p.simulated) == ("nvidia", (12, 0), False)
    plat._detect.cache_clear()


def test_copies_recompute_cached_keys():
    a = MoELayer(name="a", num_experts=8, top_k=2, hidden_size=64, intermediate_size=64, weight_format="mxfp4")
    _ = a.signature
    b = a.model_copy(update={"top_k": 4})
    assert b.signature != a.signature and b.top_k == 4
    with pytest.raises(ValidationError):
        a.model_copy(update={"top_k": 40})
    p = Platform.preset("h200")
    _ = hash(p)
    assert hash(p.with_packages({"b12x": "1.5.1"})) != hash(p)
