"""flashinfer_b12x.moe: NVFP4 experts through FlashInfer's CuTe-DSL fused MoE for SM12x
(`flashinfer.fused_moe.B12xMoEWrapper`), prepared the way vLLM's FlashInferB12xExperts prepares
them: gate/up halves swapped to up/gate (FlashInfer's w31 order) for gated experts, each expert's
global weight scale folded into its E4M3 block scales (so the kernel's alpha is 1), the block
scales 128x4-swizzled and converted to the MMA layout, and both GEMM inputs quantized to NVFP4
per 16-element block inside the kernel with global scale 1 (the checkpoint's input scales are
not used, as in vLLM). BF16 in and out; router weights applied inside the kernel.
"""
from __future__ import annotations

from functools import partial
from typing import Any

from oracle.errors import InputError
from oracle.kernel import Kernel
from oracle.warmup import WarmupUnit

from .common import capacity, check_tensor, per_expert, refuse_during_capture, swap_gate_up
from .flashinfer_common import flashinfer, swizzle_128x4

#: oracle activation -> FlashInfer's name (the two vLLM maps and kernels.yaml admits)
ACTIVATIONS = {"silu": "silu", "relu2_no_mul": "relu2"}


class FlashInferB12xMoE(Kernel):
    """Routed NVFP4 experts, tensor-parallel only, with FlashInfer's SM12x fused MoE."""

    def __init__(self, layer: Any, mode: Any, spec: Any):
        super().__init__(layer, mode, spec)
        self.e, self.h = layer.num_experts, layer.hidden_size
        self.i = layer.intermediate_size // layer.tp_size
        self.gated = layer.activation != "relu2_no_mul"
        self.owner = f"{spec.name} layer {layer.name!r}" if layer.name else spec.name
        self.tensors: dict[str, Any] | None = None
        self.wrapper: Any = None
        self.max_tokens = 0

    def process_weights(self, w13: Any = None, w2: Any = None, w13_scale: Any = None, w2_scale: Any = None,
                        w13_global_scale: Any = None, w2_global_scale: Any = None,
                        w13_input_scale: Any = None, w2_input_scale: Any = None,
                        w13_bias: Any = None, w2_bias: Any = None, w13_zero_point: Any = None,
                        w2_zero_point: Any = None) -> None:
        import torch

        refuse_during_capture(f"{self.owner}: process_weights")
        if w13_bias is not None or w2_bias is not None:
            raise InputError("FlashInfer's SM12x fused MoE takes no expert biases", source=self.owner,
                             field="w13_bias" if w13_bias is not None else "w2_bias")
        if w13_zero_point is not None or w2_zero_point is not None:
            raise InputError("NVFP4 experts have no zero point", source=self.owner, field="w13_zero_point")
        rows = 2 * self.i if self.gated else self.i
        fp4 = "packed E2M1 pairs, low nibble = even k"
        check_tensor(self.owner, "w13", w13, dtypes=[torch.uint8], shape=[self.e, rows, self.h // 2], what=fp4)
        check_tensor(self.owner, "w2", w2, dtypes=[torch.uint8], shape=[self.e, self.h, self.i // 2], what=fp4)
        scale = "one E4M3 scale per 16 values along K"
        check_tensor(self.owner, "w13_scale", w13_scale, dtypes=[torch.float8_e4m3fn],
                     shape=[self.e, rows, self.h // 16], what=scale)
        check_tensor(self.owner, "w2_scale", w2_scale, dtypes=[torch.float8_e4m3fn],
                     shape=[self.e, self.h, self.i // 16], what=scale)
        g13 = per_expert(self.owner, "w13_global_scale", w13_global_scale, self.e, "the fp32 weight global scale")
        g2 = per_expert(self.owner, "w2_global_scale", w2_global_scale, self.e, "the fp32 weight global scale")
        if not w13.is_cuda:
            raise InputError("FlashInfer's fused MoE runs on the GPU: expected a CUDA tensor", source=self.owner,
                             field="w13")
        device = w13.device
        if self.gated:                      # FlashInfer's gated layout is [up; gate] per expert
            w13, w13_scale = swap_gate_up(w13, self.i), swap_gate_up(w13_scale, self.i)
        mma = flashinfer("flashinfer.cute_dsl.utils").convert_sf_to_mma_layout
        ones = torch.ones(self.e, dtype=torch.float32, device=device)
        self.tensors = {
            "w1_weight": w13.contiguous(), "w2_weight": w2.contiguous(),
            "w1_weight_sf": _mma_scales(mma, w13_scale, g13.to(device)),
            "w2_weight_sf": _mma_scales(mma, w2_scale, g2.to(device)),
            "w1_alpha": ones, "w2_alpha": ones.clone(), "fc2_input_scale": ones.clone(),
        }
        self.wrapper = None

    def apply(self, hidden_states: Any, topk_weights: Any, topk_ids: Any) -> Any:
        import torch

        if self.tensors is None:
            raise RuntimeError(f"{self.owner}: call process_weights before apply")
        if not isinstance(hidden_states, torch.Tensor) or hidden_states.shape[-1] != self.h:
            raise InputError(f"expected hidden_states [M, {self.h}]", source=self.owner, field="hidden_states")
        ids = topk_ids if topk_ids.dtype == torch.int32 else topk_ids.to(torch.int32)
        return self._wrapper(hidden_states.shape[0]).run(
            x=hidden_states, token_selected_experts=ids, token_final_scales=topk_weights.float(), **self.tensors)

    def warmup_units(self, token_counts) -> list:
        """Build the wrapper for the largest count and run every count once before capture."""
        counts = sorted(set(token_counts))
        if counts:
            self.max_tokens = max(self.max_tokens, capacity(counts[-1]))
        key = (self.mode.name, self.e, self.layer.top_k, self.h, self.i, self.layer.activation)
        return [WarmupUnit(kernel=self.spec.name, signature=(*key, m), run=partial(self._warm, m)) for m in counts]

    def _wrapper(self, tokens: int) -> Any:
        """FlashInfer's wrapper pre-allocates for CUDA graphs: made (or grown) only outside capture."""
        if self.wrapper is None or tokens > self.max_tokens:
            refuse_during_capture(f"{self.owner}: preparing FlashInfer's fused MoE for {tokens} tokens")
            self.max_tokens = max(self.max_tokens, capacity(tokens))
            wrapper_type = flashinfer("flashinfer.fused_moe").B12xMoEWrapper
            self.wrapper = wrapper_type(
                num_experts=self.e, top_k=self.layer.top_k, hidden_size=self.h, intermediate_size=self.i,
                use_cuda_graph=True, max_num_tokens=self.max_tokens, num_local_experts=self.e,
                activation=ACTIVATIONS[self.layer.activation])
        return self.wrapper

    def _warm(self, m: int) -> None:
        import torch

        device = self.tensors["w1_weight"].device
        x = torch.zeros(m, self.h, dtype=torch.bfloat16, device=device)
        ids = torch.arange(m * self.layer.top_k, device=device, dtype=torch.int32).reshape(m, -1) % self.e
        self.apply(x, torch.full(ids.shape, 1.0 / self.layer.top_k, device=device), ids)


def _mma_scales(convert: Any, scales: Any, global_scale: Any) -> Any:
    """Fold each expert's global scale into its E4M3 block scales, swizzle, then FlashInfer's MMA view."""
    import torch

    folded = (scales.float() * global_scale.view(-1, 1, 1)).to(torch.float8_e4m3fn)
    swizzled = swizzle_128x4(folded)
    e, m, kg = swizzled.shape
    return convert(swizzled.reshape(e * m, kg), m=m, k=kg * 16, num_groups=e)
