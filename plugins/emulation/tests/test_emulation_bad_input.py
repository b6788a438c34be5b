"""Bad tensors get one clear error naming the tensor, what was expected and what came."""
from __future__ import annotations

import pytest
from emulation_helpers import moe_tensors, quantize

import torch

from oracle import EmbeddingLayer, InputError, LinearLayer, MoELayer, Platform, select_backend
from oracle.config import KernelConfig
from oracle.errors import TensorError


CPU = Platform.cpu()
#: the emulation kernels by name: on a CPU, int4/int8 layers otherwise get torch's CPU kernels (oracle-torch)
EMULATION = KernelConfig(linear_backend="emulation", moe_backend="emulation")


def _linear(fmt, k=256, n=64, act=None, **kw):
    layer = LinearLayer(in_features=k, out_features=n, weight_format=fmt, activation_format=act, **kw)
    return select_backend(layer, CPU, EMULATION).instantiate(layer)


def _moe(fmt="mxfp4", **kw):
    base = dict(num_experts=32, top_k=4, hidden_size=64, intermediate_size=96, weight_format=fmt)
    base.update(kw)
    layer = MoELayer(**base)
    return select_backend(layer, CPU).instantiate(layer)


def test_errors_are_input_errors():
    assert issubclass(TensorError, InputError) and issubclass(TensorError, ValueError)


def test_wrong_packed_shape_names_the_expected_one():
    kernel = _linear("mxfp4")
    q = quantize(torch.randn(64, 256), "mxfp4")
    with pytest.raises(TensorError, match=r"^weight: expected shape \[64, 128\] \(two E2M1 codes per byte along K\), "
                                          r"got \[64, 256\]$"):
        kernel.process_weights(weight=torch.zeros(64, 256, dtype=torch.uint8), weight_scale=q["weight_scale"])


def test_wrong_dtype():
    kernel = _linear("mxfp8")
    with pytest.raises(TensorError, match=r"^weight: expected dtype float8_e4m3fn \(MXFP8 elements are E4M3\), got float32$"):
        kernel.process_weights(weight=torch.zeros(64, 256), weight_scale=torch.zeros(64, 8, dtype=torch.uint8))


def test_moe_scale_that_does_not_match_the_block_size():
    kernel = _moe(hidden_size=2880, intermediate_size=2880, num_experts=32)
    w13 = torch.zeros(32, 5760, 1440, dtype=torch.uint8)
    w2 = torch.zeros(32, 2880, 1440, dtype=torch.uint8)
    with pytest.raises(TensorError, match=r"^w13_scale: expected shape \[32, 5760, 90\] \(one E8M0 per 32 along K\), "
                                          r"got \[32, 5760, 45\]$"):
        kernel.process_weights(w13=w13, w2=w2, w13_scale=torch.zeros(32, 5760, 45, dtype=torch.uint8),
                               w2_scale=torch.zeros(32, 2880, 90, dtype=torch.uint8))


def test_missing_scale():
    kernel = _linear("fp8_block")
    with pytest.raises(TensorError, match=r"^weight_scale: expected a tensor \(required for fp8_block weights\), got None$"):
        kernel.process_weights(weight=torch.zeros(64, 256, dtype=torch.float8_e4m3fn))


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_fp8_block_scale(bad):
    kernel = _linear("fp8_block")
    scale = torch.ones(1, 2)
    scale[0, 1] = bad
    with pytest.raises(TensorError, match=r"^weight_scale: expected finite scales, got (nan|inf|-inf) at index \[0, 1\]$"):
        kernel.process_weights(weight=torch.zeros(64, 256, dtype=torch.float8_e4m3fn), weight_scale=scale)


def test_e8m0_nan_byte_is_rejected():
    kernel = _linear("mxfp4")
    q = quantize(torch.randn(64, 256), "mxfp4")
    q["weight_scale"][3, 2] = 0xFF
    with pytest.raises(TensorError, match=r"^weight_scale: expected finite scales, got nan at index \[3, 2\]$"):
        kernel.process_weights(**q)


def test_nvfp4_infinite_global_scale_and_nan_block_scale():
    kernel = _linear("nvfp4")
    q = quantize(torch.randn(64, 256), "nvfp4")
    with pytest.raises(TensorError, match=r"^weight_global_scale: expected finite scales, got inf"):
        kernel.process_weights(weight=q["weight"], weight_scale=q["weight_scale"],
                               weight_global_scale=torch.tensor(float("inf")))
    scale = q["weight_scale"].clone()
    scale.view(torch.uint8)[0, 0] = 0x7F                              # the E4M3 NaN pattern
    with pytest.raises(TensorError, match=r"^weight_scale: expected finite scales, got nan at index \[0, 0\]$"):
        kernel.process_weights(weight=q["weight"], weight_scale=scale, weight_global_scale=q["weight_global_scale"])


def test_int4_scale_groups_must_tile_k():
    kernel = _linear("int4")
    q = quantize(torch.randn(64, 256), "int4", group_size=32)
    with pytest.raises(TensorError, match=r"^weight_scale: expected shape"):
        kernel.process_weights(weight=q["weight"], weight_scale=q["weight_scale"][:7])


def test_codec_block_bytes():
    kernel = _linear("iq2_xs")
    with pytest.raises(TensorError, match=r"^weight: expected shape \[64, 1, 74\] \(GGML blocks of 256 weights in 74 bytes\), "
                                          r"got \[64, 1, 66\]$"):
        kernel.process_weights(weight=torch.zeros(64, 1, 66, dtype=torch.uint8))


def test_out_of_range_expert_ids():
    kernel = _moe(num_experts=8, top_k=2, hidden_size=64, intermediate_size=32, weight_format="mxfp8")
    q13, q2 = quantize(torch.randn(8, 64, 64), "mxfp8"), quantize(torch.randn(8, 64, 32), "mxfp8")
    kernel.process_weights(**moe_tensors(q13, q2))
    x, weights = torch.randn(3, 64, dtype=torch.bfloat16), torch.full((3, 2), 0.5)
    ids = torch.tensor([[0, 1], [2, 8], [3, 4]])
    with pytest.raises(TensorError, match=r"^topk_ids: expected expert ids in \[0, 8\), got 8 at index \[1, 1\]$"):
        kernel.apply(x, weights, ids)
    with pytest.raises(TensorError, match=r"^topk_ids: expected expert ids in \[0, 8\), got -1"):
        kernel.apply(x, weights, torch.tensor([[0, 1], [2, -1], [3, 4]]))
    with pytest.raises(TensorError, match=r"^topk_ids: expected dtype int32 or int64 \(integer expert ids\), got float32$"):
        kernel.apply(x, weights, ids.float())
    with pytest.raises(TensorError, match=r"^topk_weights: expected shape \[3, 2\] \(tokens x top_k\), got \[3, 1\]$"):
        kernel.apply(x, weights[:, :1], ids)
    with pytest.raises(TensorError, match=r"^hidden_states: expected last dimension 64, got shape \[3, 32\]$"):
        kernel.apply(torch.randn(3, 32), weights, ids)


def test_wrong_activation_width_and_unprocessed_kernel():
    kernel = _linear("fp8_tensor")
    with pytest.raises(RuntimeError, match="call process_weights before apply"):
        kernel.apply(torch.randn(2, 256))
    q = quantize(torch.randn(64, 256), "fp8_tensor")
    kernel.process_weights(**q)
    with pytest.raises(TensorError, match=r"^x: expected last dimension 256, got shape \[2, 255\]$"):
        kernel.apply(torch.randn(2, 255))
    with pytest.raises(TensorError, match=r"^x: expected dtype bfloat16 or float16 or float32"):
        kernel.apply(torch.zeros(2, 256, dtype=torch.int64))


def test_bias_shape():
    kernel = _linear("fp8_channel")
    q = quantize(torch.randn(64, 256), "fp8_channel")
    with pytest.raises(TensorError, match=r"^bias: expected shape \[64\] \(one bias per output feature\), got \[63\]$"):
        kernel.process_weights(**q, bias=torch.zeros(63))


def test_bad_static_activation_scale():
    kernel = _linear("fp8_tensor", act="fp8")
    q = quantize(torch.randn(64, 256), "fp8_tensor")
    with pytest.raises(TensorError, match=r"^input_scale: expected positive scales"):
        kernel.process_weights(**q, input_scale=torch.tensor(0.0))
    with pytest.raises(TensorError, match=r"^input_scale: expected shape \[\] or \[1\]"):
        kernel.process_weights(**q, input_scale=torch.ones(3))


def test_embedding_ids_out_of_range():
    layer = EmbeddingLayer(num_embeddings=10, embedding_dim=32, weight_format="q8_0")
    kernel = select_backend(layer, CPU).instantiate(layer)
    kernel.process_weights(**quantize(torch.randn(10, 32), "q8_0"))
    with pytest.raises(TensorError, match=r"^ids: expected ids in \[0, 10\), got 10"):
        kernel.apply(torch.tensor([1, 10]))


def test_unknown_activation_parameter():
    # refused by the layer itself now (one home for each activation's parameter names), before any kernel
    with pytest.raises(ValueError, match=r"activation_params \['limit'\] do not apply to activation 'situ'; "
                                         r"it takes beta, linear_beta"):
        MoELayer(num_experts=32, top_k=4, hidden_size=64, intermediate_size=32, weight_format="mxfp8",
                 activation="situ", activation_params={"limit": 7.0})


@pytest.mark.parametrize("activation, params, field", [
    ("situ", {"beta": 0.0}, "activation_params.beta"),
    ("swigluoai", {"limit": float("nan")}, "activation_params.limit"),
    ("silu", {"limit": -1.0}, "activation_params.limit"),
])
def test_bad_activation_parameter_values(activation, params, field):
    with pytest.raises(ValueError, match=rf"{field} must be a finite number > 0"):  # refused by the layer now
        MoELayer(num_experts=32, top_k=4, hidden_size=64, intermediate_size=32, weight_format="mxfp8",
                 activation=activation, activation_params=params)
    # the kernel still checks for itself (a layer built without validation, e.g. model_construct)
    good = MoELayer(num_experts=32, top_k=4, hidden_size=64, intermediate_size=32, weight_format="mxfp8",
                    activation=activation)
    layer = MoELayer.model_construct(**{**{k: getattr(good, k) for k in MoELayer.model_fields},
                                        "activation_params": params})
    kernel = select_backend(good, CPU).instantiate(layer)
    q13, q2 = quantize(torch.randn(32, 64, 64), "mxfp8"), quantize(torch.randn(32, 64, 32), "mxfp8")
    with pytest.raises(TensorError, match=rf"^{field}: expected a (finite|positive) number"):
        kernel.process_weights(**moe_tensors(q13, q2))
