"""A reference model to check oracle.hf's accuracy against: the checkpoint dequantized by its own library.

    ref = oracle.hf.load_reference("path/to/checkpoint")          # plain BF16 nn.Linear modules
    fast = oracle.hf.load_quantized("path/to/checkpoint", device="cpu")
    (fast(ids).logits - ref(ids).logits).norm() / ref(ids).logits.norm()

Nothing of oracle's adapters is used: transformers loads the checkpoint with the dialect's own
dequantization (compressed-tensors' decompressors via `CompressedTensorsConfig(run_compressed=False)`,
transformers' fine-grained FP8 and MXFP4 integrations with `dequantize=True`) and converts the names
as it does for every checkpoint. The weights are dequantized; activations are not quantized, so for
W8A8/W4A4 schemes the difference also contains the activation rounding the kernels apply.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..errors import InputError

#: the dialects whose library dequantizes on CPU through transformers
SUPPORTED = ("compressed-tensors", "fp8", "mxfp4")


def load_reference(path: str | Path, *, dtype: Any = None) -> Any:
    """The transformers model of `path` with every quantized weight dequantized by the dialect's library."""
    import torch
    from transformers import AutoModelForCausalLM

    root = Path(path)
    config = root / "config.json"
    if not config.is_file():
        raise InputError("expected a checkpoint directory with config.json", source=str(root))
    try:
        qc = json.loads(config.read_text()).get("quantization_config") or {}
    except ValueError as exc:
        raise InputError(f"not JSON ({exc})", source=str(config)) from None
    method = str(qc.get("quant_method", "")).lower()
    if method not in SUPPORTED:
        raise InputError(f"no library reference for quant_method {method or 'none'!r}; expected one of "
                         f"{', '.join(SUPPORTED)}", source=str(config), field="quantization_config.quant_method")
    from .loader import dtype_named

    torch_dtype = dtype_named(torch.bfloat16 if dtype is None else dtype)
    import warnings
    with warnings.catch_warnings():       # "the quantization_config from the model will be used": intended
        warnings.filterwarnings("ignore", message="You passed `quantization_config`")
        try:
            model = AutoModelForCausalLM.from_pretrained(str(root), quantization_config=_dequantizing(method, qc),
                                                         dtype=torch_dtype, trust_remote_code=False)
        except ImportError as exc:      # the dialect's library (compressed-tensors, accelerate...) is not installed
            raise InputError(f"the {method} reference dequantizes with a library transformers could not import "
                             f"here: {exc}", source=str(root)) from None
    return model.eval()


def _dequantizing(method: str, qc: dict) -> Any:
    """The library's quantization config that loads the checkpoint dequantized."""
    if method == "compressed-tensors":
        from transformers import CompressedTensorsConfig
        return CompressedTensorsConfig(run_compressed=False)
    if method == "fp8":
        from transformers import FineGrainedFP8Config
        return FineGrainedFP8Config(dequantize=True, weight_block_size=qc.get("weight_block_size"),
                                    modules_to_not_convert=qc.get("modules_to_not_convert"))
    from transformers import Mxfp4Config
    return Mxfp4Config(dequantize=True, modules_to_not_convert=qc.get("modules_to_not_convert"))
