"""FlashInfer's own SM12x kernels (backend flashinfer_b12x): declarations, policy order, and the
CPU-testable parts of their classes (the 128x4 scale layout against the cuBLAS formula, input checks).
Their numerics need an SM120/SM121 GPU with CUDA 13 (not run here; see plugins/b12x/README.md)."""
from __future__ import annotations

import pytest
import torch

from oracle import KernelConfig, LinearLayer, MoELayer, Platform, select_backend
from oracle.errors import InputError
from oracle_b12x.flashinfer_common import swizzle_128x4
from oracle_b12x.flashinfer_linear import FlashInferB12xNVFP4Linear
from oracle_b12x.flashinfer_moe import FlashInferB12xMoE

WITH_FLASHINFER = Platform.preset("rtx-pro-6000").with_packages(
    {"b12x": "1.5.1", "triton": "3.7.1", "flashinfer-python": "0.7.2"})
WITHOUT_FLASHINFER = WITH_FLASHINFER.with_packages({"flashinfer-python": None})
NVFP4_LINEAR = LinearLayer(name="model.layers.0.mlp.down_proj", in_features=4096, out_features=4096,
                           weight_format="nvfp4", activation_format="nvfp4")


def _moe(**fields):
    base = dict(name="model.layers.0.mlp.experts", num_experts=8, top_k=2, hidden_size=256, intermediate_size=128,
                weight_format="nvfp4", activation="silu", activation_format="nvfp4")
    return MoELayer(**{**base, **fields})


def test_nvfp4_linear_prefers_flashinfer_b12x_before_native_b12x_as_vllm_lists_them():
    d = select_backend(NVFP4_LINEAR, WITH_FLASHINFER, env={})
    assert (d.kernel, d.mode) == ("flashinfer_b12x.linear.nvfp4", "nvfp4_w4a4")
    d = select_backend(NVFP4_LINEAR, WITHOUT_FLASHINFER, env={})
    assert d.kernel == "b12x.linear.nvfp4"
    refused = next(c for c in d.candidates if c.backend == "flashinfer_b12x")
    assert refused.stage == "platform" and "flashinfer-python is not installed" in refused.reason


def test_weight_only_nvfp4_linear_is_not_flashinfer_b12x():
    layer = NVFP4_LINEAR.model_copy(update={"activation_format": None})
    d = select_backend(layer, WITH_FLASHINFER, env={})
    assert (d.kernel, d.mode) == ("b12x.linear.nvfp4", "nvfp4_w4a16")


def test_flashinfer_b12x_moe_is_opt_in_and_serves_both_checkpoint_kinds():
    d = select_backend(_moe(), WITH_FLASHINFER, KernelConfig(moe_backend="b12x"), env={})
    assert d.kernel == "b12x.moe"
    for declared, mode in (("nvfp4", "w4a4"), (None, "w4a4_dynamic")):
        d = select_backend(_moe(activation_format=declared), WITH_FLASHINFER,
                           KernelConfig(moe_backend="flashinfer_b12x"), env={})
        assert (d.status, d.kernel, d.mode) == ("selected", "flashinfer_b12x.moe", mode)


@pytest.mark.parametrize("fields, words", [
    ({"activation_params": {"limit": 7.0}}, "does not apply the SwiGLU clamp"),
    ({"activation": "situ", "activation_params": {"beta": 4.0, "linear_beta": 25.0}}, "got situ"),
    ({"ep_size": 2}, "expert parallelism"),
    ({"has_bias": True}, "no expert biases"),
    ({"dtype": "float16"}, "bfloat16 only"),
    ({"apply_router_weight_on_input": True}, "apply_router_weight_on_input"),
])
def test_flashinfer_b12x_moe_refusals_name_their_owner_check(fields, words):
    d = select_backend(_moe(**fields), WITH_FLASHINFER, KernelConfig(moe_backend="flashinfer_b12x"), env={})
    assert d.status == "no_kernel" and words in d.candidates[0].reason, d.candidates[0].reason
    assert "flashinfer_kernels.yaml" in d.candidates[0].rule


@pytest.mark.parametrize("m, kg", [(128, 4), (200, 10), (3, 1)])
def test_128x4_scale_layout_matches_the_cublas_formula(m, kg):
    scales = torch.arange(m * kg, dtype=torch.int32).reshape(m, kg)
    out = swizzle_128x4(scales).reshape(-1)
    kp = -(-kg // 4) * 4
    for row in range(m):
        for group in range(kg):
            offset = ((row // 128) * (kp // 4) + group // 4) * 512 + (row % 32) * 16 + ((row % 128) // 32) * 4 \
                + group % 4
            assert out[offset] == scales[row, group]
    assert out.numel() == (-(-m // 128) * 128) * kp and int((out != 0).sum()) == m * kg - 1


def test_linear_input_checks_name_the_tensor():
    from b12x_test_helpers import load_kernel_specs

    spec = load_kernel_specs("flashinfer_kernels.yaml")["flashinfer_b12x.linear.nvfp4"]
    kernel = FlashInferB12xNVFP4Linear(NVFP4_LINEAR, spec.modes[0], spec)
    ok = dict(weight=torch.zeros(4096, 2048, dtype=torch.uint8),
              weight_scale=torch.zeros(4096, 256, dtype=torch.float8_e4m3fn), weight_global_scale=torch.tensor(1.0))
    with pytest.raises(InputError, match="input_global_scale.*needed for W4A4"):
        kernel.process_weights(**ok)
    with pytest.raises(InputError, match="expected a CUDA tensor"):
        kernel.process_weights(**ok, input_global_scale=torch.tensor(0.5))
    with pytest.raises(InputError, match=r"weight_scale.*expected shape \[4096, 256\]"):
        kernel.process_weights(**{**ok, "weight_scale": torch.zeros(4096, 128, dtype=torch.float8_e4m3fn)})


def test_moe_input_checks_name_the_tensor():
    from b12x_test_helpers import load_kernel_specs

    spec = load_kernel_specs("flashinfer_kernels.yaml")["flashinfer_b12x.moe"]
    kernel = FlashInferB12xMoE(_moe(), spec.modes[0], spec)
    with pytest.raises(InputError, match="no expert biases"):
        kernel.process_weights(w13_bias=torch.zeros(8, 256))
    with pytest.raises(InputError, match=r"w13.*expected shape \[8, 256, 128\]"):
        kernel.process_weights(w13=torch.zeros(8, 128, 128, dtype=torch.uint8))
