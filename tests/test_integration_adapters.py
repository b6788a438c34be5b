"""oracle.integration: engine facts -> layers, engine parameters -> kernel arguments, per-layer records.

Expected values are computed here by hand (dequantized weights, format names from oracle.formats),
not by the code under test.
"""
from __future__ import annotations

import json

import pytest
import torch

from oracle import InputError, LinearLayer, MoELayer
from oracle.integration import convert, records
from oracle.integration.layers import ActQuant, WeightQuant, activation, linear_layer, moe_layer, weight_format
from oracle.trace import Candidate, Decision

E4M3 = torch.float8_e4m3fn


@pytest.mark.parametrize("w, expected", [
    (WeightQuant("float8_e4m3", "tensor"), ("fp8_tensor", None, None)),
    (WeightQuant("float8_e4m3", "channel"), ("fp8_channel", None, None)),
    (WeightQuant("float8_e4m3", "block", block=(128, 128)), ("fp8_block", None, (128, 128))),
    (WeightQuant("float8_e4m3", "group", 32, scale="e8m0"), ("mxfp8", None, None)),
    (WeightQuant("fp4_e2m1", "group", 16, scale="e4m3"), ("nvfp4", None, None)),
    (WeightQuant("fp4_e2m1", "group", 32, scale="e8m0"), ("mxfp4", None, None)),
    (WeightQuant("int4", "group", 64, scale="fp16"), ("int4", 64, None)),
    (WeightQuant("uint4", "channel", scale="fp16", zero_point=True), ("int4", None, None)),
    (WeightQuant("bf16"), ("bf16", None, None)),
])
def test_weight_formats(w, expected):
    assert weight_format(w) == expected


@pytest.mark.parametrize("a, expected", [
    (None, (None, None)),
    (ActQuant("float8_e4m3", dynamic=False), ("fp8", "static_tensor")),
    (ActQuant("float8_e4m3", dynamic=True, granularity="token"), ("fp8", "dynamic_token")),
    (ActQuant("float8_e4m3", dynamic=True, granularity="group", group_size=128), ("fp8", "dynamic_group")),
    (ActQuant("float8_e4m3", dynamic=True, granularity="group", group_size=32, scale="e8m0"), ("mxfp8", None)),
    (ActQuant("fp4_e2m1", dynamic=True, granularity="group", group_size=16, scale="e4m3"), ("nvfp4", None)),
])
def test_activation_formats(a, expected):
    assert activation(a) == expected


@pytest.mark.parametrize("bad, words", [
    (WeightQuant("int8", "channel"), "no oracle weight format stores int8 weights with channel scales"),
    (WeightQuant("float8_e4m3", "group", 64), "float8_e4m3 weights with group scales (group 64, fp32)"),
])
def test_unknown_weight_descriptions_are_refused(bad, words):
    with pytest.raises(InputError, match=words.replace("(", r"\(").replace(")", r"\)")):
        weight_format(bad)


def test_static_fp8_activations_per_token_are_refused():
    with pytest.raises(InputError, match="static scales are per tensor"):
        activation(ActQuant("float8_e4m3", dynamic=False, granularity="token"))


def test_layers_carry_the_mapped_fields():
    lin = linear_layer("l", in_features=64, out_features=96, weight=WeightQuant("int4", "group", 32),
                       has_bias=True, dtype="float16")
    assert lin == LinearLayer(name="l", in_features=64, out_features=96, weight_format="int4", group_size=32,
                              has_bias=True, dtype="float16")
    moe = moe_layer("m", num_experts=4, top_k=2, hidden_size=64, intermediate_size=32,
                    weight=WeightQuant("float8_e4m3", "channel"), act=ActQuant("float8_e4m3", True, "token"))
    assert isinstance(moe, MoELayer) and moe.activation_scale == "dynamic_token"


# ---------------------------------------------------------------- parameters -> kernel arguments
def _fp8(w: torch.Tensor, scale: float) -> torch.Tensor:
    return (w / scale).to(E4M3)


def test_fused_fp8_tensor_parts_are_requantized_to_one_scale():
    """q/k/v with their own per-tensor scales, fused along N as an engine loads them."""
    torch.manual_seed(0)
    rows, k = [32, 16, 16], 64
    scales = [0.01, 0.02, 0.005]
    parts = [torch.randn(n, k) for n in rows]
    weight = torch.cat([_fp8(p, s) for p, s in zip(parts, scales)])
    layer = LinearLayer(name="qkv", in_features=k, out_features=sum(rows), weight_format="fp8_tensor",
                        activation_format="fp8", activation_scale="static_tensor")
    split = convert.split_parts({"weight": weight, "weight_scale": torch.tensor(scales),
                                 "input_scale": torch.tensor([0.1, 0.3, 0.2])}, rows,
                                per_part=("weight_scale", "input_scale"))
    args = convert.linear_arguments("compressed-tensors", layer, split, rows)
    assert float(args["weight_scale"]) == pytest.approx(max(scales))
    assert float(args["input_scale"]) == pytest.approx(0.3)
    want = torch.cat([_fp8(p, s).float() * s for p, s in zip(parts, scales)])
    got = args["weight"].float() * float(args["weight_scale"])
    # requantizing to the largest scale costs at most half an e4m3 step of the new scale (3 mantissa bits)
    assert torch.allclose(got, want, rtol=2 ** -3, atol=max(scales) * 2 ** -9)


def test_stacked_fp8_channel_experts_become_kernel_arguments():
    torch.manual_seed(1)
    e, h, i = 3, 32, 16
    w13 = torch.randn(e, 2 * i, h).to(E4M3)
    w2 = torch.randn(e, h, i).to(E4M3)
    s13, s2 = torch.rand(e, 2 * i, 1) + 0.5, torch.rand(e, h, 1) + 0.5
    layer = MoELayer(name="experts", num_experts=e, top_k=2, hidden_size=h, intermediate_size=i,
                     weight_format="fp8_channel", activation_format="fp8", activation_scale="dynamic_token")
    args = convert.moe_arguments("compressed-tensors", layer, {"weight": w13, "weight_scale": s13},
                                 {"weight": w2, "weight_scale": s2})
    assert torch.equal(args["w13"].view(torch.uint8), w13.view(torch.uint8))
    assert torch.equal(args["w2"].view(torch.uint8), w2.view(torch.uint8))
    assert torch.equal(args["w13_scale"], s13.reshape(e, 2 * i)) and torch.equal(args["w2_scale"], s2.reshape(e, h))


def test_per_shard_fp8_tensor_scales_of_experts():
    e, h, i = 2, 16, 8
    w13 = torch.ones(e, 2 * i, h).to(E4M3)
    layer = MoELayer(name="experts", num_experts=e, top_k=1, hidden_size=h, intermediate_size=i,
                     weight_format="fp8_tensor", activation_format="fp8", activation_scale="dynamic_tensor")
    args = convert.moe_arguments("compressed-tensors", layer,
                                 {"weight": w13, "weight_scale": torch.tensor([[1.0, 2.0], [4.0, 4.0]])},
                                 {"weight": torch.ones(e, h, i).to(E4M3), "weight_scale": torch.tensor([3.0, 5.0])},
                                 per_shard=("weight_scale",))
    # expert 0: gate (ones at scale 1) and up (ones at scale 2) -> one scale 2, the gate's codes halved;
    # the dequantized values stay 1 (gate) and 2 (up); expert 1 keeps 4 everywhere
    deq = args["w13"].float() * args["w13_scale"].reshape(e, 1, 1)
    want = torch.ones(e, 2 * i, h)
    want[0, i:] = 2.0
    want[1] = 4.0
    assert torch.equal(deq, want) and args["w13_scale"].reshape(-1).tolist() == [2.0, 4.0]
    assert args["w2_scale"].reshape(-1).tolist() == [3.0, 5.0]


def test_parameters_that_do_not_fit_the_layout_name_the_tensor():
    layer = LinearLayer(name="o_proj", in_features=64, out_features=32, weight_format="fp8_channel",
                        activation_format="fp8", activation_scale="dynamic_token")
    parts = convert.split_parts({"weight": torch.zeros(32, 48).to(E4M3), "weight_scale": torch.ones(32, 1)}, [32])
    with pytest.raises(InputError, match=r"o_proj\.weight: expected shape \[32, 64\]"):
        convert.linear_arguments("compressed-tensors", layer, parts, [32])


def test_permuted_act_order_groups_are_refused():
    k, g = 256, 64
    convert.refuse_act_order({"weight_g_idx": torch.arange(k) // g}, k, g, "down_proj")      # K order: fine
    convert.refuse_act_order({"weight_g_idx": (torch.arange(k) // g).expand(3, k)}, k, g, "experts.w2")
    with pytest.raises(InputError, match=r"down_proj\.weight_g_idx: act-order groups"):
        convert.refuse_act_order({"weight_g_idx": (torch.arange(k) // g).flip(0)}, k, g, "down_proj")


# ---------------------------------------------------------------- records
def _decision() -> Decision:
    rejected = Candidate("triton", "triton.linear.w4", None, None, "rejected", "platform", "needs CUDA",
                         "plugins/triton/oracle_triton/kernels.yaml:26")
    return Decision(status="selected", op="linear", weight_format="int4", backend="emulation",
                    kernel="emulation.linear", mode="w4a16_int4", activation_format="bf16",
                    candidates=(rejected,), selected_by="policy")


def test_records_round_trip_through_an_engine_log(tmp_path):
    layer = LinearLayer(name="model.layers.0.mlp.down_proj", in_features=256, out_features=128,
                        weight_format="int4", group_size=128)
    one = records.layer_record(engine="vllm", mode="shadow", layer=layer, decision=_decision(),
                               engine_kernel="CPUWNA16LinearKernel", engine_backend=None, runs="engine")
    assert one["agree"] == "differ" and one["rejected"][0]["rule"].endswith("kernels.yaml:26")
    two = records.layer_record(engine="vllm", mode="shadow", layer=layer.model_copy(update={"name": "b"}),
                               decision=_decision(), engine_kernel="X", engine_backend="emulation", runs="engine")
    assert two["agree"] == "agree"
    none = records.layer_record(engine="vllm", mode="enforce", layer=layer, decision=_decision(),
                                engine_kernel=None, engine_backend=None, runs="oracle")
    assert none["agree"] == "engine_has_none"
    summary = records.summary_record([one, two, none], engine="vllm", mode="shadow")
    assert summary["agree"] == {"agree": 1, "differ": 1, "engine_has_none": 1} and summary["layers"] == 3
    log = tmp_path / "vllm.log"
    log.write_text("INFO 12-01 16:10:43 [core.py:133] Initializing\n"
                   + "".join(f"(MainProcess pid=1) INFO 12-01 [runtime.py:59] {records.dumps(r)}\n"
                             for r in (one, two, none, summary))
                   + '{"kernel_oracle": broken json\n')
    found = records.read_records(log)
    assert [r["kernel_oracle"] for r in found] == ["layer", "layer", "layer", "summary"]
    table = records.render_table(found, rejected=True)
    assert "model.layers.0.mlp.down_proj  linear  int4/a16  CPUWNA16LinearKernel  emulation.linear [w4a16_int4]" \
        in table
    assert "    - triton.linear.w4: needs CUDA (plugins/triton/oracle_triton/kernels.yaml:26)" in table
    assert table.splitlines()[-1] == ("summary (vllm, mode shadow): 3 layers; agree 1, differ 1, engine_has_none 1; "
                                      "runs: engine 2, oracle 1")
    assert json.loads(records.dumps(one)) == one


def test_reading_a_log_without_records_is_one_clear_error(tmp_path):
    empty = tmp_path / "plain.log"
    empty.write_text("INFO nothing here\n")
    with pytest.raises(InputError, match="no kernel-oracle records found"):
        records.read_records(empty)
    with pytest.raises(InputError, match="cannot read the engine log"):
        records.read_records(tmp_path / "absent.log")
