"""A throwaway third-party plugin for the tuning tests, pip-installed through its entry point.

`racer.alpha` and `racer.beta` serve the same FP8-block linear layers; the one named by
RACER_SLOW sleeps 30 ms per call. `racer.gamma` misbehaves as RACER_GAMMA says: raise,
shape (wrong output shape), oom (CUDA out of memory), interrupt (Ctrl-C during timing).
"""
from __future__ import annotations

import textwrap
from pathlib import Path

from plugin_dist import REGISTER_KERNELS_YAML, pip_install, write_distribution

KERNELS = """\
backend: racer
tier: optimized
kernels:
  - name: racer.alpha
    op: linear
    implementation: oracle_racer.kernel:Alpha
    modes: [{weight: fp8_block, activation: fp8, name: w8a8}]
  - name: racer.beta
    op: linear
    implementation: oracle_racer.kernel:Beta
    modes: [{weight: fp8_block, activation: fp8, name: w8a8}]
  - name: racer.gamma
    op: linear
    implementation: oracle_racer.kernel:Gamma
    modes: [{weight: fp8_block, activation: fp8, name: w8a8}]
"""

KERNEL_PY = """\
import os, time
import torch
from oracle.kernel import Kernel


class _Racer(Kernel):
    name = ""

    def process_weights(self, weight, weight_scale=None, **_):
        self.n = weight.shape[0]

    def apply(self, x):
        if os.environ.get("RACER_SLOW") == self.name:
            time.sleep(0.03)
        return torch.zeros(x.shape[0], self.n, dtype=x.dtype)


class Alpha(_Racer):
    name = "alpha"


class Beta(_Racer):
    name = "beta"


class Gamma(_Racer):
    name = "gamma"

    def apply(self, x):
        how = os.environ.get("RACER_GAMMA", "raise")
        if how == "shape":
            return torch.zeros(x.shape[0], self.n + 1, dtype=x.dtype)
        if how == "oom":
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        if how == "interrupt":
            raise KeyboardInterrupt
        raise ValueError("racer.gamma cannot do this")
"""

TINY_CONFIG = """\
{"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 256, "intermediate_size": 512,
 "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 128, "num_hidden_layers": 2, "vocab_size": 1000,
 "torch_dtype": "bfloat16", "tie_word_embeddings": false,
 "quantization_config": {"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}}
"""


def install(root: Path) -> Path:
    """Build and pip-install the plugin into root/site; returns that folder (for sys.path / PYTHONPATH)."""
    src = write_distribution(root / "src", "oracle-racer", "oracle_racer", "racer",
                             {"kernels.yaml": KERNELS, "kernel.py": KERNEL_PY, "plugin.py": REGISTER_KERNELS_YAML})
    return pip_install(src, root / "site")


def tiny_model(root: Path) -> Path:
    folder = root / "tiny-fp8"
    folder.mkdir()
    (folder / "config.json").write_text(textwrap.dedent(TINY_CONFIG))
    return folder
