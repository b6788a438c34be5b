"""Checks on a checkpoint directory before anything is built from it, and on tensor values as read.

The loader (oracle.hf) calls these in a few lines, so a hostile checkpoint is one error naming
the file (and tensor and layer) before any model is allocated or any code runs:

- `refuse_remote_code`: a config or tokenizer config whose `auto_map` names the checkpoint's own
  Python classes is refused; oracle never runs a checkpoint's code (transformers is always called
  with trust_remote_code=False as well, so no prompt can appear).
- `check_sidecars`: config.json, generation_config.json, tokenizer_config.json and the safetensors
  index are bounded regular JSON files holding an object (oracle.safeio limits).
- `check_size`: the weights config.json describes must fit in the bytes the shards hold (a
  `hidden_size` of 10^6 over a 1 MB checkpoint would otherwise allocate terabytes first).
- `check_values`: scales and codes read the way the kernels will read them: FP8 and global scales
  finite and > 0, E4M3 and E8M0 block scales neither NaN nor negative, int4 scales finite and not
  negative, and no NaN code in FP8 weights.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ..safeio import MAX_JSON_BYTES, read_json
from .source import CheckpointError

#: Files a checkpoint may carry that transformers would read; each must be a JSON object.
SIDECARS = ("config.json", "generation_config.json", "tokenizer_config.json", "special_tokens_map.json",
            "model.safetensors.index.json", "quantize_config.json", "hf_quant_config.json")
#: Largest tokenizer.json read (large vocabularies are tens of MiB).
MAX_TOKENIZER_BYTES = 256 << 20
#: Fewest bits per weight any supported format stores (2-bit GGML codecs): the size check's floor.
MIN_BITS_PER_WEIGHT = 2


class _SidecarError(CheckpointError):
    def __init__(self, message: str, *, source: str | None = None, field: str | None = None):
        super().__init__(message, file=source)


def sidecar(root: Path, name: str) -> Any:
    """The JSON object in `root/name` (None when absent); anything else is a CheckpointError naming it."""
    path = root / name
    if not path.exists() and not path.is_symlink():
        return None
    limit = MAX_TOKENIZER_BYTES if name == "tokenizer.json" else MAX_JSON_BYTES
    data = read_json(path, limit, what=f"a checkpoint's {name}", error=_SidecarError)
    if not isinstance(data, dict):
        raise CheckpointError(f"expected a JSON object, got {type(data).__name__}", file=str(path))
    return data


def check_sidecars(root: Path) -> None:
    for name in (*SIDECARS, "tokenizer.json"):
        sidecar(root, name)


def refuse_remote_code(root: Path) -> None:
    """A config naming custom code (auto_map) is refused in one line, before transformers sees it."""
    for name in ("config.json", "tokenizer_config.json"):
        data = sidecar(root, name) or {}
        for holder, where in ((data, "auto_map"), (data.get("text_config"), "text_config.auto_map")):
            if isinstance(holder, dict) and holder.get("auto_map"):
                classes = holder["auto_map"]
                shown = ", ".join(f"{k} -> {v}" for k, v in list(classes.items())[:3]) \
                    if isinstance(classes, dict) else str(classes)[:80]
                raise CheckpointError(f"{where} names the checkpoint's own Python code ({shown}); oracle never runs "
                                      "code from a checkpoint (trust_remote_code is off): use an architecture "
                                      "transformers ships", file=str(root / name))


def transformers_call(load: Any, file: Path) -> Any:
    """`load(folder, trust_remote_code=False)` (a transformers from_pretrained); what it raises about the
    file becomes one CheckpointError naming it (transformers has no single error type for bad files)."""
    try:
        return load(str(file.parent), trust_remote_code=False)
    except Exception as exc:  # noqa: BLE001 - transformers' errors have no common base (strict dataclass, hub, ...)
        lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
        text = " ".join(lines[:2])[:300] if lines else type(exc).__name__
        raise CheckpointError(f"transformers cannot read it: {text}", file=str(file)) from None




def expected_bytes(desc: Any) -> int:
    """A floor on the bytes of the weights `desc` (oracle.models) describes: each linear and MoE layer at
    its format's bits per weight (unquantized ones at 16), never below MIN_BITS_PER_WEIGHT. Embeddings and
    lm_head are left out (a tied head is stored once), and MoE layers count two matrices (ungated)."""
    from ..formats import FORMAT_FACTS
    total = 0
    for row in desc.layers:
        layer = row.layer
        if layer.op not in ("linear", "moe") or layer.name.endswith("lm_head"):
            continue
        facts = FORMAT_FACTS.get(layer.weight_format)
        bits = min(16, max(MIN_BITS_PER_WEIGHT, facts.bits if facts is not None else MIN_BITS_PER_WEIGHT))
        if layer.op == "linear":
            weights = layer.in_features * layer.out_features
        else:
            weights = 2 * layer.num_experts * layer.hidden_size * layer.intermediate_size
        total += weights * bits // 8
    return total


def before_build(desc: Any, src: Any, root: Path) -> None:
    """Everything checked between reading the config and building the model: block sizes, then size."""
    check_blocks(desc, root / "config.json")
    check_size(desc, src, root / "config.json")


#: The one FP8 weight block the adapters read (layouts.LAYOUTS: scales [cdiv(N, 128), cdiv(K, 128)]).
ADAPTER_BLOCK = (128, 128)


def check_blocks(desc: Any, config: Path) -> None:
    """A block-FP8 layer whose blocks are not 128x128 is refused: its scales would be read as 128x128."""
    for row in desc.layers:
        block = getattr(row.layer, "weight_block", None)
        if block is not None and tuple(block) != ADAPTER_BLOCK:
            raise CheckpointError(f"layer {row.layer.name}: {block[0]}x{block[1]} weight blocks "
                                  "(quantization_config.weight_block_size); oracle.hf reads 128x128 block scales "
                                  "only", file=str(config))


def check_size(desc: Any, src: Any, config: Path) -> None:
    """Refuse a config whose layers need far more bytes than the shards hold (before any allocation).

    A factor of two of slack: a checkpoint missing a tensor or two is left to the loader's own errors,
    which name the tensor; this check is for configs orders of magnitude larger than their tensors."""
    need, have = expected_bytes(desc), src.stored_bytes()
    if need > 2 * have:
        raise CheckpointError(f"describes layers of at least {_size(need)} of weights, but the checkpoint's "
                              f"safetensors hold {_size(have)}: config.json and the tensors disagree "
                              "(refused before building the model)", file=str(config))


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"  # pragma: no cover


# ---------------------------------------------------------------- values, as the kernels read them
_SCALE_ARGS = ("weight_scale", "weight_global_scale", "input_scale", "input_global_scale")
_POSITIVE_FORMATS = ("fp8_tensor", "fp8_channel", "fp8_block")


def check_values(tensor: Any, name: str, arg: str, fmt: str, file: str) -> None:
    """Refuse values a kernel would turn into garbage silently; the error names tensor, file and layer."""
    import torch

    layer = name.rsplit(".", 1)[0]
    if tensor.dtype == torch.float8_e4m3fn:
        codes = tensor.view(torch.uint8)
        nan = (codes & 0x7F) == 0x7F
        if bool(nan.any()):
            raise _bad(f"{int(nan.sum())} NaN E4M3 codes (first at {_first(nan)})", name, file, layer, fmt)
        if arg in _SCALE_ARGS:
            negative = (codes & 0x80).bool() & ((codes & 0x7F) != 0)
            if bool(negative.any()):
                raise _bad(f"{int(negative.sum())} negative E4M3 scales (first at {_first(negative)}); "
                           "block scales are magnitudes", name, file, layer, fmt)
        return
    if arg not in _SCALE_ARGS:
        return
    if tensor.dtype == torch.uint8 and fmt in ("mxfp4", "mxfp8"):   # E8M0 exponents: 0xFF is NaN
        nan = tensor == 0xFF
        if bool(nan.any()):
            raise _bad(f"{int(nan.sum())} NaN E8M0 scales (0xFF, first at {_first(nan)})", name, file, layer, fmt)
        return
    if not tensor.is_floating_point():
        return
    values = tensor.float()
    bad = ~torch.isfinite(values)
    if bool(bad.any()):
        raise _bad(f"{int(bad.sum())} non-finite scales (NaN or Inf, first at {_first(bad)})", name, file, layer, fmt)
    positive = fmt in _POSITIVE_FORMATS or "global" in arg
    bad = values <= 0 if positive else values < 0
    if bool(bad.any()):
        need = "> 0" if positive else ">= 0"
        raise _bad(f"{int(bad.sum())} scales not {need} (first at {_first(bad)}: {float(values[bad][0]):g}); "
                   f"{fmt} dequantizes weight * scale", name, file, layer, fmt)


def _first(mask: Any) -> list[int]:
    import torch
    return [int(i) for i in torch.nonzero(mask)[0]] if mask.dim() else []


def _bad(what: str, name: str, file: str, layer: str, fmt: str) -> CheckpointError:
    return CheckpointError(f"{what} in layer {layer} ({fmt})", tensor=name, file=file)
