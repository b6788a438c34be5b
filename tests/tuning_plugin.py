"""A throwaway third-party plugin for the tuning tests, pip-installed through its entry point.

`racer.alpha` and `racer.beta` serve the same FP8-block linear layers; the one named by
RACER_SLOW sleeps 30 ms per call. `racer.gamma` misbehaves as RACER_GAMMA says: raise,
shape (wrong output shape), oom (CUDA out of memory), interrupt (Ctrl-C during timing).
"""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

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

PLUGIN_PY = """\
from pathlib import Path
from oracle import hookimpl

@hookimpl
def register_kernels(register):
    register(Path(__file__).with_name("kernels.yaml"))
"""

PYPROJECT = """\
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"
[project]
name = "oracle-racer"
version = "0.1"
[project.entry-points."oracle.kernels"]
racer = "oracle_racer.plugin"
[tool.setuptools]
packages = ["oracle_racer"]
[tool.setuptools.package-data]
oracle_racer = ["kernels.yaml"]
"""

TINY_CONFIG = """\
{"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 256, "intermediate_size": 512,
 "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 128, "num_hidden_layers": 2, "vocab_size": 1000,
 "torch_dtype": "bfloat16", "tie_word_embeddings": false,
 "quantization_config": {"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}}
"""


def install(root: Path) -> Path:
    """Build and pip-install the plugin into root/site; returns that folder (for sys.path / PYTHONPATH)."""
    src = root / "src"
    pkg = src / "oracle_racer"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "kernels.yaml").write_text(KERNELS)
    (pkg / "kernel.py").write_text(KERNEL_PY)
    (pkg / "plugin.py").write_text(PLUGIN_PY)
    (src / "pyproject.toml").write_text(PYPROJECT)
    site = root / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                    "--no-build-isolation", "--target", str(site), str(src)], check=True)
    return site


def tiny_model(root: Path) -> Path:
    folder = root / "tiny-fp8"
    folder.mkdir()
    (folder / "config.json").write_text(textwrap.dedent(TINY_CONFIG))
    return folder
