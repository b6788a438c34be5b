"""Bad input to the torch kernels: one clear error naming the tensor, what was expected and what came,
before anything touches a GPU (so these run on the CPU); and the runtime check without CUDA."""
from __future__ import annotations

import pytest
from oracle_torch import runtime

import torch

from oracle import LinearLayer, Platform, select_backend
from oracle.errors import InputError
from oracle.errors import TensorError


H200 = Platform.preset("h200", packages={"torch": "2.11.0"})


def _kernel(fmt, k=256, n=256, **layer):
    act = "nvfp4" if fmt == "nvfp4" else None
    lin = LinearLayer(name="l", in_features=k, out_features=n, weight_format=fmt, activation_format=act, **layer)
    d = select_backend(lin, Platform.preset("b200", packages={"torch": "2.11.0"}))
    assert d.backend == "torch", d.candidates
    return d.instantiate(lin)


def _fp8(n, k):
    return torch.randn(n, k).to(torch.float8_e4m3fn)


def _raises(fragments, fn, **kw):
    with pytest.raises(TensorError) as info:
        fn(**kw)
    assert isinstance(info.value, InputError)
    for f in fragments:
        assert f in str(info.value), str(info.value)


def test_weight_dtype_and_shape_are_named():
    k = _kernel("fp8_tensor")
    _raises(["weight:", "dtype float8_e4m3fn", "got bfloat16"], k.process_weights,
            weight=torch.randn(256, 256, dtype=torch.bfloat16), weight_scale=torch.tensor(1.0))
    _raises(["weight:", "shape [256, 256]", "got [256, 128]"], k.process_weights,
            weight=_fp8(256, 128), weight_scale=torch.tensor(1.0))


def test_missing_and_wrong_scales_are_named():
    _raises(["weight_scale:", "a tensor"], _kernel("fp8_tensor").process_weights, weight=_fp8(256, 256))
    _raises(["weight_scale:", "shape [] or [1]", "got [256]"], _kernel("fp8_tensor").process_weights,
            weight=_fp8(256, 256), weight_scale=torch.ones(256))
    _raises(["weight_scale:", "shape [256] or [256, 1]", "got [128]"], _kernel("fp8_channel").process_weights,
            weight=_fp8(256, 256), weight_scale=torch.ones(128))
    _raises(["weight_scale:", "shape [2, 2]", "128x128 block", "got [2, 3]"], _kernel("fp8_block").process_weights,
            weight=_fp8(256, 256), weight_scale=torch.ones(2, 3))
    _raises(["weight_scale:", "dtype float32", "got float16"], _kernel("fp8_block").process_weights,
            weight=_fp8(256, 256), weight_scale=torch.ones(2, 2, dtype=torch.float16))


def test_non_finite_or_non_positive_scales_are_named_with_their_index():
    bad = torch.ones(256)
    bad[7] = float("nan")
    _raises(["weight_scale:", "finite, positive", "index [7]"], _kernel("fp8_channel").process_weights,
            weight=_fp8(256, 256), weight_scale=bad)
    _raises(["input_scale:", "finite, positive"], _kernel("fp8_tensor").process_weights,
            weight=_fp8(256, 256), weight_scale=torch.tensor(1.0), input_scale=torch.tensor(0.0))


def test_static_scales_where_the_format_is_dynamic_are_refused():
    _raises(["input_scale:", "per-token activation scales are dynamic"], _kernel("fp8_channel").process_weights,
            weight=_fp8(256, 256), weight_scale=torch.ones(256), input_scale=torch.tensor(1.0))


def test_bias_shape_is_named():
    _raises(["bias:", "shape [256]", "got [255]"], _kernel("fp8_tensor").process_weights,
            weight=_fp8(256, 256), weight_scale=torch.tensor(1.0), bias=torch.zeros(255))


def test_mx_and_nvfp4_scale_tensors_are_checked():
    _raises(["weight_scale:", "shape [256, 8]", "E8M0"], _kernel("mxfp8").process_weights,
            weight=_fp8(256, 256), weight_scale=torch.full((256, 4), 127, dtype=torch.uint8))
    _raises(["weight_scale:", "0xFF is NaN"], _kernel("mxfp8").process_weights,
            weight=_fp8(256, 256), weight_scale=torch.full((256, 8), 255, dtype=torch.uint8))
    _raises(["weight:", "dtype uint8"], _kernel("nvfp4").process_weights,
            weight=_fp8(256, 128), weight_scale=torch.ones(256, 16).to(torch.float8_e4m3fn),
            weight_global_scale=torch.tensor(1.0))
    _raises(["weight_global_scale:", "a tensor"], _kernel("nvfp4").process_weights,
            weight=torch.zeros(256, 128, dtype=torch.uint8), weight_scale=torch.ones(256, 16).to(torch.float8_e4m3fn))


def test_cpu_tensors_get_a_clear_error_not_a_crash():
    _raises(["weight:", "a CUDA tensor", "got cpu"], _kernel("fp8_tensor").process_weights,
            weight=_fp8(256, 256), weight_scale=torch.tensor(1.0))


def test_apply_before_process_weights_is_an_error():
    with pytest.raises(RuntimeError, match="call process_weights before apply"):
        _kernel("fp8_tensor").apply(torch.randn(2, 256))


def test_misaligned_layers_are_refused_by_the_kernel_itself():
    """If a caller bypasses selection, the kernel still refuses shapes the GEMM cannot take."""
    from oracle.catalog import Mode
    from oracle_torch.linear import TorchTensorFP8Linear

    layer = LinearLayer(name="l", in_features=200, out_features=256, weight_format="fp8_tensor")
    k = TorchTensorFP8Linear(layer, Mode(weight="fp8_tensor", activation="fp8", name="m"), None)
    _raises(["weight:", "K by 16", "K=200"], k.process_weights, weight=_fp8(256, 200), weight_scale=torch.tensor(1.0))


def test_runtime_check_without_cuda_says_why():
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    ok, detail = runtime.check(None, H200)
    assert ok is False and "no usable CUDA device" in detail
