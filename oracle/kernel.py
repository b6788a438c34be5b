"""The base class of kernel implementations, and the tensor names they exchange.

The engine never imports an implementation until `Decision.instantiate(layer)`; the class
named by a kernel's `implementation` is then built as `Impl(layer, mode, spec)`.

Lifecycle, as in an inference engine:
  1. `process_weights(**tensors)` once after loading: pack, swizzle, plan; may keep
     references, must not keep the caller's tensors alive longer than it needs them.
  2. `warmup_units(token_counts)` before CUDA-graph capture: one unit per distinct
     compiled signature (`oracle.warmup` de-duplicates across layers).
  3. `apply(...)` per forward pass; no planning or allocation during graph capture.

Checkpoint tensor names (every plugin uses these, so layers can switch kernels):

  linear  process_weights(weight, weight_scale=None, weight_global_scale=None,
                          input_scale=None, input_global_scale=None,
                          weight_zero_point=None, bias=None)
          apply(x [M, K] or [..., K]) -> [..., N] in layer.dtype
     fp8_tensor  weight e4m3 [N, K]; weight_scale fp32 []; input_scale fp32 [] (static) or None (dynamic)
     fp8_channel weight e4m3 [N, K]; weight_scale fp32 [N]; activations per token, dynamic
     fp8_block   weight e4m3 [N, K]; weight_scale fp32 [ceil(N/128), ceil(K/128)]; activations 1x128 dynamic
     mxfp8       weight e4m3 [N, K]; weight_scale uint8 E8M0 [N, K/32]
     nvfp4       weight uint8 [N, K/2] (E2M1, low nibble = even k); weight_scale e4m3 [N, K/16];
                 weight_global_scale fp32 [] (dequant = e2m1 * scale * global, ModelOpt weight_scale_2);
                 input_global_scale fp32 [] (ModelOpt input_scale, W4A4 only)
     mxfp4       weight uint8 [N, K/2]; weight_scale uint8 E8M0 [N, K/32]
     int4        weight int32 [K/8, N] (GPTQ qweight, 8 nibbles per int32, low nibble first);
                 weight_scale fp16 [K/group, N]; weight_zero_point int32 [K/group, N/8] or None (symmetric, zero 8)
     int8        weight int8 [N, K] (symmetric); weight_scale fp32 [N, K/group] ([N, 1]: per output channel)
     q8_0, iq2_xs, iq2_xxs  weight uint8 [N, K/block, block_bytes] (GGML block bytes)
  moe     process_weights(w13, w2, w13_scale=None, w2_scale=None, w13_global_scale=None,
                          w2_global_scale=None, w13_input_scale=None, w2_input_scale=None,
                          w13_bias=None, w2_bias=None, w13_zero_point=None, w2_zero_point=None)
          w13 [E, 2I, H]: gate rows first, then up; for swigluoai (gpt-oss) gate and up rows
          interleave (row 2j gate, 2j+1 up); I rows for non-gated activations. w2 [E, H, I].
          Each expert's tensors are the linear table's with a leading E: packed formats pack
          along K (nvfp4/mxfp4 [E, N, K/2]; int4 [E, K/8, N], scales [E, K/g, N], zero points
          [E, K/g, N/8] or None), scales and zero points with a leading E dim
  Checkpoint dialects (compressed-tensors, transformers FP8, gpt-oss, ModelOpt, GPTQ/AWQ) map to
  these names through oracle.checkpoints (the layout table: oracle/checkpoints/layouts.py)
          apply(hidden_states [M, H], topk_weights fp32 [M, k], topk_ids int [M, k]) -> [M, H]
  embedding  process_weights(weight) ; apply(ids int [...]) -> [..., D]
"""
from __future__ import annotations

from typing import Any, Sequence


class Kernel:
    """Base for kernel implementations; subclasses override the three lifecycle methods."""

    #: True when `apply` may synchronize with the host in eager calls (e.g. to name a bad expert id)
    #: but skips every synchronization while a CUDA graph is being captured; `oracle tune` then
    #: captures it directly instead of timing it eagerly because an eager call synchronized.
    capture_safe: bool = False
    #: False when the engine vouches for the inputs (expert ids from the model's own router top-k):
    #: `apply` then skips checks that read device values back to the host, a synchronisation per
    #: call that stalls eager decoding (oracle.hf clears it on the kernels it installs).
    check_inputs: bool = True

    def __init__(self, layer: Any, mode: Any, spec: Any):
        self.layer = layer
        self.mode = mode
        self.spec = spec

    def process_weights(self, **tensors: Any) -> None:
        raise NotImplementedError(f"{type(self).__name__}.process_weights")

    def apply(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__}.apply")

    def warmup_units(self, token_counts: Sequence[int]) -> list:
        """Work to run before graph capture; see oracle.warmup.WarmupUnit. Default: none."""
        return []

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.spec.name} mode={self.mode.name} layer={self.layer.name!r}>"
