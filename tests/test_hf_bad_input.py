"""Bad checkpoints: one clear error naming the tensor and the file, and no model comes back.

Each case edits a good checkpoint (the tiny transformers-FP8 Qwen3-MoE and gpt-oss MXFP4
of tests/tf_checkpoints.py) in one way, then loads it with oracle.hf and through `oracle run`.
"""
from __future__ import annotations

import json
import shutil

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
from safetensors.torch import load_file, save_file  # noqa: E402

import tf_checkpoints as tf  # noqa: E402

import oracle.hf  # noqa: E402
from oracle.errors import InputError  # noqa: E402  (CheckpointError is one)
from oracle.cli import main  # noqa: E402

Q = "model.layers.0.self_attn.q_proj"
EXPERT = "model.layers.1.mlp.experts.2.down_proj"


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    return tf.write_fp8_moe(tmp_path_factory.mktemp("good"))


@pytest.fixture
def ckpt(good, tmp_path):
    path = tmp_path / "ckpt"
    shutil.copytree(good, path)
    return path


def edit(path, change):
    state = load_file(str(path / "model.safetensors"))
    change(state)
    save_file(state, str(path / "model.safetensors"), metadata={"format": "pt"})


def refused(path, *needles):
    with pytest.raises(InputError) as info:
        oracle.hf.load_quantized(path, device="cpu")
    message = str(info.value)
    for needle in needles:
        assert needle in message, message
    return message


def test_missing_tensor_is_named_with_its_file(ckpt):
    edit(ckpt, lambda s: s.pop(f"{EXPERT}.weight_scale_inv"))
    refused(ckpt, f"{EXPERT}.weight_scale_inv", "missing tensor", "model.safetensors")


def test_wrong_dtype_is_named(ckpt):
    edit(ckpt, lambda s: s.update({f"{Q}.weight": s[f"{Q}.weight"].to(torch.bfloat16)}))
    refused(ckpt, f"{Q}.weight", "float8_e4m3fn", "got bfloat16", "model.safetensors")


def test_wrong_shape_is_named(ckpt):
    edit(ckpt, lambda s: s.update({f"{Q}.weight_scale_inv": s[f"{Q}.weight_scale_inv"].repeat(2, 1)}))
    refused(ckpt, f"{Q}.weight_scale_inv", "expected shape [2, 1]", "got [4, 1]")


def test_wrong_shape_of_an_unquantized_tensor_is_named(ckpt):
    edit(ckpt, lambda s: s.update({"model.norm.weight": torch.ones(7, dtype=torch.bfloat16)}))
    refused(ckpt, "model.norm.weight", "expected shape [128]", "got [7]")


def test_unknown_tensors_are_listed_never_ignored(ckpt):
    edit(ckpt, lambda s: s.update({f"{Q}.weight_zero_point": torch.zeros(4, dtype=torch.int32),
                                   "model.layers.0.mlp.extra.weight": torch.zeros(4, dtype=torch.bfloat16)}))
    refused(ckpt, "2 checkpoint tensors match no module", f"{Q}.weight_zero_point", "model.layers.0.mlp.extra.weight")


def test_absent_shard_is_named(ckpt):
    names = list(load_file(str(ckpt / "model.safetensors")))
    index = {"metadata": {}, "weight_map": {n: ("model-00002-of-00002.safetensors" if n.startswith("lm_head")
                                                else "model.safetensors") for n in names}}
    (ckpt / "model.safetensors.index.json").write_text(json.dumps(index))
    refused(ckpt, "model-00002-of-00002.safetensors", "lm_head.weight")


def test_config_whose_quantization_does_not_match_the_tensors(ckpt):
    cfg = json.loads((ckpt / "config.json").read_text())
    del cfg["quantization_config"]                          # says unquantized, tensors are FP8
    (ckpt / "config.json").write_text(json.dumps(cfg))
    refused(ckpt, "float8_e4m3fn tensor for a module the quantization config leaves unquantized", "model.safetensors")


def test_gpt_oss_config_against_fp8_tensors(ckpt):
    cfg = json.loads((ckpt / "config.json").read_text())
    cfg["quantization_config"] = {"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized",
                                  "config_groups": {"g": {"targets": ["Linear"], "weights": {
                                      "num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16}}},
                                  "ignore": ["lm_head"]}
    (ckpt / "config.json").write_text(json.dumps(cfg))
    refused(ckpt, f"{Q}.weight_packed", "missing tensor", "nvfp4")


def test_oracle_run_prints_one_error_and_exits_1(ckpt, capsys):
    edit(ckpt, lambda s: s.pop(f"{EXPERT}.weight"))
    assert main(["run", "--model", str(ckpt), "--prompt-ids", "1,2"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and f"{EXPERT}.weight" in err and "Traceback" not in err


def test_oracle_run_generates_and_reports(good, capsys):
    assert main(["run", "--model", str(good), "--prompt-ids", "1,2,3", "--max-new-tokens", "5"]) == 0
    out = capsys.readouterr().out
    tokens = next(line for line in out.splitlines() if line.startswith("tokens"))
    assert len(json.loads(tokens.split(None, 1)[1])) == 5
    assert "experts: fp8_block -> emulation.moe [w8a8_block]" in out
    assert "tokens/s" in out and "peak" in out and "load" in out


def test_oracle_run_rejects_bad_prompt_ids(good, capsys):
    assert main(["run", "--model", str(good), "--prompt-ids", "1,x"]) == 1
    assert "--prompt-ids" in capsys.readouterr().err


def test_oracle_run_with_a_tokenizer_takes_text_and_prints_text(ckpt, capsys):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    vocab = {f"w{i}": i for i in range(256)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="w0").save_pretrained(str(ckpt))
    assert main(["run", "--model", str(ckpt), "--prompt", "w5 w9 w33", "--max-new-tokens", "3"]) == 0
    out = capsys.readouterr().out
    assert "prompt    [5, 9, 33]" in out
    text = next(line for line in out.splitlines() if line.startswith("text"))
    assert text.count("w") == 3


def test_oracle_run_prompt_without_a_tokenizer_is_refused(good, capsys):
    assert main(["run", "--model", str(good), "--prompt", "hello"]) == 1
    assert "tokenizer" in capsys.readouterr().err


def test_oracle_run_bench_prints_the_steady_state_table(good, capsys):
    assert main(["run", "--model", str(good), "--prompt-ids", "1,2,3", "--max-new-tokens", "2", "--decode", "eager",
                 "--bench", "--batch", "1", "2", "--bench-steps", "2"]) == 0
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines() if line.strip().split()[:2] in (["1", "eager"], ["2", "eager"])]
    assert [r[:2] for r in rows] == [["1", "eager"], ["2", "eager"]]
    assert all(float(r[2]) > 0 for r in rows) and "peak memory" in out


def test_oracle_run_graphs_without_cuda_is_one_error(good, capsys):
    assert main(["run", "--model", str(good), "--device", "cpu", "--decode", "graphs"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "CUDA graphs need a CUDA device" in err and "Traceback" not in err
    assert main(["run", "--model", str(good), "--batch", "0", "--bench"]) == 1
    assert "--batch" in capsys.readouterr().err


@pytest.mark.parametrize("text, numbers", [("5.23.0", (5, 23, 0)), ("5.24.0.dev0", (5, 24, 0)),
                                           ("6.0.0rc1", (6, 0, 0)), ("5.17", (5, 17))])
def test_transformers_versions_read_as_release_numbers(text, numbers):
    from oracle.hf.requirements import transformers_version

    assert transformers_version(text) == numbers


def test_an_older_transformers_is_one_error_naming_the_version(good, capsys, monkeypatch):
    """transformers 5.17 (a lent GPU machine's, twenty-eighth pass) failed with an ImportError traceback deep in
    the name mapping; now load_quantized, check_checkpoint, `oracle run` and `oracle explain --checkpoint` each
    say what is needed and what was found, before anything is read."""
    import transformers

    from oracle.hf.requirements import MIN_TRANSFORMERS

    monkeypatch.setattr(transformers, "__version__", "5.17.0")
    floor = ".".join(map(str, MIN_TRANSFORMERS))
    for call in (oracle.hf.load_quantized, oracle.hf.check_checkpoint):
        with pytest.raises(InputError, match=rf"needs transformers >= {floor}, found 5\.17\.0 \(pip install -U"):
            call(good, device="cpu") if call is oracle.hf.load_quantized else call(good)
    assert main(["run", "--model", str(good), "--device", "cpu", "--prompt-ids", "1,2"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"needs transformers >= {floor}, found 5.17.0" in err
    assert main(["explain", "--model", str(good), "--checkpoint"]) == 1
    err = capsys.readouterr().err
    assert "--checkpoint: needs transformers" in err and "Traceback" not in err


def test_load_reference_names_a_bad_dtype_and_a_missing_library(good, monkeypatch):
    """load_reference takes the dtypes load_quantized takes (else one error on `dtype`), and a dialect library
    transformers cannot import (compressed-tensors, accelerate) is one error naming the checkpoint, not an
    ImportError traceback."""
    import transformers

    with pytest.raises(InputError, match=r"^dtype: expected bfloat16, float16 or float32, got 'int3'$"):
        oracle.hf.load_reference(good, dtype="int3")

    def missing(*args, **kwargs):
        raise ImportError("Using `fp8` quantization requires accelerate: `pip install accelerate`")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", missing)
    with pytest.raises(InputError, match=r"the fp8 reference dequantizes with a library .*requires accelerate") as e:
        oracle.hf.load_reference(good)
    assert str(good) in str(e.value)
