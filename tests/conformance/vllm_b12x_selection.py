"""Ask vLLM 0.32's own selection which b12x kernel serves a layer (run inside the pinned vLLM venv).

Reads a JSON list of cases on stdin and writes {"vllm": version, "outcomes": {id: outcome}} on stdout,
where an outcome is {"outcome": "selected" | "refused" | "elsewhere", "kernel": name, "activation": key,
"reason": text}. Each case is an explicit backend request (--moe-backend / --linear-backend b12x or
flashinfer_b12x) answered by vLLM's own selection code:

  MoE     select_mxfp4_moe_backend / select_nvfp4_moe_backend (fused_moe/oracle/*.py) with the
          checkpoint's activation key and VLLM_B12X_MOE_FP4_FORCE_A16; block codecs through
          ModelOptBlockQuantMoEMethod (its constructor and maybe_roundup_sizes)
  linear  the kernel vLLM's init_*_linear_kernel would keep after --linear-backend filtering
          (FP8: the per-tensor or per-group list, chosen by the activation key's group shape;
          NVFP4: the W4A16 class for weight-only checkpoints), then its is_supported and
          can_implement; block codecs through ModelOptBlockQuantLinearMethod (constructor and
          create_weights on the meta device); "elsewhere" where vLLM's filter finds no kernel of
          the backend and falls back to automatic selection

An unstated FP8 activation scale ("activation_scale": null) is asked both ways (dynamic, then
static; block FP8's dynamic reading is per 1x128 group): it is served only where every reading
is, and a refusal names the first reading refused. The platform is faked to an SM120 CUDA
device and the b12x / FlashInfer availability probes answer for the case's provider setup
("b12x", "flashinfer", "both", "none"); everything else is vLLM's code as released.
Only the standard library, torch and vllm are imported here.
"""
from __future__ import annotations

import json
import os
import re
import sys
import types

FORCE_A16 = "VLLM_B12X_MOE_FP4_FORCE_A16"
CODECS = ("iq2_xs", "iq2_xxs", "q8_0")
PROVIDER = {"setup": "b12x"}        # the case being answered (read by the stubs below)


def _b12x_present() -> bool:
    return PROVIDER["setup"] != "none"


def _flashinfer_present() -> bool:
    return PROVIDER["setup"] in ("flashinfer", "both")


def _stub_module() -> object:
    return types.SimpleNamespace(is_supported=lambda *a, **k: True, BlockQuantLinearWeight=object)


def _fake_platform() -> None:
    from vllm.platforms import current_platform

    current_platform.is_cuda = lambda: True
    current_platform.is_cuda_alike = lambda: True
    current_platform.is_device_capability_family = lambda family, device_id=0: family == 120
    current_platform.has_device_capability = lambda capability, device_id=0: 120 >= (
        capability if isinstance(capability, int) else capability[0] * 10 + capability[1])
    current_platform.device_name = "NVIDIA RTX PRO 6000 (faked SM120)"


def _stub_probes(b12x_modules, flashinfer_modules) -> None:
    for module in b12x_modules:
        for name in dir(module):
            if name.startswith(("_import_b12x", "get_b12x")) and callable(getattr(module, name)):
                setattr(module, name, lambda *a, **k: _stub_module() if _b12x_present() else None)
    for module in flashinfer_modules:
        for name in ("has_flashinfer_b12x_moe", "has_flashinfer_b12x_gemm"):
            if hasattr(module, name):
                setattr(module, name, _flashinfer_present)


def _since(text: str) -> str:
    """vLLM's MoE oracles wrap the kernel's reason: '... configuration since <reason>.'"""
    found = re.search(r"does not support the deployment configuration since (.*)\.$", text, re.S)
    return found.group(1) if found else text


def main() -> int:
    cases = json.load(sys.stdin)
    import torch
    import vllm
    import vllm.model_executor.kernels.linear as linear_pkg
    import vllm.utils.b12x as b12x_utils
    from vllm.model_executor.kernels.linear.mxfp4 import b12x as mxfp4_mod
    from vllm.model_executor.kernels.linear.mxfp4.base import MxFp4LinearLayerConfig
    from vllm.model_executor.kernels.linear.mxfp8 import b12x as mxfp8_mod
    from vllm.model_executor.kernels.linear.mxfp8.Mxfp8LinearKernel import Mxfp8LinearLayerConfig
    from vllm.model_executor.kernels.linear.nvfp4 import b12x as nvfp4_mod
    from vllm.model_executor.kernels.linear.nvfp4 import flashinfer as nvfp4_fi
    from vllm.model_executor.kernels.linear.nvfp4.base import NvFp4LinearLayerConfig
    from vllm.model_executor.kernels.linear.scaled_mm import b12x as fp8_mod
    from vllm.model_executor.kernels.linear.scaled_mm.ScaledMMLinearKernel import FP8ScaledMMLinearLayerConfig
    from vllm.model_executor.layers.fused_moe import b12x as moe_mod
    from vllm.model_executor.layers.fused_moe.activation import MoEActivation
    from vllm.model_executor.layers.fused_moe.config import (FusedMoEConfig, FusedMoEParallelConfig,
                                                             RoutingMethodType)
    from vllm.model_executor.layers.fused_moe.experts import flashinfer_b12x_moe as fi_moe
    from vllm.model_executor.layers.fused_moe.oracle import mxfp4 as mxfp4_oracle
    from vllm.model_executor.layers.fused_moe.oracle import nvfp4 as nvfp4_oracle
    from vllm.model_executor.layers.quantization import modelopt_block_quant as block_mod
    from vllm.model_executor.layers.quantization.utils import quant_utils as qu

    # Faked only now: vLLM's modules run CUDA probes at import when the platform says CUDA.
    _fake_platform()
    _stub_probes((fp8_mod, mxfp8_mod, nvfp4_mod, mxfp4_mod, moe_mod, block_mod, b12x_utils), (fi_moe, nvfp4_fi))
    # what this driver does not ask about: the user's quantization_config.moe.activation override (it
    # needs a running vLLM config), and vLLM's tensor-parallel weight parameters (they need a process
    # group; create_weights only builds them after its checks)
    mxfp4_oracle._user_moe_activation_override = lambda: None
    for name in dir(block_mod):
        if name.endswith("Parameter") and name != "Parameter":
            setattr(block_mod, name, lambda data, **_: torch.nn.Parameter(data, requires_grad=False))
    requested_linear = {"backend": "b12x"}
    linear_pkg._get_linear_backend = lambda *, quantization: requested_linear["backend"]
    dtypes = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
    key_names = {id(qu.kMxfp8Dynamic): "mxfp8", id(qu.kNvfp4Dynamic): "nvfp4", id(qu.kMxfp4Dynamic): "mxfp4"}

    def key_name(key) -> str | None:
        return None if key is None else key_names.get(id(key), str(key))

    def fp8_key(static: bool, shape) -> object:
        group = {"tensor": qu.GroupShape.PER_TENSOR, "token": qu.GroupShape.PER_TOKEN,
                 "channel": qu.GroupShape.PER_CHANNEL}.get(shape, shape)
        if isinstance(group, (list, tuple)):
            group = qu.GroupShape(*group)
        return qu.QuantKey(qu.FP8_DTYPE, qu.ScaleDesc(torch.float32, static, group), symmetric=True)

    def selected(kernel: str, activation=None) -> dict:
        return {"outcome": "selected", "kernel": kernel, "activation": activation}

    def refused(reason: str) -> dict:
        return {"outcome": "refused", "reason": reason}

    # ---------------------------------------------------------------- linear
    def fp8(case: dict, scale: str) -> dict:
        n, k, dtype = case["N"], case["K"], dtypes[case["dtype"]]
        weight_key = {"fp8_tensor": fp8_key(True, "tensor"), "fp8_channel": fp8_key(True, "channel")}.get(
            case["kernel"]) or fp8_key(True, tuple(case["weight_block"]))
        if scale == "dynamic_group":
            act_key = fp8_key(False, (1, case["weight_block"][1] if case["weight_block"] else 128))
        else:
            act_key = fp8_key(*{"static_tensor": (True, "tensor"), "dynamic_tensor": (False, "tensor"),
                                "dynamic_token": (False, "token")}[scale])
        # init_fp8_linear_kernel: per-group activations use the block list, the rest the per-tensor list;
        # --linear-backend b12x keeps its one kernel of that list.
        cls = (fp8_mod.B12xFp8BlockScaledMMKernel if act_key.scale.group_shape.is_per_group()
               else fp8_mod.B12xTensorFP8ScaledMMLinearKernel)
        config = FP8ScaledMMLinearLayerConfig(weight_quant_key=weight_key, activation_quant_key=act_key,
                                              weight_shape=(n, k), input_dtype=dtype, out_dtype=dtype)
        return check(cls, config)

    def check(cls, config) -> dict:
        ok, reason = cls.is_supported()
        if ok:
            ok, reason = cls.can_implement(config)
        return selected(cls.__name__) if ok else refused(reason or "")

    def linear(case: dict) -> dict:
        kind, backend = case["kernel"], case["backend"]
        requested_linear["backend"] = backend
        if backend == "flashinfer_b12x":
            # vLLM's flashinfer_b12x linear backend has one kernel: NVFP4 W4A4 (not in the A16 list)
            if kind != "nvfp4" or case["declared"] != "nvfp4":
                return {"outcome": "elsewhere"}
            return check(nvfp4_fi.FlashInferB12xNvFp4LinearKernel, NvFp4LinearLayerConfig())
        if kind in CODECS:
            try:
                method = block_mod.ModelOptBlockQuantLinearMethod(kind)
                with torch.device("meta"):
                    method.create_weights(torch.nn.Module(), case["K"], [case["N"]], case["K"], case["N"],
                                          dtypes[case["dtype"]], weight_loader=lambda *a, **k: None)
            except ValueError as exc:
                return refused(str(exc))
            return selected("ModelOptBlockQuantLinearMethod")
        if kind in ("fp8_tensor", "fp8_channel", "fp8_block"):
            scale = case["activation_scale"]
            dynamic = "dynamic_group" if kind == "fp8_block" else "dynamic_tensor"
            readings = [scale] if scale else [dynamic, "static_tensor"]
            answers = [fp8(case, s) for s in readings]
            return next((a for a in answers if a["outcome"] != "selected"), answers[0])
        if kind == "mxfp8":
            return check(mxfp8_mod.B12xMxfp8LinearKernel, Mxfp8LinearLayerConfig(weight_shape=(case["N"], case["K"])))
        if kind == "nvfp4":
            cls = nvfp4_mod.B12xNvFp4LinearKernel if case["declared"] == "nvfp4" else nvfp4_mod.B12xNvFp4W4A16LinearKernel
            return check(cls, NvFp4LinearLayerConfig())
        if kind == "mxfp4":
            key = qu.kMxfp4Dynamic if case["declared"] == "mxfp4" else None
            return check(mxfp4_mod.B12xMxFp4LinearKernel, MxFp4LinearLayerConfig(activation_quant_key=key))
        raise ValueError(f"unknown linear kernel {kind!r}")

    # ---------------------------------------------------------------- MoE
    def moe_config(case: dict) -> FusedMoEConfig:
        ep, all2all = case["ep_size"], case["use_all2all"]
        parallel = FusedMoEParallelConfig(
            tp_size=case["tp_size"], tp_rank=0, pcp_size=1, pcp_rank=0, dp_size=2 if all2all else 1, dp_rank=0,
            ep_size=ep if not all2all else max(ep, 2), ep_rank=0, sp_size=1, use_ep=ep > 1 or all2all,
            all2all_backend="allgather_reducescatter", enable_eplb=case["eplb"])
        params, situ = case["activation_params"], case["activation"] == "situ"
        return FusedMoEConfig(
            num_experts=case["num_experts"], experts_per_token=case["top_k"], hidden_dim=case["hidden_size"],
            intermediate_size=case["intermediate_size"], num_local_experts=case["num_experts"] // ep,
            num_logical_experts=case["num_experts"], activation=MoEActivation(case["activation"]), device="cpu",
            routing_method=RoutingMethodType.Renormalize, moe_parallel_config=parallel,
            in_dtype=dtypes[case["dtype"]], has_bias=case["has_bias"], is_lora_enabled=case["lora"],
            moe_backend=case["backend"], swiglu_limit=params.get("limit"),
            swiglu_alpha=None if situ else params.get("alpha"), swiglu_beta=None if situ else params.get("beta"),
            activation_situ_beta=params.get("beta") if situ else None,
            activation_situ_linear_beta=params.get("linear_beta") if situ else None)

    def moe(case: dict) -> dict:
        config, weight = moe_config(case), case["weight"]
        if weight in CODECS:
            try:
                method = block_mod.ModelOptBlockQuantMoEMethod(config, codec=weight)
                method.maybe_roundup_sizes(case["hidden_size"], case["intermediate_size"] // case["tp_size"],
                                           dtypes[case["dtype"]], config.moe_parallel_config)
            except ValueError as exc:
                return refused(str(exc))
            return selected("B12X", None)
        declared = {"mxfp8": qu.kMxfp8Dynamic, "nvfp4": qu.kNvfp4Dynamic, None: None}[case["declared"]]
        try:
            if weight == "mxfp4":
                backend, _ = mxfp4_oracle.select_mxfp4_moe_backend(config, declared)
                return selected(backend.value, key_name(mxfp4_oracle._backend_activation_key(backend)))
            backend, _ = nvfp4_oracle.select_nvfp4_moe_backend(config, qu.kNvfp4Static, declared)
            a16 = nvfp4_oracle._use_a16(backend, False)       # the explicit path: FORCE_A16 drops the key
            return selected(backend.value, None if a16 else key_name(declared))
        except ValueError as exc:
            return refused(_since(str(exc)))

    outcomes = {}
    for case in cases:
        PROVIDER["setup"] = case.get("provider", "b12x")
        if case.get("force_a16"):
            os.environ[FORCE_A16] = "1"
        else:
            os.environ.pop(FORCE_A16, None)
        try:
            outcomes[case["id"]] = (moe if case["op"] == "moe" else linear)(case)
        except Exception as exc:  # a config vLLM itself refuses to build is a refusal, in its words
            outcomes[case["id"]] = refused(f"vLLM raised {type(exc).__name__}: {exc}")
    json.dump({"vllm": vllm.__version__, "outcomes": outcomes}, sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
