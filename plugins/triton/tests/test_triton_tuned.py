"""The tuned launch-configuration table (oracle_triton/tuned.py): the shipped file loads, buckets,
bad entries are named with the file and the field, and config_for uses an entry for the device it
names (the call then runs with it: checked against oracle-emulation in the interpreter)."""
from __future__ import annotations

import json

import pytest
import torch

from helpers import linear_pair, moe_pair, rel, routing
from oracle.errors import PolicyError
from oracle_triton import tuned

DEV = "cuda" if torch.cuda.is_available() else "cpu"
DEVICE = "NVIDIA H200"
MOE_CFG = {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 64, "num_warps": 4, "num_stages": 2, "FULL_TILE": 0}
DENSE_CFG = {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 64, "SPLIT_K": 2, "GROUP_M": 1, "FULL_TILE": 0,
             "num_warps": 4, "num_stages": 2}


def _write(tmp_path, entries, device=DEVICE):
    path = tmp_path / "tuned.json"
    path.write_text(json.dumps({"schema": 1, "devices": {device: entries}}))
    return path


@pytest.fixture
def table(tmp_path, monkeypatch):
    """Point the loader at a temporary table (and forget cached reads around the test)."""
    def use(entries):
        path = _write(tmp_path, entries)
        monkeypatch.setattr(tuned, "TABLE", path)
        tuned.load.cache_clear()
        return path
    yield use
    tuned.load.cache_clear()


def test_the_shipped_table_loads():
    tuned.load.cache_clear()
    assert isinstance(tuned.load(tuned.TABLE), dict)


def test_buckets():
    assert [tuned.bucket(m) for m in (1, 2, 3, 16, 17, 300, 4096, 10000)] == [1, 2, 4, 16, 32, 512, 4096, 4096]


def test_lookup_by_device_shape_and_bucket(table):
    table([{"kind": "moe", "mode": "w8a8_block", "weight": "fp8_block", "n": 1536, "k": 2048, "experts": 128,
            "m": 16, "config": MOE_CFG}])
    assert tuned.lookup(DEVICE, "moe", "w8a8_block", 1536, 2048, 9, 128) == MOE_CFG
    assert tuned.lookup(DEVICE, "moe", "w8a8_block", 1536, 2048, 17, 128) is None     # bucket 32
    assert tuned.lookup("NVIDIA H100", "moe", "w8a8_block", 1536, 2048, 9, 128) is None
    assert tuned.lookup(None, "moe", "w8a8_block", 1536, 2048, 9, 128) is None


SIBLING = "NVIDIA GH200 480GB"                  # not in the file: known by its traits only
HOPPER = ((9, 0), 132)
ENTRY = {"kind": "moe", "mode": "w8a8_block", "weight": "fp8_block", "n": 1536, "k": 2048, "experts": 128, "m": 16,
         "config": MOE_CFG}


def _siblings_table(tmp_path, monkeypatch, devices, traits):
    path = tmp_path / "tuned.json"
    path.write_text(json.dumps({"schema": 1, "traits": traits, "devices": devices}))
    monkeypatch.setattr(tuned, "TABLE", path)
    tuned.load.cache_clear()
    return path


def test_a_device_without_an_entry_takes_a_siblings(tmp_path, monkeypatch):
    """A device with no entry for a key takes the first device's of the same capability and SM count (the file's
    traits, in its order); its own entry first; other traits, or SIBLINGS off, the shape rules (None)."""
    other = dict(MOE_CFG, num_warps=8)
    _siblings_table(tmp_path, monkeypatch,
                    {DEVICE: [ENTRY], "NVIDIA H100 80GB HBM3": [dict(ENTRY, config=other), dict(ENTRY, m=32)]},
                    {DEVICE: {"capability": [9, 0], "sms": 132}, "NVIDIA H100 80GB HBM3": {"capability": [9, 0],
                                                                                          "sms": 132}})
    try:
        args = ("moe", "w8a8_block", 1536, 2048, 9, 128)
        assert tuned.find(SIBLING, *args, traits=HOPPER) == (MOE_CFG, DEVICE)          # the file's first sibling
        assert tuned.find("NVIDIA H100 80GB HBM3", *args, traits=HOPPER) == (other, "NVIDIA H100 80GB HBM3")
        assert tuned.find(DEVICE, "moe", "w8a8_block", 1536, 2048, 17, 128, traits=HOPPER) == \
            (dict(MOE_CFG, num_warps=4), "NVIDIA H100 80GB HBM3")                      # bucket 32: the H100's
        assert tuned.lookup(SIBLING, *args, traits=((9, 0), 114)) is None               # an H100 PCIe's SM count
        assert tuned.lookup(SIBLING, *args, traits=((10, 0), 132)) is None
        assert tuned.lookup(SIBLING, *args) is None                                     # traits unknown
        monkeypatch.setattr(tuned, "SIBLINGS", False)
        assert tuned.lookup(SIBLING, *args, traits=HOPPER) is None
        assert tuned.lookup(DEVICE, *args, traits=HOPPER) == MOE_CFG
    finally:
        tuned.load.cache_clear()


@pytest.mark.parametrize("traits,field", [
    ([1], "traits"), ({DEVICE: {"capability": [9], "sms": 132}}, "traits.NVIDIA H200.capability"),
    ({DEVICE: {"capability": [9, 0], "sms": 0}}, "traits.NVIDIA H200.sms"),
    ({DEVICE: {"capability": [9, 0], "sms": True}}, "traits.NVIDIA H200.sms"), ({DEVICE: 132}, "capability"),
])
def test_bad_traits_name_the_file_and_the_field(tmp_path, traits, field):
    path = tmp_path / "tuned.json"
    path.write_text(json.dumps({"schema": 1, "traits": traits, "devices": {DEVICE: [ENTRY]}}))
    with pytest.raises(PolicyError) as err:
        tuned.parse(json.loads(path.read_text()), path)
    assert str(path) in str(err.value) and field in str(err.value)


def test_config_for_asks_with_the_devices_traits(tmp_path, monkeypatch):
    """TritonMoE.config_for and DenseGemm.config_for pass the device's capability and SM count: a device the
    table does not name runs its sibling's entry; one of other traits the shape rules."""
    from oracle_triton.launch import device_traits

    e, h, i, k = 8, 256, 128, 2
    kn = {**DENSE_CFG, "BLOCK_K": 128, "KN": 1}       # the word layout W4A16 E2M1 takes (as above)
    dense = {"kind": "dense", "mode": "w4a16_mx", "weight": "mxfp4", "n": 256, "k": 512, "m": 4, "config": kn}
    _siblings_table(tmp_path, monkeypatch, {DEVICE: [dict(ENTRY, n=2 * i, k=h, experts=e, m=8), dense]},
                    {DEVICE: {"capability": [9, 0], "sms": 132}})
    try:
        t, _ = moe_pair("fp8_block", e, h, i, k, "w8a8_block", "fp8", {"activation_granularity": "group"},
                        device=DEV)
        lin, _ = linear_pair("mxfp4", 256, 512, "w4a16_mx", "bf16", device=DEV)
        for sms, want in ((132, True), (114, False)):
            t.facts = dict(t.facts, name=SIBLING, cc=(9, 0), sms=sms)
            lin.gemm.facts = dict(lin.gemm.facts, name=SIBLING, cc=(9, 0), sms=sms)
            assert device_traits(t.facts) == ((9, 0), sms)
            assert (t.config_for(5, k) == MOE_CFG) is want, sms
            assert (lin.gemm.config_for(3) == kn) is want, sms
        assert device_traits({"cc": None, "sms": 8}) is None          # the interpreter's facts
    finally:
        tuned.load.cache_clear()


def test_the_shipped_table_serves_an_h100_the_h200s_entries_where_it_has_none():
    """The shipped file: an H100 SXM (and a GH200, unnamed there) shares the H200's traits, so DeepSeek-R1's
    16-token FP8 entry reaches it, while its own entries (4096 tokens; DeepSeek-R1's one-token entry, R118) stay
    its own."""
    tuned.load.cache_clear()
    h100 = "NVIDIA H100 80GB HBM3"
    table = tuned.load(tuned.TABLE)
    assert table.traits[h100] == table.traits[DEVICE] == HOPPER
    sixteen = ("moe", "w8a8_block", 4096, 7168, 16, 256)
    assert tuned.find(h100, *sixteen, traits=HOPPER) == (tuned.lookup(DEVICE, *sixteen), DEVICE)
    assert tuned.find(SIBLING, *sixteen, traits=HOPPER)[1] == DEVICE
    for own in (("moe", "w4a4_nvfp4", 3072, 4096, 4096, 128), ("moe", "w8a8_block", 4096, 7168, 1, 256)):
        assert tuned.find(h100, *own, traits=HOPPER)[1] == h100
    one = tuned.lookup(h100, "moe", "w8a8_block", 4096, 7168, 1, 256)
    # R118: the H200's entry with K_PAIR 3 at 3 FC1 stages; R147: FC1's input rounded by the quantization launch (no
    # QUANT_PRO), FC1 a dependent launch of it (QPDL)
    h200_one = tuned.lookup(DEVICE, "moe", "w8a8_block", 4096, 7168, 1, 256)
    h200_one = {k: v for k, v in h200_one.items() if k != "QUANT_PRO"}
    assert one == dict(h200_one, K_PAIR=3, num_stages=3, QPDL=1)
    assert tuned.find(h100, *sixteen) == (None, None)              # no traits: its own entries only
    # R129: the H100's own DeepSeek-R1 entries at 256 and 4096 tokens; the H200 keeps its 256-token entry and,
    # having none at 4096, takes the H100's
    at = {m: ("moe", "w8a8_block", 4096, 7168, m, 256) for m in (256, 4096)}
    assert tuned.find(h100, *at[256], traits=HOPPER)[1] == h100
    assert tuned.find(DEVICE, *at[256], traits=HOPPER)[1] == DEVICE
    assert tuned.find(DEVICE, *at[4096], traits=HOPPER) == (tuned.lookup(h100, *at[4096]), h100)


@pytest.mark.parametrize("change,field", [
    ({"kind": "conv"}, "[0].kind"), ({"m": 3}, "[0].m"), ({"n": -1}, "[0].n"), ({"weight": "fp16"}, "[0].weight"),
    ({"config": {"BLOCK_M": 16}}, "[0].config"), ({"config": dict(MOE_CFG, BLOCK_K=96)}, "[0].config"),
    ({"config": dict(MOE_CFG, EXTRA=1)}, "[0].config"),
])
def test_bad_entries_name_the_file_and_the_field(tmp_path, change, field):
    good = {"kind": "moe", "mode": "w8a8_block", "weight": "fp8_block", "n": 1536, "k": 2048, "experts": 128,
            "m": 16, "config": MOE_CFG}
    path = _write(tmp_path, [dict(good, **change)])
    with pytest.raises(PolicyError) as err:
        tuned.parse(json.loads(path.read_text()), path)
    assert str(path) in str(err.value) and field in str(err.value)


def test_moe_swap_words_entries_load(table, tmp_path):
    """A MoE entry may name the word-decoding swap-AB path (SWAP, WORDS, JOIN, BLOCK_N1, SPLIT_K: what
    moe.swap_words_config returns); its K tile is checked like the dense swap kernel's."""
    from oracle_triton.moe import swap_words_config

    entry = {"kind": "moe", "mode": "w4a16_mx", "weight": "mxfp4", "n": 5760, "k": 2880, "experts": 32, "m": 16,
             "config": swap_words_config()}
    table([entry])
    assert tuned.lookup(DEVICE, "moe", "w4a16_mx", 5760, 2880, 12, 32) == swap_words_config()
    (tmp_path / "bad").mkdir()
    path = _write(tmp_path / "bad", [dict(entry, config=dict(swap_words_config(), BLOCK_K=64))])
    with pytest.raises(PolicyError, match="BLOCK_K=64"):
        tuned.parse(json.loads(path.read_text()), path)


def test_int4_entries_may_say_zero_points(table, tmp_path):
    """An INT4 entry with "zero_point" serves only experts with (true) or without (false) zero points, before
    an entry that does not say; the field is refused on other formats and when it is not a bool."""
    from oracle_triton.moe import moe_gemv_config, swap_words_config

    base = {"kind": "moe", "mode": "w4a16_int4", "weight": "int4", "n": 1536, "k": 2048, "experts": 128, "m": 16}
    direct = moe_gemv_config(16, 3, 128, words=True)
    table([dict(base, config=swap_words_config(), zero_point=True), dict(base, config=direct)])
    assert tuned.lookup(DEVICE, "moe", "w4a16_int4", 1536, 2048, 16, 128, zero_point=True) == swap_words_config()
    assert tuned.lookup(DEVICE, "moe", "w4a16_int4", 1536, 2048, 16, 128, zero_point=False) == direct
    assert tuned.lookup(DEVICE, "moe", "w4a16_int4", 1536, 2048, 16, 128) == direct
    table([dict(base, config=swap_words_config(), zero_point=True)])
    assert tuned.lookup(DEVICE, "moe", "w4a16_int4", 1536, 2048, 16, 128, zero_point=False) is None
    for bad in (dict(base, config=direct, zero_point=1),
                dict(base, mode="w4a16_mx", weight="mxfp4", config=swap_words_config(), zero_point=False)):
        (tmp_path / "bad").mkdir(exist_ok=True)
        path = _write(tmp_path / "bad", [bad])
        with pytest.raises(PolicyError, match=r"\[0\]\.zero_point"):
            tuned.parse(json.loads(path.read_text()), path)


def test_moe_config_for_asks_for_the_layers_zero_points(table):
    """TritonMoE.config_for looks INT4 experts up with whether they have zero points: the same shape gets the
    zero-point entry with them and the other entry without."""
    from oracle_triton.moe import moe_gemv_config, swap_words_config

    e, h, i, k = 8, 256, 128, 2
    base = {"kind": "moe", "mode": "w4a16_int4", "weight": "int4", "n": 2 * i, "k": h, "experts": e, "m": 16}
    direct = moe_gemv_config(16, 3, 128, words=True)
    table([dict(base, config=swap_words_config(), zero_point=True), dict(base, config=direct, zero_point=False)])
    for symmetric, want in ((False, swap_words_config()), (True, direct)):
        t, _ = moe_pair("int4", e, h, i, k, "w4a16_int4", "bf16", {}, device=DEV, group=128, symmetric=symmetric)
        t.facts = dict(t.facts, name=DEVICE)
        assert t.config_for(16, k) == want, symmetric


@pytest.mark.slow
def test_moe_config_for_uses_the_entry_and_the_call_runs_with_it(table):
    e, h, i, k = 8, 256, 128, 2
    t, ref = moe_pair("fp8_block", e, h, i, k, "w8a8_block", "fp8", {"activation_granularity": "group"}, device=DEV)
    table([{"kind": "moe", "mode": "w8a8_block", "weight": "fp8_block", "n": 2 * i, "k": h, "experts": e,
            "m": 8, "config": MOE_CFG}])
    t.facts = dict(t.facts, name=DEVICE)
    assert t.config_for(5, k) == MOE_CFG and t.config_for(9, k) != MOE_CFG
    x = torch.randn(5, h, dtype=torch.bfloat16, device=DEV)
    w, ids = routing(5, e, k, DEV)
    assert rel(t.apply(x, w, ids), ref.apply(x, w, ids)) < 5e-2


@pytest.mark.slow
@pytest.mark.parametrize("m", [256, 4096])
def test_the_h100s_deepseek_entries_run_against_the_emulation(m):
    """The shipped H100 entries for DeepSeek-R1's FP8 experts (R129: 16- and 64-row token blocks x 128 weight
    rows, 4 warps, 3 stages, column tiles first) on a small FP8 block layer whose experts get uneven pair
    counts (some past one block): against oracle-emulation, and a second call gives the same bits."""
    cfg = tuned.lookup("NVIDIA H100 80GB HBM3", "moe", "w8a8_block", 4096, 7168, m, 256)
    assert cfg is not None and cfg["N_FAST"] == 1 and cfg["BLOCK_N"] == 128
    e, h, i, k = 4, 256, 128, 2
    t, ref = moe_pair("fp8_block", e, h, i, k, "w8a8_block", "fp8", {"activation_granularity": "group"}, device=DEV)
    t.config = dict(cfg)
    tokens = 2 * cfg["BLOCK_M"] + 5
    x = torch.randn(tokens, h, dtype=torch.bfloat16, device=DEV)
    w, ids = routing(tokens, e, k, DEV)
    ids[: cfg["BLOCK_M"] + 3] = torch.tensor([1, 2], dtype=torch.int32)   # experts 1, 2: more than one block
    y = t.apply(x, w, ids)
    assert rel(y, ref.apply(x, w, ids)) < 5e-2
    assert torch.equal(t.apply(x, w, ids), y)


@pytest.mark.slow
def test_dense_config_for_uses_the_entry_and_the_call_runs_with_it(table):
    t, ref = linear_pair("mxfp4", 256, 512, "w4a16_mx", "bf16", device=DEV)
    # measured on the word layout W4A16 E2M1 takes (weights.repack_words); K tiles of 128 there: code by code the
    # dot takes K / 8 of them and needs 16 (formats.check_config)
    kn = {**DENSE_CFG, "BLOCK_K": 128, "KN": 1}
    table([{"kind": "dense", "mode": "w4a16_mx", "weight": "mxfp4", "n": 256, "k": 512, "m": 4, "config": kn},
           {"kind": "dense", "mode": "w4a16_mx", "weight": "mxfp4", "n": 256, "k": 512, "m": 8,
            "config": DENSE_CFG}])
    t.gemm.facts = dict(t.gemm.facts, name=DEVICE)
    assert t.gemm.config_for(3) == kn and t.gemm.config_for(1)["DECODE"] is not None
    assert t.gemm.config_for(7) != DENSE_CFG        # an entry of the checkpoint layout does not serve the words'
    x = torch.randn(3, 512, dtype=torch.bfloat16, device=DEV)
    assert rel(t.apply(x), ref.apply(x)) < 1e-2


@pytest.mark.slow
def test_the_sweep_writes_entries_the_loader_accepts(tmp_path):
    """bench/sweep_large_m.py --write-table: winners merged per key (the newer wins) and validated by
    the plugin's own loader before the file is written."""
    import sys
    from pathlib import Path

    bench = Path(__file__).resolve().parents[3] / "bench"
    sys.path.insert(0, str(bench))
    try:
        from sweep_large_m import write_table
    finally:
        sys.path.remove(str(bench))
    path = tmp_path / "tuned.json"
    entry = {"kind": "moe", "mode": "w8a8_block", "weight": "fp8_block", "n": 1536, "k": 2048, "experts": 128,
             "m": 16, "config": MOE_CFG, "us": 10.0, "default_us": 12.0}
    write_table(str(path), DEVICE, [entry])
    write_table(str(path), DEVICE, [dict(entry, config=dict(MOE_CFG, num_warps=8), us=9.0)],
                {"capability": [9, 0], "sms": 132})
    parsed = tuned.parse(json.loads(path.read_text()), path)
    assert parsed[DEVICE] == {("moe", "w8a8_block", 1536, 2048, 128, 16, None): dict(MOE_CFG, num_warps=8)}
    assert parsed.traits == {DEVICE: ((9, 0), 132)}                         # the writing device's siblings
    with pytest.raises(PolicyError):
        write_table(str(path), DEVICE, [dict(entry, m=3)])
    assert tuned.parse(json.loads(path.read_text()), path)[DEVICE]          # a bad entry never reaches the file


def test_a_runs_json_files_its_winners_under_the_device_it_names(tmp_path):
    """sweep_dense.py / sweep_fp4_words.py --from-json RUN.json --write-table: the rows' winners go under the device
    the file names with its traits (siblings then find them); --device-name another device: no traits taken from
    the file; a file from before they named one: the H200 (which measured them)."""
    import sys
    from pathlib import Path

    bench = Path(__file__).resolve().parents[3] / "bench"
    sys.path.insert(0, str(bench))
    try:
        from sweep_large_m import table_from_json
    finally:
        sys.path.remove(str(bench))
    entry = dict(ENTRY, us=9.0)
    run = tmp_path / "run.json"
    run.write_text(json.dumps({"copy_bandwidth": 3.3e12, "device": "NVIDIA GH200 480GB",
                               "traits": {"capability": [9, 0], "sms": 132}, "rows": [entry]}))
    table = tmp_path / "tuned.json"
    table_from_json(str(run), str(table), None, lambda rows: rows)
    parsed = tuned.parse(json.loads(table.read_text()), table)
    assert list(parsed) == ["NVIDIA GH200 480GB"] and parsed.traits == {"NVIDIA GH200 480GB": HOPPER}
    table_from_json(str(run), str(table), "NVIDIA H100 80GB HBM3", lambda rows: rows)
    parsed = tuned.parse(json.loads(table.read_text()), table)
    assert "NVIDIA H100 80GB HBM3" in parsed and "NVIDIA H100 80GB HBM3" not in parsed.traits
    run.write_text(json.dumps({"copy_bandwidth": 4.1e12, "rows": [entry]}))
    table_from_json(str(run), str(table), None, lambda rows: rows)
    assert DEVICE in tuned.parse(json.loads(table.read_text()), table)


SWAP_CFG = {"SWAP": 1, "BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 128, "SPLIT_K": 2, "DECODE": 0, "num_warps": 4,
            "num_stages": 1}
GEMV_CFG = {"BLOCK_N": 32, "BLOCK_K": 256, "SPLIT_K": 2, "DECODE": 0, "num_warps": 4, "num_stages": 2}


@pytest.mark.parametrize("weight,mode,config,m,field", [
    ("int4", "w4a16_int4", GEMV_CFG, 16, "[0].m"),                                   # a GEMV serves one row
    ("fp8_block", "w8a8_block", dict(SWAP_CFG, BLOCK_K=128), 16, "[0].config"),       # block scales: no FP8 swap
    ("mxfp4", "w4a16_mx", dict(SWAP_CFG, BLOCK_K=64), 16, "[0].config"),              # E2M1 swap tiles of 128s
    ("int4", "w4a16_int4", dict(SWAP_CFG, BLOCK_M=8), 16, "[0].config"),
    ("int4", "w4a16_int4", {k: v for k, v in SWAP_CFG.items() if k != "SPLIT_K"}, 16, "[0].config"),
])
def test_bad_gemv_and_swap_entries_are_refused_at_load(tmp_path, weight, mode, config, m, field):
    path = _write(tmp_path, [{"kind": "dense", "mode": mode, "weight": weight, "n": 256, "k": 512, "m": m,
                              "config": config}])
    with pytest.raises(PolicyError) as err:
        tuned.parse(json.loads(path.read_text()), path)
    assert str(path) in str(err.value) and field in str(err.value)


@pytest.mark.slow
def test_gemv_and_swap_entries_are_used_and_the_calls_run_with_them(table):
    """A tuned GEMV entry serves M = 1 and a swap entry M = 5 (bucket 8); both calls agree with the
    reference; an INT4 layer with 64-wide groups ignores the swap entry (the swap kernel needs 128)."""
    t, ref = linear_pair("int4", 256, 512, "w4a16_int4", "bf16", device=DEV)
    table([{"kind": "dense", "mode": "w4a16_int4", "weight": "int4", "n": 256, "k": 512, "m": 1, "config": GEMV_CFG},
           {"kind": "dense", "mode": "w4a16_int4", "weight": "int4", "n": 256, "k": 512, "m": 8, "config": SWAP_CFG}])
    t.gemm.facts = dict(t.gemm.facts, name=DEVICE)
    assert t.gemm.config_for(1) == GEMV_CFG and t.gemm.config_for(5) == SWAP_CFG
    for m in (1, 5):
        x = torch.randn(m, 512, dtype=torch.bfloat16, device=DEV)
        assert rel(t.apply(x), ref.apply(x)) < 1e-2
    t64, _ = linear_pair("int4", 256, 512, "w4a16_int4", "bf16", device=DEV, group=64)
    t64.gemm.facts = dict(t64.gemm.facts, name=DEVICE)
    assert "SWAP" not in t64.gemm.config_for(5)


def test_scaled_mm_entries_only_for_per_channel_fp8(tmp_path):
    entry = {"kind": "dense", "mode": "w8a8_fp8_channel", "weight": "fp8_channel", "n": 256, "k": 512, "m": 256,
             "config": {"SCALED_MM": 1}}
    path = _write(tmp_path, [entry])
    assert tuned.parse(json.loads(path.read_text()), path)[DEVICE]
    path = _write(tmp_path, [dict(entry, mode="w8a8_block", weight="fp8_block")])
    with pytest.raises(PolicyError) as err:
        tuned.parse(json.loads(path.read_text()), path)
    assert "[0].config" in str(err.value)


def test_fp8_swap_entries_with_pdl_or_l2_prefetch_load_and_run(table):
    """A few-row FP8 W8A8 entry may turn on the quantizer -> GEMM programmatic dependent launch (PDL)
    or the L2 prefetch (PF_L2): the entry loads, config_for returns it, and the call agrees with the
    reference (where the device lacks sm_90 the options are ignored: the same two launches)."""
    cfg = {"SWAP": 1, "BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 128, "SPLIT_K": 2, "num_warps": 4, "num_stages": 3}
    t, ref = linear_pair("fp8_channel", 256, 512, "w8a8_fp8_channel", "fp8", {"activation_granularity": "token"},
                         device=DEV)
    table([{"kind": "dense", "mode": "w8a8_fp8_channel", "weight": "fp8_channel", "n": 256, "k": 512, "m": 16,
            "config": {**cfg, "PDL": 1}},
           {"kind": "dense", "mode": "w8a8_fp8_channel", "weight": "fp8_channel", "n": 256, "k": 512, "m": 1,
            "config": {**cfg, "PF_L2": 1}}])
    t.gemm.facts = dict(t.gemm.facts, name=DEVICE)
    assert t.gemm.config_for(16, t.act) == {**cfg, "PDL": 1} and t.gemm.config_for(1, t.act) == {**cfg, "PF_L2": 1}
    for m in (1, 16):
        x = torch.randn(m, 512, dtype=torch.bfloat16, device=DEV)
        assert rel(t.apply(x), ref.apply(x)) < 1e-2


WG_CFG = {"WG": 1, "BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "SPLIT_K": 2, "GROUP_M": 8, "num_warps": 8,
          "num_stages": 3}


def test_wgmma_entries_load_and_serve_word_layouts_on_devices_with_the_ptx_decoders(table, tmp_path):
    """A many-row 4-bit wgmma entry (WG: w4_wgmma) loads for INT4 and for E2M1 in the word layout (KN 1);
    config_for returns it where the device has the PTX word decoders (capability >= 8.9) and the layer
    reads words, and falls back to the rules elsewhere (and for INT4 groups narrower than its K tile); a WG entry without its split, on FP8 weights,
    on E2M1's checkpoint layout or with an INT4 K tile wider than the group is refused at load."""
    t, _ = linear_pair("int4", 256, 512, "w4a16_int4", "bf16", device=DEV)
    table([{"kind": "dense", "mode": "w4a16_int4", "weight": "int4", "n": 256, "k": 512, "m": 256, "config": WG_CFG},
           {"kind": "dense", "mode": "w4a16_mx", "weight": "mxfp4", "n": 256, "k": 512, "m": 256,
            "config": {**WG_CFG, "KN": 1}}])
    t.gemm.facts = dict(t.gemm.facts, name=DEVICE, hw_fp8=True)
    assert t.gemm.config_for(200) == WG_CFG
    t.gemm.facts = dict(t.gemm.facts, hw_fp8=False)
    assert "WG" not in t.gemm.config_for(200)
    t32, _ = linear_pair("int4", 256, 512, "w4a16_int4", "bf16", device=DEV, group=32)    # K tile 64 > group
    t32.gemm.facts = dict(t32.gemm.facts, name=DEVICE, hw_fp8=True)
    assert "WG" not in t32.gemm.config_for(200)
    for weight, mode, cfg in (("int4", "w4a16_int4", {k: v for k, v in WG_CFG.items() if k != "SPLIT_K"}),
                              ("fp8_channel", "w8a16_fp8_channel", WG_CFG), ("mxfp4", "w4a16_mx", WG_CFG),
                              ("int4", "w4a16_int4", {**WG_CFG, "BLOCK_K": 256})):
        path = _write(tmp_path, [{"kind": "dense", "mode": mode, "weight": weight, "n": 256, "k": 512, "m": 256,
                                  "config": cfg}])
        with pytest.raises(PolicyError) as err:
            tuned.parse(json.loads(path.read_text()), path)
        assert "[0].config" in str(err.value), (weight, cfg)


REGA_CFG = {"REGA": 1, "SPLIT_K": 4, "XT": 4, "PF": 2, "num_warps": 8}


def test_rega_entries_load_and_serve_only_where_the_register_a_kernel_runs(table, tmp_path):
    """A few-row register-A entry (REGA: w4_rega, Gluon, sm_90 only) loads for INT4 and for E2M1 words (KN 1);
    config_for never returns it where the kernel cannot run (no sm_90 GPU: the interpreter, the CPU), so the
    call keeps the shape rules' kernel; entries without XT, with 2 warps, or on E2M1's checkpoint layout
    are refused at load."""
    t, ref = linear_pair("int4", 256, 512, "w4a16_int4", "bf16", device=DEV)
    table([{"kind": "dense", "mode": "w4a16_int4", "weight": "int4", "n": 256, "k": 512, "m": 16, "config": REGA_CFG}])
    t.gemm.facts = dict(t.gemm.facts, name=DEVICE)
    assert t.gemm.rega_ok(0) == ("REGA" in t.gemm.config_for(16))
    if not t.gemm.rega_ok(0):
        x = torch.randn(16, 512, dtype=torch.bfloat16, device=DEV)
        assert rel(t.apply(x), ref.apply(x)) < 1e-2
    for weight, mode, cfg in (("int4", "w4a16_int4", {k: v for k, v in REGA_CFG.items() if k != "XT"}),
                              ("int4", "w4a16_int4", {**REGA_CFG, "num_warps": 2}), ("mxfp4", "w4a16_mx", REGA_CFG)):
        path = _write(tmp_path, [{"kind": "dense", "mode": mode, "weight": weight, "n": 256, "k": 512, "m": 16,
                                  "config": cfg}])
        with pytest.raises(PolicyError) as err:
            tuned.parse(json.loads(path.read_text()), path)
        assert "[0].config" in str(err.value), (weight, cfg)
    path = _write(tmp_path, [{"kind": "dense", "mode": "w4a16_mx", "weight": "mxfp4", "n": 256, "k": 512, "m": 16,
                              "config": {**REGA_CFG, "KN": 1}}])
    assert tuned.parse(json.loads(path.read_text()), path)


REGA_SWAP = {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 128, "DECODE": 0, "num_stages": 1, "SWAP_WARPS": 4}


def test_a_rega_entry_falls_back_to_the_swap_entry_it_carries(table, tmp_path):
    """A REGA entry may carry the swap entry it replaced (formats.rega_swap: its tiles and SWAP_WARPS, the split
    shared): where w4_rega cannot serve the layer (no sm_90 GPU here; on the H200, scales outside the fused
    decoder's range) config_for returns that swap config, not the shape rules', and a call whose activations
    or output are fp16 (w4_rega: bf16 only) runs it too (DenseGemm.rega_fallback); without one the rules'
    config serves, the same one rule_config gives. An entry carrying a swap fallback with a missing key, or
    one the swap kernel does not cover, is refused at load."""
    from oracle_triton.formats import rega_swap

    t, ref = linear_pair("int4", 256, 512, "w4a16_int4", "bf16", device=DEV)
    cfg = {**REGA_CFG, **REGA_SWAP}
    table([{"kind": "dense", "mode": "w4a16_int4", "weight": "int4", "n": 256, "k": 512, "m": 16, "config": cfg}])
    t.gemm.facts = dict(t.gemm.facts, name=DEVICE)
    swap = {"SWAP": 1, "BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 128, "DECODE": 0, "num_stages": 1, "SPLIT_K": 4,
            "num_warps": 4}
    assert rega_swap(cfg) == swap
    assert t.gemm.rega_fallback(cfg, 16, 0) == swap
    assert t.gemm.rega_fallback(REGA_CFG, 16, 0) == t.gemm.rule_config(16, 0) != swap
    if not t.gemm.rega_ok(0):
        assert t.gemm.config_for(16) == swap
        x = torch.randn(16, 512, dtype=torch.bfloat16, device=DEV)
        assert rel(t.apply(x), ref.apply(x)) < 1e-2
        assert rel(t.gemm(x, 0, None, torch.bfloat16, cfg), ref.apply(x)) < 1e-2      # the explicit REGA config
    for bad in ({k: v for k, v in cfg.items() if k != "DECODE"}, {**cfg, "BLOCK_M": 8}):
        path = _write(tmp_path, [{"kind": "dense", "mode": "w4a16_int4", "weight": "int4", "n": 256, "k": 512,
                                  "m": 16, "config": bad}])
        with pytest.raises(PolicyError) as err:
            tuned.parse(json.loads(path.read_text()), path)
        assert "[0].config" in str(err.value), bad


@pytest.mark.parametrize("mode,n,k,experts,zp,chunk,from_m", [
    ("w4a16_int4", 1536, 2048, 128, True, 512, 1025),     # Qwen3-30B INT4 with zero points: every expert at once
    ("w4a16_int4", 1536, 2048, 128, False, 512, 1025),    # symmetric
    ("w4a16_mx", 5760, 2880, 32, None, 512, 1025),        # gpt-oss-20b
    ("w4a16_mx", 5760, 2880, 128, None, 32, 2049),        # gpt-oss-120b: 32-block chunks (all experts: 4.2 GB)
    ("w4a4_nvfp4", 3072, 4096, 128, None, 32, 2049)])     # Qwen3-235B
def test_the_shipped_h200_table_decodes_4bit_experts_once_per_call_at_thousands_of_tokens(mode, n, k, experts, zp,
                                                                                          chunk, from_m):
    """The eleventh pass's entries (R27-R30): from `from_m` tokens (bucket 2048 or 4096) these MoEs take
    DEQUANT_MM with the chunking measured (since the twenty-fifth pass the fallback of a WS entry, below); below
    that, no DEQUANT_MM of its own (the rule, or a WS entry); on the H100 (R98a; Qwen3-235B's NVFP4 since R104b)
    the H200's WS entries at 4096 tokens, DEQUANT_MM their fallback; on a device the table does not name, no
    entry."""
    kw = {} if zp is None else {"zero_point": zp}
    tuned.load.cache_clear()
    cfg = tuned.lookup(DEVICE, "moe", mode, n, k, 4096, experts, **kw)
    assert cfg is not None and cfg["DEQUANT_MM"] == chunk
    assert tuned.lookup(DEVICE, "moe", mode, n, k, 10000, experts, **kw) == cfg
    assert tuned.lookup(DEVICE, "moe", mode, n, k, from_m, experts, **kw)["DEQUANT_MM"] == chunk
    below = tuned.lookup(DEVICE, "moe", mode, n, k, from_m - 1, experts, **kw) or {}
    assert "DEQUANT_MM" not in below or below["WS"] == 1    # gpt-oss-20b: a WS entry below, DEQUANT_MM its fallback
    h100 = tuned.lookup("NVIDIA H100 80GB HBM3", "moe", mode, n, k, 4096, experts, **kw)
    assert h100["WS"] == 1 and h100["WS_HALF"] in (1, 2) and h100["DEQUANT_MM"] == chunk
    # R106a / R106b (the thirty-first pass): a tail where an expert has about 256 or 512 pairs; 32 pairs since R135
    assert h100.get("WS_TAIL", 0) == (0 if experts == 128 and mode == "w4a16_mx" else 32)
    assert tuned.lookup("NVIDIA A100-SXM4-80GB", "moe", mode, n, k, 4096, experts, **kw) is None


@pytest.mark.parametrize("mode,n,k,experts,zp,chunk,ms,fused,pt,tail", [
    ("w4a16_mx", 5760, 2880, 32, None, 512, (257, 512, 513, 1024, 1025, 2048, 4096, 10000), True, 0, 2049),  # 20b
    ("w4a16_mx", 5760, 2880, 128, None, 32, (2049, 4096, 10000), True, 2, None),           # gpt-oss-120b
    ("w4a16_int4", 1536, 2048, 128, True, 512, (1025, 2048, 2049, 4096), True, 1, 2049),   # Qwen3-30B INT4 (silu)
    ("w4a16_int4", 1536, 2048, 128, False, 512, (1025, 2048, 2049, 4096), True, 1, 2049),
    ("w4a4_nvfp4", 3072, 4096, 128, None, 32, (2049, 4096, 10000), True, 2, 2049)])          # Qwen3-235B NVFP4
def test_the_shipped_h200_table_runs_4bit_experts_on_w4_ws_at_thousands_of_tokens(mode, n, k, experts, zp, chunk, ms,
                                                                                 fused, pt, tail):
    """The twenty-fifth pass's entries (R97a / R97x / R97b / R97c): from 1025 (gpt-oss-20b 257, gpt-oss-120b 2049)
    tokens these MoEs take WS (w4_ws, 256 pairs a block, 2 decode partitions, activations by TMA), valid for their
    experts' layout; the activation in FC1's epilogue (WS_ACT: gpt-oss's swigluoai; Qwen3's silu since R98a, the
    twenty-sixth pass's ACT_SILU); an expert's half-empty block multiplied on its first half (WS_HALF: R98a from
    1025 tokens, R100a on gpt-oss-20b's 512 / 1024 buckets, every WS entry now); the persistent grid (PT, the
    twenty-ninth pass: PT 1 on Qwen3-30B's INT4 experts, PT 2 on gpt-oss-120b's, R102a / R102b); the calls
    WS cannot serve run the previous entry's DEQUANT_MM keys, chunking included. Qwen3-235B's NVFP4 W4A4 experts
    on WS from 2049 tokens with PT 2 (the thirtieth pass, R104a; WS_ACT asked for, taken where the FC2 input's
    scale is static: moe_ws.fused_act). From 2049 tokens (`tail`; not gpt-oss-120b, about 128 pairs an expert)
    blocks of 256 + 64 pairs (WS_TAIL, the thirty-first pass, R106a / R106b on an H100; 256 + 32 since the fortieth,
    R133-R135 on an H100), with quarter blocks (WS_HALF 2) on Qwen3-30B's INT4 experts."""
    from oracle_triton.formats import check_config, layout_for
    from oracle_triton.moe_ws import ws_fallback

    kw = {} if zp is None else {"zero_point": zp}
    tuned.load.cache_clear()
    for m in ms:
        cfg = tuned.lookup(DEVICE, "moe", mode, n, k, m, experts, **kw)
        assert cfg["WS"] == 1 and cfg["BM"] == 256 and cfg["DP"] == 2 and cfg["XTMA"] == 1, m
        assert cfg.get("WS_ACT", 0) == int(fused)
        tailed = tail is not None and m >= tail
        assert cfg.get("WS_TAIL", 0) == (32 if tailed else 0), m
        assert cfg["WS_HALF"] == (2 if tailed and mode == "w4a16_int4" else 1), m
        assert cfg.get("PT", 0) == pt, m        # R102a / R102b: the persistent grid where it won
        assert ws_fallback(cfg) == {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_N1": 128, "BLOCK_K": 64, "num_warps": 8,
                                    "num_stages": 3, "DEQUANT_MM": chunk}
        fmt = {"w4a16_mx": "mxfp4", "w4a4_nvfp4": "nvfp4"}.get(mode, "int4")
        for lay in (layout_for(fmt, n, k, 128), layout_for(fmt, k, n // 2, 128)):   # FC1 and FC2
            check_config(cfg, lay)
    # where WS lost in R97b / R97c, no WS: gpt-oss-20b's SWAP 3 up to 256 tokens, gpt-oss-120b up to 2048 (the
    # rules won at 1100 / 1400), Qwen3-30B INT4 up to 1024 (the rules won at 520)
    assert tuned.lookup(DEVICE, "moe", "w4a16_mx", 5760, 2880, 256, 32)["SWAP"] == 3
    assert "WS" not in (tuned.lookup(DEVICE, "moe", "w4a16_mx", 5760, 2880, 2048, 128) or {})
    for zero in (True, False):
        assert "WS" not in (tuned.lookup(DEVICE, "moe", "w4a16_int4", 1536, 2048, 1024, 128, zero_point=zero) or {})


@pytest.mark.parametrize("n,k,experts,from_m", [(5760, 2880, 32, 1025), (5760, 2880, 128, 2049), (3072, 4096, 128, 2049),
                                                 (1536, 2048, 128, 1025)])
def test_the_shipped_h200_table_tunes_the_bf16_baseline_at_thousands_of_tokens(n, k, experts, from_m):
    """The sixteenth pass's BF16-mode entries (R48): the benchmarks' own BF16 MoE (mode bf16) takes the wide GEMM
    tiles the 4-bit DEQUANT_MM entries use, from `from_m` tokens, so the baseline is the strongest measured; the
    loader accepts bf16 entries, and the quantized entries of the same shapes stay their own."""
    tuned.load.cache_clear()
    cfg = tuned.lookup(DEVICE, "moe", "bf16", n, k, 4096, experts)
    assert cfg == {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_N1": 128, "BLOCK_K": 64, "num_warps": 8, "num_stages": 3}
    assert tuned.lookup(DEVICE, "moe", "bf16", n, k, from_m, experts)["BLOCK_N1"] == 128
    assert tuned.lookup(DEVICE, "moe", "bf16", n, k, from_m - 1, experts) is None
    assert "DEQUANT_MM" not in cfg


def test_the_bf16_mode_of_the_fused_moe_uses_its_entry(table):
    """A bf16 entry serves TritonMoE in its BF16 mode (the benchmarks' baseline) on the device it names, and the call
    runs with it, near a float reference (the interpreter on CPU)."""
    from oracle import MoELayer
    from oracle.catalog import Mode
    from oracle_triton.moe import TritonMoE

    e, h, i = 4, 64, 32
    table([{"kind": "moe", "mode": "bf16", "weight": "bf16", "n": 2 * i, "k": h, "experts": e, "m": 16,
            "config": MOE_CFG}])
    layer = MoELayer(name="m", num_experts=e, top_k=2, hidden_size=h, intermediate_size=i, weight_format="bf16")
    t = TritonMoE(layer, Mode(weight="bf16", activation="bf16", name="bf16"), None)
    w13 = torch.randn(e, 2 * i, h, dtype=torch.bfloat16, device=DEV) * 0.1
    w2 = torch.randn(e, h, i, dtype=torch.bfloat16, device=DEV) * 0.1
    t.process_weights(w13=w13, w2=w2)
    t.facts = {**t.facts, "name": DEVICE}
    assert t.config_for(9, 2) == MOE_CFG
    x = torch.randn(9, h, dtype=torch.bfloat16, device=DEV)
    topw, ids = routing(9, e, 2, DEV)
    want = torch.zeros(9, h)
    for r in range(9):
        for j in range(2):
            g, u = (w13[ids[r, j]].float() @ x[r].float()).chunk(2)
            want[r] += (topw[r, j].float() * (w2[ids[r, j]].float() @ (torch.nn.functional.silu(g) * u))).cpu()
    assert rel(t.apply(x, topw, ids).float().cpu(), want) < 2e-2
