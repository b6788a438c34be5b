"""Hostile checkpoints and `oracle run` arguments: one error naming file (and tensor and layer), the
documented exit code, and no model handed back.

Three surfaces, each property-based:
- values: one layer's FP8 tensors (weight codes, block scales) mutated, through the fp8 adapter:
  refused exactly when an independent check (torch's own float8 decoding) finds a NaN code or a
  scale that is not finite and > 0; the error names tensor, file and layer.
- checkpoints: the tiny transformers-FP8 Qwen3-MoE (tests/tf_checkpoints.py) mutated on disk
  (scales, codes, config sizes, auto_map, sidecar files, duplicate shards), loaded with oracle.hf.
- `oracle run` arguments: --device, --prompt-ids, --max-new-tokens; refused before the model is
  built where they can be, exit 1 per the table, never a traceback.
Bound: hardening_scale.CASE_BOUND_S per case.
"""
from __future__ import annotations

import contextlib
import io
import json
import math
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
from safetensors.torch import load_file, save_file  # noqa: E402

import tf_checkpoints as tf  # noqa: E402
from hardening_scale import SCALE, bounded  # noqa: E402
import oracle.hf  # noqa: E402
from oracle.checkpoints import Adapter, DictSource  # noqa: E402
from oracle.cli import main  # noqa: E402
from oracle.errors import InputError, NoKernelError  # noqa: E402
from oracle.exitcodes import INPUT, OK  # noqa: E402
from oracle.layer import LinearLayer  # noqa: E402

_CASES = {"values": 0, "values_refused": 0, "checkpoints": 0, "checkpoints_refused": 0, "run_args": 0,
          "run_refused": 0, "run_ok": 0}
@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny tensors: torch's thread pool only adds contention on a loaded 2-core machine (100x slower)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


SCALES = st.sampled_from([0.0, -0.0, -1e-3, -5.0, math.nan, math.inf, -math.inf, 1e-30, 2.5])


# ---------------------------------------------------------------- values, through the adapter
_BASE: dict = {}


def _fp8_linear(n: int = 256, k: int = 256) -> dict:
    if not _BASE:
        w = torch.randn(n, k, generator=torch.Generator().manual_seed(0)) * 0.05
        q, s = tf.fp8_block(w)
        _BASE.update({"m.weight": q, "m.weight_scale_inv": s.float()})
    return {name: t.clone() for name, t in _BASE.items()}


@settings(max_examples=300 * SCALE, deadline=None)
@given(which=st.sampled_from(["scale", "code", "both", "none"]), row=st.integers(0, 255), col=st.integers(0, 255),
       scale=SCALES, code=st.sampled_from([0x7F, 0xFF, 0x7E, 0x80, 0x00, 0xFE]))
def test_scales_and_codes_are_checked_as_the_kernel_reads_them(which, row, col, scale, code):
    tensors = _fp8_linear()
    if which in ("scale", "both"):
        tensors["m.weight_scale_inv"][row // 128, col // 128] = scale
    if which in ("code", "both"):
        tensors["m.weight"].view(torch.uint8)[row, col] = code
    layer = LinearLayer(name="m", in_features=256, out_features=256, weight_format="fp8_block",
                        activation_format="fp8", weight_block=(128, 128))
    # independent: torch's float8 decoding says NaN, and the scales as floats
    nan_code = bool(torch.isnan(tensors["m.weight"].float()).any())
    s = tensors["m.weight_scale_inv"]
    bad_scale = bool((~torch.isfinite(s) | (s <= 0)).any())
    _CASES["values"] += 1
    with bounded():
        try:
            Adapter("fp8").linear(DictSource(tensors), layer, [("m", 256)])
            refused = None
        except InputError as exc:
            refused = str(exc)
    assert (refused is not None) == (nan_code or bad_scale), (refused, nan_code, bad_scale)
    if refused:
        _CASES["values_refused"] += 1
        tensor = "m.weight_scale_inv" if nan_code is False else "m.weight"
        assert refused.startswith(f"<memory>: {tensor}: ") and "in layer m (fp8_block)" in refused, refused


def test_e4m3_block_scales_refuse_nan_and_negative_codes():
    from oracle.checkpoints.preflight import check_values
    scale = torch.full((4, 2), 0.5).to(torch.float8_e4m3fn)
    check_values(scale, "x.weight_scale", "weight_scale", "nvfp4", "f.safetensors")
    for byte, needle in ((0x7F, "NaN E4M3 codes"), (0xB8, "negative E4M3 scales")):
        bad = scale.clone()
        bad.view(torch.uint8)[1, 1] = byte
        with pytest.raises(InputError, match=f"f.safetensors: x.weight_scale: 1 {needle} .*first at \\[1, 1\\]"):
            check_values(bad, "x.weight_scale", "weight_scale", "nvfp4", "f.safetensors")


# ---------------------------------------------------------------- checkpoints on disk
@pytest.fixture(scope="module")
def good(tmp_path_factory):
    path = tf.write_fp8_moe(tmp_path_factory.mktemp("good"))
    oracle.hf.load_quantized(path, device="cpu")      # warm: imports and first build are not a case
    return path


Q = "model.layers.0.self_attn.q_proj"
EXPERT = "model.layers.1.mlp.experts.2.down_proj"


def _edit_tensors(path: Path, change) -> None:
    state = load_file(str(path / "model.safetensors"))
    change(state)
    save_file(state, str(path / "model.safetensors"), metadata={"format": "pt"})


def _edit_config(path: Path, change) -> None:
    cfg = json.loads((path / "config.json").read_text())
    change(cfg)
    (path / "config.json").write_text(json.dumps(cfg))


def _mutation(kind: str, value, path: Path) -> tuple[str, ...]:
    """Apply one hostile change; return the texts the refusal must contain."""
    if kind == "scale":
        name = f"{EXPERT}.weight_scale_inv"
        _edit_tensors(path, lambda s: s[name].view(-1).__setitem__(0, value))
        return name, "model.safetensors", "in layer " + EXPERT
    if kind == "code":
        name = f"{Q}.weight"
        _edit_tensors(path, lambda s: s[name].view(torch.uint8).view(-1).__setitem__(value, 0x7F))
        return name, "model.safetensors", "NaN E4M3 codes"
    if kind == "size":
        _edit_config(path, lambda c: c.update({value: c[value] * 4096}))
        return "config.json", "refused before building the model"
    if kind == "auto_map":
        _edit_config(path, lambda c: c.update(auto_map={"AutoModelForCausalLM": "evil.Model"}))
        (path / "evil.py").write_text("raise SystemExit('remote code ran')\n")
        return "config.json", "auto_map names the checkpoint's own Python code", "trust_remote_code is off"
    if kind in ("generation_config.json", "tokenizer_config.json"):
        (path / kind).write_bytes(value)
        return (kind,)
    if kind == "duplicate":
        state = load_file(str(path / "model.safetensors"))
        save_file({f"{Q}.weight": state[f"{Q}.weight"]}, str(path / "model-extra.safetensors"))
        return f"{Q}.weight", "in two shards", "no model.safetensors.index.json"
    if kind == "top_k_list":
        _edit_config(path, lambda c: c.update(num_experts_per_tok=[c["num_experts_per_tok"]]))
        return "config.json", "num_experts_per_tok", "expected int"
    if kind == "block":
        _edit_config(path, lambda c: c["quantization_config"].update(weight_block_size=value))
        return ("reads 128x128 weight blocks (its declared weight_block)", f"blocks are {value[0]}x{value[1]}")
    raise AssertionError(kind)


MUTATIONS = st.one_of(
    st.tuples(st.just("scale"), SCALES.filter(lambda v: not (v > 0 and math.isfinite(v)))),
    st.tuples(st.just("code"), st.integers(0, 128 * 128 - 1)),
    st.tuples(st.just("size"), st.sampled_from(["hidden_size", "moe_intermediate_size"])),
    st.tuples(st.just("auto_map"), st.none()),
    st.tuples(st.sampled_from(["generation_config.json", "tokenizer_config.json"]),
              st.sampled_from([b"\xff\xfe{", b"[1, 2]", b"{" * 3000 + b"}" * 3000, b"not json", b"",
                               b'{"eos_token_id": NaN}'])),
    st.tuples(st.just("duplicate"), st.none()),
    st.tuples(st.just("top_k_list"), st.none()),     # explain reads [2] as 2; Qwen3-MoE's transformers class cannot
    st.tuples(st.just("block"), st.sampled_from([[64, 128], [128, 64], [256, 256]])),
)


@settings(max_examples=40 * SCALE, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                        HealthCheck.too_slow])
@given(mutation=MUTATIONS)
def test_mutated_checkpoints_are_refused_naming_file_tensor_and_layer(good, tmp_path_factory, mutation):
    path = tmp_path_factory.mktemp("ckpt") / "c"
    shutil.copytree(good, path)
    needles = _mutation(*mutation, path)
    _CASES["checkpoints"] += 1
    with bounded(), pytest.raises((InputError, NoKernelError)) as info:   # NoKernelError: oracle run exits 2
        oracle.hf.load_quantized(path, device="cpu")
    _CASES["checkpoints_refused"] += 1
    message = str(info.value)
    assert all(n in message for n in needles), (mutation, message)


@pytest.fixture(scope="module")
def good_nvfp4(tmp_path_factory):
    """A compressed-tensors NVFP4 checkpoint written by compressed-tensors' own code (tests/ct_checkpoints.py)."""
    pytest.importorskip("compressed_tensors")
    import ct_checkpoints as ct
    with contextlib.redirect_stderr(io.StringIO()):     # its progress bar
        return ct.write_checkpoint(tmp_path_factory.mktemp("nvfp4") / "c", "NVFP4")


@settings(max_examples=10 * SCALE, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                        HealthCheck.too_slow])
@given(which=st.sampled_from(["weight_global_scale", "input_global_scale", "weight_scale"]), value=SCALES,
       code=st.sampled_from([0x7F, 0xFF, 0xB8, 0x81]), layer=st.integers(0, 1))
def test_mutated_nvfp4_scales_are_refused_naming_tensor_and_layer(good_nvfp4, tmp_path_factory, which, value, code,
                                                                   layer):
    path = tmp_path_factory.mktemp("ckpt") / "c"
    shutil.copytree(good_nvfp4, path)
    name = f"model.layers.{layer}.self_attn.q_proj.{which}"
    if which == "weight_scale":      # E4M3 block scales: a NaN code or a negative one
        _edit_tensors(path, lambda s: s[name].view(torch.uint8).view(-1).__setitem__(3, code))
    elif not (value > 0 and math.isfinite(value)):
        _edit_tensors(path, lambda s: s[name].view(-1).__setitem__(0, value))
    else:
        return
    _CASES["checkpoints"] += 1
    with bounded(), pytest.raises(InputError) as info:
        oracle.hf.load_quantized(path, device="cpu")
    _CASES["checkpoints_refused"] += 1
    message = str(info.value)
    assert name in message and "model.safetensors" in message and f"layer model.layers.{layer}.self_attn.q_proj" \
        in message, message


def test_oracle_run_refuses_remote_code_in_one_line_without_a_prompt(good, tmp_path, capsys, monkeypatch):
    path = tmp_path / "c"
    shutil.copytree(good, path)
    _mutation("auto_map", None, path)
    monkeypatch.setattr("sys.stdin", io.StringIO("y\n"))      # a prompt would read this and run evil.py
    assert main(["run", "--model", str(path), "--prompt-ids", "1"]) == INPUT
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "auto_map" in err and "remote code ran" not in err, err


# ---------------------------------------------------------------- oracle run arguments
def _run(args: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), bounded(3 * 5.0):
        try:
            code = main(["run", *args])
        except SystemExit as exc:
            code = exc.code
    return code, out.getvalue(), err.getvalue()


@settings(max_examples=40 * SCALE, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                        HealthCheck.too_slow])
@given(device=st.sampled_from(["banana", "", "cuda:99", "cpu:0:1", "meta", "mps", "cuda", "CPU", *["cpu"] * 6]),
       ids=st.one_of(st.lists(st.integers(0, 300), min_size=1, max_size=4).map(lambda v: ",".join(map(str, v))),
                     st.sampled_from(["", ",", "1,x", "-1", "1e3", "99999999999999999999", "١"])),
       new=st.sampled_from(["0", "1", "2", "5000"]))
@example(device="cpu", ids="1,2", new="1")      # the edge that must pass: the last id of the vocabulary
@example(device="cpu", ids="255", new="2")
@example(device="cpu", ids="256", new="1")
def test_run_arguments_are_refused_cleanly(good, device, ids, new):
    code, out, err = _run(["--model", str(good), f"--device={device}", f"--prompt-ids={ids}",
                           "--max-new-tokens", new])
    _CASES["run_args"] += 1
    assert "Traceback" not in err and "internal error" not in err, err
    valid_ids = bool(ids) and all(t.isascii() and t.isdigit() and len(t) <= 12 for t in ids.split(",") if t) and \
        any(t for t in ids.split(","))
    in_vocab = valid_ids and max(int(t) for t in ids.split(",") if t) < tf.FP8_TINY["vocab_size"]
    ok_new, ok_device = new in ("1", "2"), device == "cpu"
    if ok_new and ok_device and in_vocab:
        assert code == OK and out.startswith("model"), err
        _CASES["run_ok"] += 1
        return
    _CASES["run_refused"] += 1
    assert out == "", "output printed before the refusal"
    if ok_new and ok_device and valid_ids:
        assert "outside the vocabulary (vocab_size 256: ids 0 to 255)" in err, err
    assert code == INPUT and err.startswith("error: ") and err.count("error:") == 1, (device, ids, new, err)
    field = "--max-new-tokens" if not ok_new else "--device" if not ok_device else "--prompt-ids"
    assert f"error: {field}: " in err or f": {field}: " in err, (field, err)   # checked in this order
