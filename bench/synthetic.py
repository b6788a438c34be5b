"""Full-depth models from a real config with random weights made on the device: no checkpoint written.

A 30 GB random checkpoint is impractical to write just to time a model, so the loader is handed
a `SyntheticSource` instead of the directory's safetensors: the same tensor names and layouts
scripts/make_tiny_checkpoint.py writes (its `tensor_plan`), each made on the GPU when the loader
asks for it and dropped once handed over. The directory holds only config.json.

    oracle_model(config, kind, layers, "cuda")    # oracle.hf, kernels selected for this GPU
    bf16_model(config, kind, layers, "cuda")      # plain transformers, BF16, same geometry
"""
from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import make_tiny_checkpoint as mk  # noqa: E402

from oracle.checkpoints.source import TensorSource  # noqa: E402

#: quant_method of a config.json -> the layout (make_tiny_checkpoint kind) its random tensors follow
KINDS = {"fp8": "qwen3-moe-fp8", "mxfp4": "gpt-oss-mxfp4"}


def kind_of(config_file: str) -> str:
    import json
    qc = json.loads(Path(config_file).read_text()).get("quantization_config") or {}
    method = qc.get("quant_method")
    if method not in KINDS:
        raise SystemExit(f"{config_file}: quantization_config.quant_method: expected one of {sorted(KINDS)}, "
                         f"got {method!r}")
    return KINDS[method]


class SyntheticSource(TensorSource):
    """Checkpoint tensors made on demand on `device` from a seeded generator (the loader's order fixes
    the values, so two loads of the same config and seed get the same weights). `made_here`: the values
    come from the emulation quantizer, so the loader skips its per-tensor NaN and sign scans."""

    made_here = True

    def __init__(self, plan: list[tuple[tuple[str, ...], Callable[[torch.Generator], tuple], int]], device: str,
                 seed: int = 0):
        groups = {name: (names, make) for names, make, _ in plan for name in names}
        super().__init__({name: Path("<random>") for name in groups}, None)
        self.groups, self.nbytes = groups, sum(n for _, _, n in plan)
        self.gen = torch.Generator(device=device).manual_seed(seed)
        self.ready: dict[str, torch.Tensor] = {}
        self.make_s = 0.0          # host seconds spent making tensors (the rest of a build is the loader's)

    def stored_bytes(self) -> int:
        """The bytes the made tensors take (what a checkpoint of them would hold)."""
        return self.nbytes

    def get(self, name: str) -> Any:
        if name not in self.ready:
            names, make = self.groups[name]          # KeyError -> the loader's missing-tensor error path
            t = time.perf_counter()
            with torch.no_grad():
                self.ready.update(zip(names, make(self.gen)))
            self.make_s += time.perf_counter() - t
        self.claimed.add(name)
        return self.ready.pop(name)


def oracle_model(config_file: str | None, kind: str, layers: int | None, device: str, seed: int = 0,
                 config: Any = None) -> torch.nn.Module:
    """oracle.hf's model of `config_file` (cut to `layers`), random weights made on `device`."""
    import oracle.hf

    cfg, meta = mk.meta_model(kind, config_file, layers)
    with tempfile.TemporaryDirectory() as tmp:
        mk.write_config(Path(tmp), kind, cfg, meta)
        source = SyntheticSource(mk.tensor_plan(kind, meta), device, seed)
        del meta
        model = oracle.hf.load_quantized(tmp, device=device, source=source, config=config)
    model._synthetic_make_s = source.make_s      # bench_decode reports the build's split
    return model


def bf16_model(config_file: str | None, kind: str, layers: int | None, device: str, seed: int = 0) -> torch.nn.Module:
    """Plain transformers in BF16 with the same geometry, random weights initialised on `device`."""
    from transformers import AutoModelForCausalLM

    cfg, _ = mk.meta_model(kind, config_file, layers)
    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.bfloat16)
    return model.eval()
