"""oracle-vllm without an engine start (run by the vLLM overlay python: scripts/vllm-overlay).

    .venv-vllm/bin/python -m pytest -q plugins/vllm/tests/test_units.py

Expected oracle formats are written out by hand from vLLM's QuantKey definitions
(model_executor/layers/quantization/utils/quant_utils.py) and oracle's format table.
"""
from __future__ import annotations

import json
import logging
import os
import pickle
import subprocess
import sys
from types import SimpleNamespace

import pytest

if os.environ.get("CI") == "true":        # in CI this file runs under the vLLM overlay and must not skip
    import vllm  # noqa: F401
vllm = pytest.importorskip("vllm", reason="run by the vLLM overlay python (scripts/vllm-overlay)")
from vllm.model_executor.layers.quantization.utils import quant_utils as qu  # noqa: E402
from vllm.scalar_type import scalar_types  # noqa: E402

from oracle import KernelConfig, LinearLayer, MoELayer, Platform  # noqa: E402
from oracle.integration.layers import activation, weight_format  # noqa: E402
from oracle_vllm import config as cfg, mapping, plugin, runtime  # noqa: E402

# name in quant_utils -> (weight format, group_size, weight_block) for weights
WEIGHTS = {
    "kFp8StaticTensorSym": ("fp8_tensor", None, None),
    "kFp8StaticChannelSym": ("fp8_channel", None, None),
    "kFp8Static128BlockSym": ("fp8_block", None, (128, 128)),
    "kFp8Static128BlockE8M0Sym": ("fp8_block", None, (128, 128)),
    "kMxfp8Static": ("mxfp8", None, None),
    "kNvfp4Static": ("nvfp4", None, None),
    "kMxfp4Static": ("mxfp4", None, None),
    "kInt4Static": ("int4", 128, None),          # the group comes from the scheme (GroupShape(1, -1) here)
    "kInt4Static32": ("int4", 32, None),
    "kInt4StaticAsym": ("int4", 128, None),
    "kInt4Static32Asym": ("int4", 32, None),
}
# name -> (activation_format, activation_scale)
ACTIVATIONS = {
    "kFp8StaticTensorSym": ("fp8", "static_tensor"),
    "kFp8DynamicTensorSym": ("fp8", "dynamic_tensor"),
    "kFp8DynamicTokenSym": ("fp8", "dynamic_token"),
    "kFp8Dynamic128Sym": ("fp8", "dynamic_group"),
    "kNvfp4Dynamic": ("nvfp4", None),
    "kMxfp8Dynamic": ("mxfp8", None),
}


def test_every_claimed_key_is_checked_here():
    assert set(WEIGHTS) == set(mapping.WEIGHT_KEYS)
    assert set(ACTIVATIONS) == set(mapping.ACTIVATION_KEYS)


@pytest.mark.parametrize("name", sorted(WEIGHTS))
def test_weight_keys_map_to_oracle_formats(name):
    key = getattr(qu, name)
    w = mapping.weight_quant(key, group_size=128)
    assert weight_format(w) == WEIGHTS[name]
    assert w.zero_point == name.endswith("Asym")


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_activation_keys_map_to_oracle_formats(name):
    assert activation(mapping.act_quant(getattr(qu, name))) == ACTIVATIONS[name]


def test_wna16_scalar_types():
    assert weight_format(mapping.scalar_weight_quant(scalar_types.uint4b8, 128)) == ("int4", 128, None)
    assert weight_format(mapping.scalar_weight_quant(scalar_types.uint4b8, -1)) == ("int4", None, None)
    assert mapping.scalar_weight_quant(scalar_types.uint4, 64, zero_points=True).zero_point
    assert activation(mapping.act_quant(None)) == (None, None)


def test_keys_build_valid_layers():
    """The mapped fields are accepted by LinearLayer/MoELayer's own validation (FP8 scale kinds and formats)."""
    from oracle.integration.layers import linear_layer, moe_layer
    lin = linear_layer("x", in_features=256, out_features=512, weight=mapping.weight_quant(qu.kFp8StaticTensorSym),
                       act=mapping.act_quant(qu.kFp8StaticTensorSym))
    assert isinstance(lin, LinearLayer) and lin.activation_scale == "static_tensor"
    moe = moe_layer("e", num_experts=4, top_k=2, hidden_size=128, intermediate_size=256,
                    weight=mapping.weight_quant(qu.kFp8Static128BlockSym), act=mapping.act_quant(qu.kFp8Dynamic128Sym))
    assert isinstance(moe, MoELayer) and moe.weight_block == (128, 128) and moe.activation_scale == "dynamic_group"


# ---------------------------------------------------------------- vLLM's flags and device
def test_vllm_backend_flags_map_to_kernel_config():
    flags = SimpleNamespace(linear_backend="b12x", moe_backend="b12x",
                            linear_backend_per_quant={"nvfp4_w4a4": "b12x", "fp8_w8a8": "cutlass"})
    linear, moe, notes = mapping.kernel_flags(flags)
    assert linear == {"default": "b12x", "nvfp4": "b12x", "fp8_tensor": "auto", "fp8_channel": "auto"}
    assert moe == "b12x" and any("cutlass" in n for n in notes)
    kc = cfg.OracleVllmConfig(mode="shadow").kernel_config(linear, moe)
    assert kc.backend_for("linear", "nvfp4") == "b12x" and kc.backend_for("linear", "fp8_tensor") == "auto"
    assert kc.backend_for("moe", "nvfp4") == "b12x"
    # the plugin's own setting wins over vLLM's flag
    assert cfg.OracleVllmConfig(mode="shadow", moe_backend="emulation").kernel_config(None, "b12x") \
        == KernelConfig(moe_backend="emulation")
    _, moe, notes = mapping.kernel_flags(SimpleNamespace(linear_backend="auto", moe_backend="marlin"))
    assert moe is None and notes == ["vLLM's --moe-backend marlin names no oracle backend; the oracle selects "
                                     "automatically"]


def test_vllm_kernel_classes_map_through_vllms_own_backend_table():
    from vllm.model_executor.kernels.linear import _LINEAR_BACKEND_KERNEL_MAP
    for cls in _LINEAR_BACKEND_KERNEL_MAP["b12x"]:
        assert mapping.linear_backend_of(cls) == "b12x"
    from vllm.model_executor.kernels.linear.mixed_precision.cpu import CPUWNA16LinearKernel
    assert mapping.linear_backend_of(CPUWNA16LinearKernel) is None


def test_device_comes_from_vllms_platform():
    assert mapping.platform_from_vllm() == Platform.cpu()
    assert mapping.platform_from_vllm("h200").preset_name == "h200"


# ---------------------------------------------------------------- settings
def test_default_is_off_and_off_builds_nothing(monkeypatch):
    assert cfg.parse({}, env={})[0].mode == "off"
    import vllm.config
    monkeypatch.setattr(vllm.config, "get_current_vllm_config_or_none",
                        lambda: SimpleNamespace(additional_config={}, kernel_config=None))
    monkeypatch.delenv(cfg.MODE_ENV, raising=False)
    assert runtime.current() is None


def test_environment_enforce_is_downgraded_to_shadow():
    config, warnings = cfg.parse({}, env={cfg.MODE_ENV: "enforce"})
    assert config.mode == "shadow" and "compile-cache key" in warnings[0]
    assert cfg.parse({"kernel_oracle": {"mode": "enforce"}}, env={cfg.MODE_ENV: "off"})[0].mode == "enforce"


@pytest.mark.parametrize("entry, expected", [
    ({"mode": "enforced"}, "mode: Input should be 'off', 'shadow' or 'enforce'"),
    ({"mode": "shadow", "colour": 1}, "colour: Extra inputs are not permitted"),
    ({"mode": "shadow", "linear_backend": {"fp9": "b12x"}}, "unknown weight format 'fp9'"),
    ({"mode": "enforce", "device": "h200"}, "device: a named device describes another machine"),
    ({"mode": "shadow", "ops": ["embedding"]}, "ops.0: Input should be 'linear' or 'moe'"),
    ("shadow", "expected a JSON object"),
])
def test_bad_settings_are_one_line(entry, expected):
    with pytest.raises(cfg.ConfigError) as err:
        cfg.parse({"kernel_oracle": entry}, env={})
    text = str(err.value)
    assert expected in text and "\n" not in text and text.startswith("--additional-config kernel_oracle: ")


# ---------------------------------------------------------------- register()
def test_register_never_raises(monkeypatch, caplog):
    import vllm.model_executor.layers.quantization as q

    def broken(name):
        raise RuntimeError("registry is closed\nsecond line")

    monkeypatch.setattr(q, "register_quantization_config", broken)
    monkeypatch.setattr(plugin, "_done", False)
    with caplog.at_level(logging.WARNING, logger="vllm.kernel_oracle"):
        assert plugin.register() is None
    assert "not installed in this process (RuntimeError: registry is closed); vLLM runs unchanged" in caplog.text
    assert plugin._done is False


def test_register_installs_the_config_under_vllms_name(monkeypatch):
    from vllm.model_executor.layers.quantization import get_quantization_config
    from vllm.model_executor.layers.quantization.compressed_tensors.compressed_tensors import CompressedTensorsConfig
    monkeypatch.setattr(plugin, "_done", False)
    plugin.register()
    plugin.register()                        # idempotent
    cls = get_quantization_config("compressed-tensors")
    assert issubclass(cls, CompressedTensorsConfig) and cls.__module__ == "oracle_vllm.quant_config"


# ---------------------------------------------------------------- pickling to a fresh process
W4A16 = {"quant_method": "compressed-tensors", "format": "pack-quantized", "quantization_status": "compressed",
         "ignore": ["lm_head"], "config_groups": {"group_0": {"targets": ["Linear"], "input_activations": None,
          "weights": {"num_bits": 4, "type": "int", "symmetric": True, "strategy": "group", "group_size": 128,
                      "dynamic": False, "actorder": None, "observer": "minmax"}}}}
_CHILD = """
import pickle, sys, json
obj = pickle.loads(sys.stdin.buffer.read())
import oracle_vllm.plugin as plugin
from vllm.model_executor.layers.quantization.compressed_tensors.compressed_tensors import CompressedTensorsConfig
print(json.dumps({"cls": type(obj).__module__ + "." + type(obj).__name__, "name": obj.get_name(),
                  "isinstance": isinstance(obj, CompressedTensorsConfig), "registered": plugin._done,
                  "targets": sorted(obj.target_scheme_map), "ignore": obj.ignore}))
"""


def test_replaced_config_pickles_into_a_fresh_process():
    from oracle_vllm.quant_config import OracleCompressedTensorsConfig
    obj = OracleCompressedTensorsConfig.from_config(W4A16)
    assert type(obj) is OracleCompressedTensorsConfig
    out = subprocess.run([sys.executable, "-c", _CHILD], input=pickle.dumps(obj), capture_output=True, timeout=300,
                         env={"VLLM_PLUGINS": "none", "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr.decode()[-2000:]
    got = json.loads(out.stdout.decode().strip().splitlines()[-1])
    assert got == {"cls": "oracle_vllm.quant_config.OracleCompressedTensorsConfig", "name": "compressed-tensors",
                   "isinstance": True, "registered": False, "targets": sorted(obj.target_scheme_map),
                   "ignore": ["lm_head"]}


# ---------------------------------------------------------------- enforce, a layer that cannot be converted
class _Run:
    def __init__(self, on_unconvertible):
        self.mode = "enforce"
        self.config = cfg.OracleVllmConfig(mode="enforce", on_unconvertible=on_unconvertible)
        self.records = []

    def takes(self, op):
        return op in self.config.ops

    def emit(self, record):
        self.records.append(record)


def _state(on_unconvertible):
    from oracle import select_backend
    from oracle_vllm.methods import LayerState
    st = LayerState(_Run(on_unconvertible), "linear", "model.layers.0.mlp.down_proj")
    st.layer = LinearLayer(name=st.name, in_features=256, out_features=128, weight_format="int4", group_size=128)
    st.decision = select_backend(st.layer, Platform.cpu())
    return st


def _misshaped():
    """vLLM parameters whose packed weight does not fit the layer (the adapter's own check refuses them)."""
    import torch
    from oracle.integration import convert
    st_layer = LinearLayer(name="model.layers.0.mlp.down_proj", in_features=256, out_features=128,
                           weight_format="int4", group_size=128)
    tensors = {"weight_packed": torch.zeros(128, 16, dtype=torch.int32), "weight_scale": torch.ones(128, 2)}
    return convert.linear_arguments("compressed-tensors", st_layer, [tensors], [128]), []


def test_unconvertible_parameters_keep_vllms_kernel_and_say_so():
    import torch
    st = _state("keep_vllm")
    assert st.decision.status == "selected"
    module = torch.nn.Module()
    assert st.take_over(module, _misshaped) is False and st.handle is None
    # the kernel selected for an int4 layer on this CPU (oracle-torch's int4_cpu where torch has it)
    assert st.note.startswith(f"cannot convert vLLM's parameters for {st.decision.kernel}: CheckpointError: ")
    assert "weight_packed: expected shape [128, 32]" in st.note and st.note.endswith(
        "vLLM's kernel kept (on_unconvertible: keep_vllm)")
    st.emit()
    assert st.run.records[0]["runs"] == "engine" and st.run.records[0]["note"] == st.note


def test_unconvertible_parameters_stop_with_one_line_when_asked():
    import torch
    from oracle_vllm.methods import LayerError
    st = _state("error")
    with pytest.raises(LayerError) as err:
        st.take_over(torch.nn.Module(), _misshaped)
    text = str(err.value)
    assert text.startswith("model.layers.0.mlp.down_proj: cannot convert vLLM's parameters") and "\n" not in text
