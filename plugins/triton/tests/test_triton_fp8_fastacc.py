"""FASTACC 1 on FP8 W8A8 with scales constant along K: the float8 dot left to accumulate the whole K loop without
promotion (Triton's own sm_90 default, which gemlite's FP8 GEMM and vLLM's CUTLASS FP8FastAccum kernels run) on
the tiled GEMM, and torch._scaled_mm's `use_fast_accum` on SCALED_MM, the rules' choice from 256 rows
(launch.SCALED_MM_FAST_ACCUM); a tuned entry may carry it on those two paths. In Triton's CPU interpreter the dot
is fp32 either way: there it must match the emulation; on an sm_90 GPU it must match it on random data (same-sign
sums, where it loses most, are printed by bench/fastacc_error.py).

Tolerance as test_triton_dense.py: 1e-2 relative to the emulation (bf16 roundings of the reference).
"""
from __future__ import annotations

import json

import pytest
import torch

from helpers import fp8_tiles, linear_pair, rel
from oracle.errors import PolicyError

TOL = 1e-2
DEV = "cuda" if torch.cuda.is_available() else "cpu"



@pytest.mark.slow
def test_fastacc_matches_emulation_in_the_interpreter():
    """Partial M, N and K tiles, split-K 1 and 3, a bias: FASTACC 1 within 1e-2 of the emulation."""
    from oracle_triton.formats import check_config

    t, e = linear_pair("fp8_channel", 96, 352, "w8a8_fp8_channel", "fp8", {"activation_granularity": "token"},
                       bias=True, device=DEV)
    x = torch.randn(70, 352, dtype=torch.bfloat16, device=DEV) * 3
    for cfg in (fp8_tiles(64, 32, 1, FASTACC=1), fp8_tiles(32, 64, 3, FASTACC=1)):
        check_config(cfg, t.gemm.layout)
        assert rel(t.gemm(x, t.act, None, torch.bfloat16, cfg), e.apply(x)) < TOL, cfg


def test_fastacc_is_refused_off_its_paths():
    from oracle_triton.formats import check_config, layout_for

    channel = layout_for("fp8_channel", 256, 512)
    check_config(fp8_tiles(64, 64, 1, FASTACC=1), channel)
    check_config({"SCALED_MM": 1, "FASTACC": 1}, channel)
    for lay in (layout_for("fp8_block", 256, 512), layout_for("int4", 256, 512, 128)):
        with pytest.raises(ValueError, match="FASTACC=1"):
            check_config(fp8_tiles(64, 64, 1, FASTACC=1), lay)
    with pytest.raises(ValueError, match="without PROMO"):
        check_config(fp8_tiles(64, 64, 1, FASTACC=1, PROMO=1), channel)
    with pytest.raises(ValueError, match="FASTACC=2"):
        check_config(fp8_tiles(64, 64, 1, FASTACC=2), channel)
    with pytest.raises(ValueError, match="FASTACC=1"):     # a swap entry would drop it silently
        check_config(fp8_tiles(16, 64, 1, SWAP=1, FASTACC=1), channel)


def test_fastacc_and_promo_are_refused_with_activation_groups():
    """Scales per 1x128 activation group change along K: the kernel's per-tile branch would drop either option
    silently, so a call naming one with group codes is refused."""
    from oracle_triton.formats import ACT_GROUP

    t, _ = linear_pair("fp8_channel", 64, 256, "w8a8_fp8_channel", "fp8", {"activation_granularity": "token"},
                       device=DEV)
    x = torch.randn(4, 256, dtype=torch.bfloat16, device=DEV)
    for key in ("FASTACC", "PROMO"):
        with pytest.raises(ValueError, match="scales constant along K"):
            t.gemm(x, ACT_GROUP, None, torch.bfloat16, fp8_tiles(16, 32, 1, **{key: 1}))


def test_the_tuned_table_takes_fastacc_on_its_paths_only(tmp_path):
    """A table entry may carry FASTACC on the tiled GEMM or SCALED_MM (a measured choice, as the rules' SCALED_MM
    makes it); on a path that does not read it (the swap kernels) it is an error naming the file, the field and
    the key."""
    from oracle_triton import tuned

    def entry(cfg):
        return {"kind": "dense", "mode": "w8a8_fp8_channel", "weight": "fp8_channel", "n": 2048, "k": 4096,
                "m": 256, "config": cfg}

    for cfg in (fp8_tiles(64, 64, 1, FASTACC=1), {"SCALED_MM": 1, "FASTACC": 1}):
        parsed = tuned.parse({"schema": 1, "devices": {"NVIDIA H200": [entry(cfg)]}}, tmp_path / "ok.json")
        assert parsed is not None
    path = tmp_path / "tuned.json"
    swap = {"SWAP": 1, "BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 128, "SPLIT_K": 1, "num_warps": 4, "num_stages": 4,
            "FASTACC": 1}
    path.write_text(json.dumps({"schema": 1, "devices": {"NVIDIA H200": [entry(swap)]}}))
    with pytest.raises(PolicyError) as err:
        tuned.parse(json.loads(path.read_text()), path)
    assert str(path) in str(err.value) and "[0].config" in str(err.value) and "FASTACC" in str(err.value)


@pytest.mark.parametrize("fast,env", [(True, None), (False, None), (True, "promote"), (False, "fast")])
def test_the_rules_scaled_mm_sums_fast_where_the_switch_says(fast, env, monkeypatch):
    """From LIBRARY_MIN_ROWS rows on a float8 GPU the rules hand FP8 W8A8 per channel to torch._scaled_mm with
    use_fast_accum (launch.SCALED_MM_FAST_ACCUM, as vLLM's sm_90 CUTLASS FP8 kernels sum), and without it when the
    switch is off; ORACLE_TRITON_FP8_ACCUM (promote / fast) overrides the switch; fewer rows keep our kernels."""
    from oracle_triton import launch

    monkeypatch.setattr(launch, "SCALED_MM_FAST_ACCUM", fast)
    if env is None:
        monkeypatch.delenv(launch.ACCUM_ENV, raising=False)
    else:
        monkeypatch.setenv(launch.ACCUM_ENV, env)
    t, _ = linear_pair("fp8_channel", 2048, 4096, "w8a8_fp8_channel", "fp8", {"activation_granularity": "token"},
                       device=DEV)
    t.gemm.facts = {**t.gemm.facts, "fp8_dot": True, "hw_fp8": True, "dot_f32": False, "sms": 132}
    on = fast if env is None else env == "fast"
    assert t.gemm.rule_config(launch.LIBRARY_MIN_ROWS, t.act) == ({"SCALED_MM": 1, "FASTACC": 1} if on else
                                                                  {"SCALED_MM": 1})
    assert "SCALED_MM" not in t.gemm.rule_config(16, t.act)


def test_an_unknown_accumulation_setting_is_one_clear_error(monkeypatch):
    """ORACLE_TRITON_FP8_ACCUM other than fast / promote: an InputError (one line and exit 1 from `oracle run`)
    naming the variable, the value and both choices, not a silent default."""
    from oracle_triton import launch

    from oracle.errors import InputError

    monkeypatch.setenv(launch.ACCUM_ENV, "exact")
    with pytest.raises(InputError) as err:
        launch.scaled_mm_fast_accum()
    assert all(word in str(err.value) for word in ("ORACLE_TRITON_FP8_ACCUM", "'exact'", "'fast'", "'promote'"))


@pytest.mark.gpu
@pytest.mark.skipif(not (torch.cuda.is_available() and torch.cuda.get_device_capability() >= (8, 9)),
                    reason="the float8 dot needs sm_89+")
@pytest.mark.parametrize("cfg", [fp8_tiles(64, 64, 2, FASTACC=1), fp8_tiles(128, 256, 1, warps=8, FASTACC=1),
                                 {"SCALED_MM": 1, "FASTACC": 1}])
def test_fastacc_on_the_gpu_matches_emulation_and_replays(cfg):
    """256 rows of 2048x4096 on random data: within 1e-2 of the emulation and of the promoted product; the
    same bits on a second call and under CUDA-graph replay."""
    t, e = linear_pair("fp8_channel", 2048, 4096, "w8a8_fp8_channel", "fp8", {"activation_granularity": "token"},
                       device="cuda")
    x = torch.randn(256, 4096, dtype=torch.bfloat16, device="cuda")
    y = t.gemm(x, t.act, None, torch.bfloat16, cfg)
    base = {k: v for k, v in cfg.items() if k != "FASTACC"}
    assert rel(y, e.apply(x)) < TOL
    assert rel(y, t.gemm(x, t.act, None, torch.bfloat16, base)) < TOL
    assert torch.equal(t.gemm(x, t.act, None, torch.bfloat16, cfg), y)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        yg = t.gemm(x, t.act, None, torch.bfloat16, cfg)
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(yg, y)
