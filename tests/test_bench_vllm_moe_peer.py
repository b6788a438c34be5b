"""bench/vllm_moe_peer.py: vLLM's own Triton fused MoE as bench_peers' "vllm-triton" MoE peer.

Its numerics run vLLM 0.32's kernels, read from the pinned vLLM venv's sources (scripts/vllm-venv; found without
importing vLLM), in Triton's CPU interpreter (a subprocess: the interpreter must be on before Triton is imported)
against a torch reference and oracle-emulation; on a GPU machine in-process where $ORACLE_VLLM_SRC names a tree.
Its default launch rule is checked against vLLM's own get_default_config inside that venv. The tree lookup, the
extraction, the tuned-file names and the nearest-entry choice run on fake trees. Outside CI the vLLM parts skip
when the venv has not been created; with CI=true it is created (or reused) and they never skip.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")
ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
sys.path.insert(0, str(BENCH))

import vllm_moe_peer as vp  # noqa: E402


def _vllm_python() -> str:
    in_ci = os.environ.get("CI") == "true"
    run = subprocess.run([str(ROOT / "scripts" / "vllm-venv")] + ([] if in_ci else ["--check"]), capture_output=True,
                         text=True, cwd=ROOT, timeout=3000)
    if run.returncode != 0:
        if in_ci:
            pytest.fail(f"scripts/vllm-venv failed (exit {run.returncode}):\n{run.stderr[-3000:]}")
        pytest.skip(f"the pinned vLLM venv is not created (run scripts/vllm-venv, ~8 min): {run.stderr.strip()}")
    return run.stdout.strip().splitlines()[-1]


def _vllm_env() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "PYTHON"))}
    env["VLLM_TARGET_DEVICE"] = "cpu"
    return env


@pytest.fixture(scope="module")
def vllm_tree() -> Path:
    return _vllm_tree()


def _vllm_tree() -> Path:
    """The site-packages of the pinned vLLM venv (importlib finds vllm there; vllm itself is not imported)."""
    python = _vllm_python()
    run = subprocess.run([python, "-c", "import importlib.util as u; print(u.find_spec('vllm').origin)"],
                         capture_output=True, text=True, timeout=120, env=_vllm_env())
    assert run.returncode == 0, run.stderr[-2000:]
    return Path(run.stdout.strip()).parents[1]


def test_peer_agrees_with_references():
    if torch.cuda.is_available() and os.environ.get("ORACLE_VLLM_SRC"):     # the device rounds carry a tree
        lines = vp.self_check(None, "cuda")
        assert len(lines) == 9
        return
    vllm_tree = _vllm_tree()
    pytest.importorskip("numpy")                  # the interpreter's
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    out = subprocess.run([sys.executable, str(BENCH / "vllm_moe_peer.py"), "--self-check", "--vllm-src",
                          str(vllm_tree)], env=env, cwd=BENCH, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "agrees with oracle-emulation (cpu)" in out.stdout
    assert out.stdout.count("(naive)") == 4 and out.stdout.count("(aligned)") == 4
    assert out.stdout.count("BF16 swigluoai") == 2
    assert "1x128 rounding: 4096 codes and 32 scales equal" in out.stdout


def test_default_rule_is_vllms(vllm_tree):
    """default_config restates vLLM's get_default_config on CUDA (FP8 128x128 blocks; BF16 experts): asked of vLLM
    itself, for DeepSeek-R1's and gpt-oss-20b's expert counts."""
    ms = [1, 2, 4, 5, 8, 9, 16, 17, 32, 33, 64, 65, 96, 97, 128, 129, 256, 512, 513, 4096, 8192]
    code = ("import json, sys\n"
            "from vllm.model_executor.layers.fused_moe.fused_moe import get_default_config as d\n"
            f"print(json.dumps([{{m: d(m, e, 2048, 7168, 8, 'fp8_w8a8' if f else None, [128, 128] if f else None)"
            f" for m in {ms}}} for e, f in ((256, 1), (256, 0), (32, 0))]))\n")
    run = subprocess.run([_vllm_python(), "-c", code], capture_output=True, text=True, timeout=600, env=_vllm_env())
    assert run.returncode == 0, run.stderr[-3000:]
    tables = json.loads(run.stdout.strip().splitlines()[-1])
    for (experts, fp8), theirs in zip(((256, True), (256, False), (32, False)), tables):
        for m in ms:
            cfg = {k: v for k, v in theirs[str(m)].items() if k != "SPLIT_K"}
            assert cfg == vp.default_config(m, experts, fp8), (experts, fp8, m)


def test_tree_lookup_and_extraction(tmp_path, monkeypatch):
    monkeypatch.delenv("ORACLE_VLLM_SRC", raising=False)
    with pytest.raises(vp.VllmSourceError, match=str(tmp_path / "none")):
        vp.find_tree(tmp_path / "none")
    fused = tmp_path / "vllm" / "model_executor" / "layers" / "fused_moe" / "fused_moe.py"
    fused.parent.mkdir(parents=True)
    fused.write_text("import triton\n\n@triton.jit\ndef write_zeros_to_output(a):\n    pass\n\n\ndef other():\n"
                     "    pass\n")
    assert vp.find_tree(tmp_path) == tmp_path
    assert vp.find_tree(tmp_path / "vllm") == tmp_path            # the package itself
    monkeypatch.setenv("ORACLE_VLLM_SRC", str(tmp_path))
    assert vp.find_tree() == tmp_path
    (tmp_path / "vllm" / "_version.py").write_text("__version__: str\n__version__ = version = '0.32.0'\n")
    assert vp.version(tmp_path) == "0.32.0"
    assert vp._functions(fused, ("write_zeros_to_output",)).startswith("@triton.jit\ndef write_zeros_to_output")
    with pytest.raises(vp.VllmSourceError, match="no function fused_moe_kernel"):
        vp._functions(fused, ("write_zeros_to_output", "fused_moe_kernel"))
    with pytest.raises(vp.VllmSourceError, match="no function fused_moe_kernel"):
        vp.load_kernels(tmp_path)


def test_tuned_files(tmp_path):
    assert vp.config_file(256, 2048, "NVIDIA H200") == \
        "E=256,N=2048,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128,128].json"
    assert vp.config_file(128, 768, "NVIDIA H200 NVL").startswith("E=128,N=768,device_name=NVIDIA_H200,")
    assert "device_name=NVIDIA_H100_80GB_HBM3," in vp.config_file(128, 768, "NVIDIA H100 80GB HBM3")
    assert vp.config_file(32, 2880, "NVIDIA H200", fp8=False) == "E=32,N=2880,device_name=NVIDIA_H200.json"
    configs = tmp_path / "vllm" / "model_executor" / "layers" / "fused_moe" / "configs"
    configs.mkdir(parents=True)
    entries = {"1": {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64}, "64": {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 128},
               "triton_version": "3.5"}
    (configs / vp.config_file(128, 768, "NVIDIA H200")).write_text(json.dumps(entries))
    cfg, source = vp.launch_config(tmp_path, 128, 768, 16, "NVIDIA H200")
    assert cfg == entries["1"] and "[1]" in source               # 16 is nearer 1 than 64
    cfg, source = vp.launch_config(tmp_path, 128, 768, 48, "NVIDIA H200")
    assert cfg == entries["64"] and "[64]" in source
    cfg, source = vp.launch_config(tmp_path, 256, 2048, 16, "NVIDIA H200")
    assert cfg == vp.default_config(16) and "default" in source
    cfg, source = vp.launch_config(tmp_path, 128, 768, 16, "NVIDIA H200", fp8=False)   # BF16 reads its own file
    assert cfg == vp.default_config(16, 128, fp8=False) and "default" in source


def test_export_copies_what_the_peer_reads(vllm_tree, tmp_path):
    out = vp.export(tmp_path / "tree", vllm_tree)
    assert vp.find_tree(out) == out
    assert (out / "vllm" / "model_executor" / "layers" / "quantization" / "utils" / "fp8_utils.py").is_file()
    assert (out / vp.LAYERS / vp.CONFIGS / vp.config_file(128, 768, "NVIDIA H200")).is_file()
    assert vp.version(out) == vp.version(vllm_tree) != "unknown"
