"""The device-side requirement of FlashInfer's SM12x kernels (flashinfer_kernels.yaml `runtime`),
as their owners check it on a detected device: an SM120/SM121 device, the FlashInfer entry points
vLLM's `has_flashinfer_b12x_moe` / `has_flashinfer_b12x_gemm` look for, and the CUDA versions
FlashInfer's own checks require (fused MoE: CUDA 13; b12x NVFP4 GEMM: CUDA 12.9).
"""
from __future__ import annotations

import importlib.util
from typing import Any

from packaging.version import Version

from .errors import B12xUnavailableError
from .flashinfer_common import flashinfer

#: kernel name -> (module, any of these attributes, what it is, minimal CUDA)
_NEEDS = {
    "flashinfer_b12x.moe": ("flashinfer.fused_moe", ("b12x_fused_moe",), "the SM12x fused MoE", "13.0"),
    "flashinfer_b12x.linear.nvfp4": ("flashinfer.gemm", ("Sm120B12xBlockScaledDenseGemmKernel",
                                                         "Sm120BlockScaledDenseGemmKernel"), "the b12x FP4 GEMM", "12.9"),
}


def is_supported(spec: Any, platform: Any) -> tuple[bool, str | None]:
    module, names, what, min_cuda = _NEEDS[spec.name]
    try:
        import torch
    except ImportError:
        return False, "torch is not installed"
    if not torch.cuda.is_available():
        return False, "no CUDA device"
    major, minor = torch.cuda.get_device_capability()
    if (major, minor) not in ((12, 0), (12, 1)):
        return False, f"compute capability {major}.{minor} (FlashInfer's b12x kernels need SM120/SM121)"
    cuda = torch.version.cuda
    if cuda is None or Version(cuda) < Version(min_cuda):
        return False, f"{what} needs CUDA {min_cuda} or later; torch is built for CUDA {cuda}"
    if importlib.util.find_spec("flashinfer.cute_dsl") is None:
        return False, "flashinfer.cute_dsl is missing (FlashInfer's CuTe-DSL kernels are not installed)"
    try:
        found = flashinfer(module)
        if spec.name == "flashinfer_b12x.moe":
            flashinfer("flashinfer.cute_dsl.utils").convert_sf_to_mma_layout
    except (B12xUnavailableError, AttributeError) as exc:
        return False, str(exc)
    if not any(hasattr(found, name) for name in names):
        return False, f"{module} has no {' or '.join(names)} ({what}): flashinfer-python is too old or too new"
    return True, None
