"""oracle.hf's loading contract beyond numerics: writers' conventions, checks, API and CLI parity.

Checkpoints come from tests/checkpoint_matrix.py (transformers' save_pretrained + compressed-tensors'
compressor, or transformers' FP8 quantizer); the facts checked are the writers' (their names and
tensors), the documented API (oracle.hf.load_quantized's docstring) and the CLI's exit codes.
"""
from __future__ import annotations

import logging
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("compressed_tensors")

import checkpoint_matrix as cm  # noqa: E402

import oracle.hf  # noqa: E402
from oracle.checkpoints import CheckpointError  # noqa: E402
from oracle.cli import main  # noqa: E402
from oracle.errors import InputError  # noqa: E402

IDS = torch.tensor([[1, 5, 9, 33, 100, 7]])


def _rewrite(path, change) -> None:
    from safetensors.torch import load_file, save_file
    state = load_file(str(path / "model.safetensors"))
    change(state)
    save_file({k: v.contiguous() for k, v in state.items()}, str(path / "model.safetensors"), metadata={"format": "pt"})


@pytest.fixture(scope="module")
def mixtral(tmp_path_factory):
    """Mixtral as transformers saves it (block_sparse_moe.experts.<e>.w1/w2/w3), W4A16 by compressed-tensors."""
    return cm.write(tmp_path_factory.mktemp("mixtral") / "ckpt", "mixtral", "W4A16")


def test_mixtral_original_names_load_and_match_the_reference_loader(mixtral):
    model = oracle.hf.load_quantized(mixtral, device="cpu")
    experts = model.model.layers[0].mlp.experts          # transformers' module for block_sparse_moe.experts
    assert type(experts).__name__ == "KernelExperts"
    ref = oracle.hf.load_reference(mixtral)               # compressed-tensors decompresses, transformers renames
    assert torch.equal(experts.kernel.w13.float(), ref.model.layers[0].mlp.experts.gate_up_proj.float())
    with torch.no_grad():
        a, b = model(IDS).logits.float(), ref(IDS).logits.float()
    assert float((a - b).norm() / b.norm()) < 0.03      # weight-only: BF16 rounding of the outputs only


def test_router_correction_bias_is_applied(tmp_path):
    """DeepSeek-V3 / GLM-4.5 routers carry mlp.gate.e_score_correction_bias: loaded, not refused or dropped."""
    path = cm.write(tmp_path / "ds", "deepseek_v3", "W4A16")
    bias = torch.linspace(-1, 1, 4)
    _rewrite(path, lambda s: s.__setitem__("model.layers.1.mlp.gate.e_score_correction_bias", bias))
    model = oracle.hf.load_quantized(path, device="cpu")
    got = model.model.layers[1].mlp.gate.e_score_correction_bias
    assert torch.equal(got.float(), bias)


def test_kv_cache_scales_are_skipped_with_one_warning_line(tmp_path, caplog):
    path = cm.write(tmp_path / "llama", "llama", "FP8")

    def add(state):
        for layer in range(2):
            for kv in ("k_scale", "v_scale"):
                state[f"model.layers.{layer}.self_attn.{kv}"] = torch.tensor(0.05)
    _rewrite(path, add)
    with caplog.at_level(logging.WARNING, logger="oracle.hf"):
        oracle.hf.load_quantized(path, device="cpu")
    lines = [r.getMessage() for r in caplog.records if r.name == "oracle.hf"]
    assert len(lines) == 1 and "4 KV-cache scale tensors" in lines[0] and "\n" not in lines[0]


def test_a_missing_tensor_is_the_same_error_for_load_check_explain_and_run(mixtral, tmp_path, capsys):
    import shutil
    path = tmp_path / "broken"
    shutil.copytree(mixtral, path)
    gone = "model.layers.1.block_sparse_moe.experts.2.w3.weight_scale"
    _rewrite(path, lambda s: s.pop(gone))
    with pytest.raises(CheckpointError, match=gone.replace(".", r"\.")) as loading:
        oracle.hf.load_quantized(path, device="cpu")
    with pytest.raises(CheckpointError) as checking:
        oracle.hf.check_checkpoint(path)
    assert str(checking.value) == str(loading.value)
    capsys.readouterr()
    assert main(["explain", "--model", str(path)]) == 0            # the config alone is fine
    assert main(["explain", "--model", str(path), "--checkpoint"]) == 1
    assert gone in capsys.readouterr().err
    assert main(["run", "--model", str(path), "--device", "cpu", "--max-new-tokens", "1"]) == 1
    assert gone in capsys.readouterr().err


def test_explain_checkpoint_passes_what_run_loads(mixtral, capsys):
    assert main(["explain", "--model", str(mixtral), "--checkpoint"]) == 0
    assert "every tensor checked" in capsys.readouterr().err
    assert main(["run", "--model", str(mixtral), "--device", "cpu", "--max-new-tokens", "2", "--dtype", "float32",
                 "--linear-backend", "emulation", "--moe-backend", "emulation"]) == 0
    out = capsys.readouterr().out
    assert "emulation.moe" in out and "tokens" in out


def test_run_takes_policy_backends_and_dtype_like_explain(mixtral, tmp_path, capsys):
    bad = tmp_path / "policy.yaml"
    bad.write_text("activations: {linear: {int4: [nope]}}\n")
    assert main(["run", "--model", str(mixtral), "--device", "cpu", "--policy", str(bad)]) == 1
    assert "policy.yaml" in capsys.readouterr().err
    assert main(["run", "--model", str(mixtral), "--device", "cpu", "--moe-backend", "no-such-backend"]) == 1
    assert "--moe-backend" in capsys.readouterr().err


def test_api_contract(mixtral):
    doc = oracle.hf.load_quantized.__doc__
    for word in ("dtype", "platform", "config", "policy", "env", "device", "InputError", "save_pretrained"):
        assert word in doc
    model = oracle.hf.load_quantized(mixtral, device="cpu", dtype="float32")
    assert model.model.embed_tokens.weight.dtype == torch.float32
    phases = model.oracle.phase_seconds       # where a load's host time went, phase by phase, in order
    assert list(phases) == ["select", "build", "convert", "kernels", "plain"] and min(phases.values()) >= 0
    assert sum(phases.values()) <= model.oracle.load_seconds
    with pytest.raises(InputError, match="save_pretrained is refused"):
        model.save_pretrained("/nonexistent")
    with pytest.raises(InputError, match="dtype"):
        oracle.hf.load_quantized(mixtral, device="cpu", dtype="int3")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only torch message")
def test_cuda_on_a_cpu_only_torch_is_a_clear_error(mixtral):
    with pytest.raises(InputError, match="no CUDA device"):
        oracle.hf.load_quantized(mixtral, device="cuda")


def test_progress_bar_on_request(mixtral, capsys, monkeypatch):
    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    oracle.hf.load_quantized(mixtral, device="cpu", progress=True)
    assert "loading ckpt" in capsys.readouterr().err


def test_loading_on_cpu_needs_no_triton(mixtral):
    """With `import triton` failing, a CPU load still works: oracle imports no GPU compiler for CPU kernels,
    and of the plugins only their registration modules and the chosen kernels' implementations."""
    code = textwrap.dedent(f"""
        import sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name == "triton" or name.startswith("triton."):
                    raise ImportError("blocked: " + name)
        sys.meta_path.insert(0, Block())
        import oracle.hf, torch
        m = oracle.hf.load_quantized({str(mixtral)!r}, device="cpu")
        with torch.no_grad():
            m(torch.tensor([[1, 2, 3]]))
        print(sorted(n for n in sys.modules if n.startswith(("oracle_triton", "oracle_torch", "oracle_b12x."))))
        print(sorted({{k.spec.name for k in m.oracle.kernels.values()}}))
        print("ok", "triton" in sys.modules)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    modules, kernels, last = out.stdout.strip().splitlines()[-3:]
    assert last.split() == ["ok", "False"]
    assert eval(kernels) == ["emulation.moe", "torch.linear.int4_cpu"]      # noqa: S307 - our own repr
    # int4_cpu is oracle_torch.cpu_int (with tinygemm's shared code); no GPU kernel module of any plugin
    assert set(eval(modules)) <= {"oracle_torch", "oracle_torch.plugin", "oracle_torch.cpu_int",  # noqa: S307
                                  "oracle_torch.tinygemm", "oracle_triton", "oracle_triton.plugin",
                                  "oracle_b12x.plugin", "oracle_b12x.provider", "oracle_b12x.errors"}, modules


def test_transformers_per_tensor_fp8_with_fused_parts_keeps_each_scale(tmp_path):
    """transformers writes per-tensor FP8 scales as [1, 1]; q/k/v keep their own scale (exact) by default,
    and requantize_fused fuses them at the largest scale (vLLM's way)."""
    pytest.importorskip("accelerate")
    path = cm.write_fp8(tmp_path / "fp8", "llama", None)
    exact = oracle.hf.load_quantized(path, device="cpu")
    fused = oracle.hf.load_quantized(path, device="cpu", requantize_fused=True)
    ref = oracle.hf.load_reference(path)
    name = "model.layers.0.self_attn.qkv_proj"
    want = torch.cat([ref.get_submodule(f"model.layers.0.self_attn.{p}").weight.float() for p in ("q_proj", "k_proj",
                                                                                                  "v_proj")])
    err = [float((m.oracle.kernels[name].weight.float() - want).norm() / want.norm()) for m in (exact, fused)]
    assert err[0] < 2 ** -8 < err[1], err
    assert type(exact.oracle.kernels[name]).__name__ == "PartKernels"


def test_make_tiny_checkpoint_writes_mixtral_in_its_own_names(tmp_path):
    """scripts/make_tiny_checkpoint.py --config on a Mixtral config: block_sparse_moe.experts.<e>.w1 names
    (transformers' own mapping, reversed), and oracle.hf loads what it wrote."""
    import json
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1] / "scripts"))
    import make_tiny_checkpoint as tiny
    cfg = cm.tiny_model("mixtral").config.to_dict()
    (tmp_path / "mixtral.json").write_text(json.dumps(cfg))
    out = tiny.write(tmp_path / "ckpt", "qwen3-moe-fp8", str(tmp_path / "mixtral.json"))
    index = json.loads((out / "model.safetensors.index.json").read_text())["weight_map"]
    assert "model.layers.0.block_sparse_moe.experts.3.w1.weight_scale_inv" in index
    model = oracle.hf.load_quantized(out, device="cpu")
    assert type(model.model.layers[1].mlp.experts).__name__ == "KernelExperts"
