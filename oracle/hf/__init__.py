"""oracle.hf: quantized checkpoints -> transformers models whose quantized modules run oracle kernels.

The optional extra `kernel-oracle[hf]` (transformers, safetensors); transformers and torch are
imported only inside this package's functions, when they run, after requirements.require_transformers.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any


def load_quantized(path: str | Path, *, device: str | None = None, dtype: Any = None, platform: Any = None,
                   config: Any = None, policy: Any = None, env: Any = None, progress: bool | None = None,
                   requantize_fused: bool = False, source: Any = None) -> Any:
    """The transformers model of checkpoint `path`, its quantized modules served by oracle kernels.

    path:     a checkpoint directory (config.json + *.safetensors, any index), in the tensor names its
              writer used (Mixtral's block_sparse_moe.experts.<e>.w1, per-expert or fused experts).
    device:   where the model runs: "cpu", "cuda", "cuda:1" (default: cuda when torch sees one, else cpu).
              Asking for CUDA on a torch without it raises InputError, not an assertion.
    dtype:    the dtype of everything that is not quantized and of activations: "bfloat16", "float16",
              "float32" or a torch dtype (default: the config's torch_dtype/dtype, else bfloat16).
    platform: the GPU the kernels are chosen for (oracle.platform.Platform; default Platform.detect(),
              this machine). A simulated GPU chooses kernels that may not run here.
    config:   oracle.config.KernelConfig: backend choices per op (`oracle run --linear-backend ...`).
    policy:   an oracle.policy.Policy (oracle.session.load_policy(["my.yaml"]) merges files over the
              defaults; `oracle run --policy FILE`).
    env:      environment switches for the decision (default os.environ).
    progress: a progress bar on stderr (default: when loading takes more than a few layers and stderr
              is a terminal).
    requantize_fused: fused parts (q/k/v, gate/up) whose per-tensor scales differ (FP8 per tensor,
              NVFP4 global scales) run as one kernel per part by default, each with its writer's scale:
              exact. True fuses them into one GEMM by requantizing to the largest scale (vLLM's way:
              faster, up to half an E4M3 step of error per weight).
    source:   an oracle.checkpoints.TensorSource replacing the directory's safetensors (same names and
              layouts; bench/synthetic.py makes random tensors on the GPU on demand).

    Raises InputError (bad checkpoint: names file, tensor and expectation; nothing half-loaded is
    returned) and NoKernelError (some quantized layer has no kernel on `platform`). The returned model
    carries `model.oracle` (LoadReport: decisions, kernels, load time); `save_pretrained` is refused
    (its kernels' packed tensors are not a checkpoint: save the original directory instead).
    """
    from .requirements import require_transformers
    require_transformers()
    from .loader import load_quantized as _load
    return _load(path, device=device, dtype=dtype, platform=platform, config=config, policy=policy, env=env,
                 progress=progress, requantize_fused=requantize_fused, source=source)


def check_checkpoint(path: str | Path, *, platform: Any = None, config: Any = None, policy: Any = None,
                     env: Any = None, requantize_fused: bool = False) -> Any:
    """Every check `load_quantized` makes, without kernels or weights in memory (oracle.hf.loader)."""
    from .requirements import require_transformers
    require_transformers()
    from .loader import check_checkpoint as _check
    return _check(path, platform=platform, config=config, policy=policy, env=env, requantize_fused=requantize_fused)


def load_reference(path: str | Path, *, dtype: Any = None) -> Any:
    """The checkpoint dequantized by its dialect's own library into a plain transformers model (oracle.hf.reference)."""
    from .requirements import require_transformers
    require_transformers()
    from .reference import load_reference as _ref
    return _ref(path, dtype=dtype)


__all__ = ["check_checkpoint", "load_quantized", "load_reference"]
