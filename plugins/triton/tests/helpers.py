"""Shared by the CPU (interpreter) and GPU tests: checkpoint tensors from oracle-emulation's
quantizers (an independent implementation of each format) and the emulation kernels as reference."""
from __future__ import annotations

import torch

from oracle import LinearLayer, MoELayer
from oracle.catalog import Mode
from oracle_emulation.formats import codec_for
from oracle_emulation.linear import EmulationLinear

#: Every (weight format, mode, activation format, mode params) the dense kernels serve, INT4 aside.
MODES = [
    ("fp8_tensor", "w8a16_fp8_tensor", "bf16", {}),
    ("fp8_channel", "w8a16_fp8_channel", "bf16", {}),
    ("fp8_block", "w8a16_block", "bf16", {}),
    ("fp8_tensor", "w8a8_fp8_tensor", "fp8", {"activation_granularity": "tensor"}),
    ("fp8_channel", "w8a8_fp8_channel", "fp8", {"activation_granularity": "token"}),
    ("fp8_block", "w8a8_block", "fp8", {"activation_granularity": "group"}),
    ("mxfp4", "w4a16_mx", "bf16", {}),
    ("nvfp4", "w4a16_nvfp4", "bf16", {}),
    ("nvfp4", "w4a4_nvfp4", "nvfp4", {}),
]


def quantize(fmt: str, w: torch.Tensor, group: int = 128, symmetric: bool = False) -> dict:
    codec = codec_for(fmt)
    if fmt == "int4":
        q = codec.quantize(w, fmt, group_size=group, symmetric=symmetric)
    else:
        q = codec.quantize(w, fmt)
    return {k: v for k, v in q.items() if v is not None}


def fp8_tiles(bm: int, bn: int, split: int, warps: int = 4, **extra: int) -> dict[str, int]:
    """A tiled-GEMM launch config for FP8 W8A8 (128-wide K tiles, 3 stages) with extra keys (PROMO, FASTACC...)."""
    return {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": 128, "SPLIT_K": split, "GROUP_M": 8, "FULL_TILE": 0,
            "num_warps": warps, "num_stages": 3, **extra}


def torch_fp8_codes(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """torch's saturating float8_e4m3fn cast of x / scale, as bytes: the independent reference of our quantizers."""
    return (x.float() / scale).clamp(-448.0, 448.0).to(torch.float8_e4m3fn).view(torch.uint8)


def torch_group_codes(x: torch.Tensor, group: int) -> tuple[torch.Tensor, torch.Tensor]:
    """torch's dynamic FP8 rounding of x [M, K] in groups of `group` values along K (K itself: per token): codes
    [M, K] (torch_fp8_codes) and scales [M, K / group], each amax / 448 (IEEE division), 1 for a zero group."""
    m, k = x.shape
    xg = x.float().view(m, k // group, group)
    amax = xg.abs().amax(-1)
    s = torch.where(amax > 0, amax / torch.full_like(amax, 448.0), torch.ones_like(amax))
    return torch_fp8_codes(xg, s[..., None]).view(m, k), s


def torch_token_codes(rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """torch_group_codes per token: codes [M, K] and scales [M]."""
    codes, s = torch_group_codes(rows, rows.shape[1])
    return codes, s.view(-1)


def fp8_hostile_rows(m: int, k: int, group: int, seed: int) -> torch.Tensor:
    """bf16 rows [M, K] (CPU) for the FP8 quantizers' bit checks, in groups of `group` values along K (K: per token):
    each group's scale 2**-70..2**70 (inside and outside dequant.scaled_quotients' range); a quarter of each group on
    E4M3's rounding ties (x / scale at a midpoint of two codes, then rounded to bf16: at or next to it), then the
    group's amax, -0 and +0; group 0 of row 5 all zero."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k // group, group, generator=g) * torch.exp2(
        torch.randint(-70, 71, (m, k // group, 1), generator=g).float())
    e4m3 = torch.arange(0, 126, dtype=torch.uint8).view(torch.float8_e4m3fn).float()
    q = group // 4
    amax = x.abs().amax(-1, keepdim=True)
    x[..., :q] = ((e4m3[:-1] + e4m3[1:]) / 2)[torch.randint(0, 125, (m, k // group, q), generator=g)] * amax / 448.0
    x[..., q], x[..., q + 1], x[..., q + 2] = amax[..., 0], -0.0, 0.0
    x[min(5, m - 1), 0] = 0.0
    return x.reshape(m, k).to(torch.bfloat16)


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-30))


def linear_pair(fmt: str, n: int, k: int, mode: str, act: str, params: dict | None = None, *,
                device="cpu", group=128, symmetric=False, bias=False, input_scale=None, kernel=None):
    """(triton kernel, emulation kernel), both holding the same checkpoint tensors (kernel: another
    implementation class than TritonLinear, e.g. a peer's)."""
    from oracle_triton.linear import TritonLinear

    layer = LinearLayer(name=f"{fmt}-{n}x{k}", in_features=k, out_features=n, weight_format=fmt,
                        group_size=group if fmt == "int4" else None, has_bias=bias)
    tensors = quantize(fmt, torch.randn(n, k, device=device) * 0.05, group, symmetric)
    if bias:
        tensors["bias"] = torch.randn(n, device=device)
    if input_scale is not None:
        tensors["input_scale"] = input_scale
    t = (kernel or TritonLinear)(layer, Mode(weight=fmt, activation=act, name=mode, params=params or {}), None)
    t.process_weights(**tensors)
    e = EmulationLinear(layer, t.mode, None)
    e.process_weights(**tensors)
    return t, e


def moe_pair(fmt: str, e: int, h: int, i: int, k: int, mode: str, act: str, params: dict | None = None, *,
             activation="silu", activation_params=None, bias=False, device="cpu", group=128,
             router_on_input=False, symmetric=True, ref_device=None, zero_expert=False, input_scales=None):
    """(triton MoE, emulation MoE) holding the same expert tensors (int4: zero points unless symmetric).
    ref_device: the emulation's tensors there instead (e.g. "cpu" beside a GPU kernel; its inputs go there too).
    zero_expert: the emulation gets one more expert, id e, whose weights and biases are zero (its block scales
    zero, global scales one): the reference for a pair the kernel drops (an out-of-range id), which the kernel
    treats so (a zero FC2 input row, nothing added), also where a dynamic per-tensor scale spans every pair.
    input_scales: (FC1's, FC2's) static per-tensor activation scales, as a checkpoint carries them (both get them)."""
    from oracle_emulation.moe import EmulationMoE
    from oracle_triton.moe import TritonMoE

    gated = activation not in ("relu2", "relu2_no_mul")
    rows = 2 * i if gated else i
    layer = MoELayer(name=f"moe-{fmt}", num_experts=e, top_k=k, hidden_size=h, intermediate_size=i,
                     weight_format=fmt, activation=activation, activation_params=activation_params or {},
                     has_bias=bias, group_size=group if fmt == "int4" else None,
                     apply_router_weight_on_input=router_on_input)
    q13 = quantize(fmt, torch.randn(e, rows, h, device=device) * 0.05, group, symmetric=symmetric)
    q2 = quantize(fmt, torch.randn(e, h, i, device=device) * 0.05, group, symmetric=symmetric)
    tensors = {"w13": q13["weight"], "w2": q2["weight"], "w13_scale": q13.get("weight_scale"),
               "w2_scale": q2.get("weight_scale"), "w13_global_scale": q13.get("weight_global_scale"),
               "w2_global_scale": q2.get("weight_global_scale"), "w13_zero_point": q13.get("weight_zero_point"),
               "w2_zero_point": q2.get("weight_zero_point")}
    if input_scales is not None:
        tensors["w13_input_scale"], tensors["w2_input_scale"] = (
            torch.tensor([v], dtype=torch.float32, device=device) for v in input_scales)
    if bias:
        tensors["w13_bias"] = torch.randn(e, rows, device=device) * 0.1
        tensors["w2_bias"] = torch.randn(e, h, device=device) * 0.1
    mode_obj = Mode(weight=fmt, activation=act, name=mode, params=params or {})
    t = TritonMoE(layer, mode_obj, None)
    t.process_weights(**tensors)
    ref_dev = ref_device or device
    ref_tensors = {n: (v.to(ref_dev) if v is not None else None) for n, v in tensors.items()}
    if zero_expert:
        layer = layer.model_copy(update={"num_experts": e + 1})
        pad = lambda n, v: torch.ones_like(v[:1]) if "global" in n else torch.zeros_like(v[:1])  # noqa: E731
        ref_tensors = {n: (torch.cat([v, pad(n, v)]) if v is not None and v.dim() and v.shape[0] == e else v)
                       for n, v in ref_tensors.items()}
    ref = EmulationMoE(layer, mode_obj, None)
    ref.process_weights(**ref_tensors)
    return t, ref


def routing(m: int, e: int, k: int, device="cpu"):
    ids = torch.stack([torch.randperm(e, device=device)[:k] for _ in range(m)]).to(torch.int32)
    w = torch.softmax(torch.randn(m, k, device=device), -1)
    return w, ids


def gpu_moe_pair(fmt: str, mode: str, act: str, h: int, i: int, activation: str, bias: bool, router_on_input: bool,
                 e: int = 8, k: int = 4, symmetric: bool = True, input_scales=None):
    """moe_pair on the GPU against the emulation on the CPU (zero_expert: the reference of a dropped id), top-k k
    (1 with the router weight on the input); INT4 with zero points unless symmetric."""
    return moe_pair(fmt, e, h, i, 1 if router_on_input else k, mode, act, {}, activation=activation, bias=bias,
                    device="cuda", router_on_input=router_on_input, ref_device="cpu", zero_expert=True,
                    symmetric=symmetric, input_scales=input_scales)


def configs_match_reference(t, reference, cfgs: list, h: int, k: int, ms, experts: int = 8, tol: float = 1e-2,
                            repeats: int = 1, same=None) -> None:
    """Each config of the GPU MoE t on m tokens (m in ms, a fresh routing over `experts`): within tol of
    reference(x, w, ids), the same bits on `repeats` more calls (the second call is recorded as a launch plan, the
    third replays one where the call allows it), and where same(cfg) names another config, the same bits from it."""
    for m in ms:
        x = torch.randn(m, h, dtype=torch.bfloat16, device="cuda")
        w, ids = routing(m, experts, k, "cuda")
        expect = reference(x, w, ids)
        for cfg in cfgs:
            t.config = cfg
            y = t.apply(x, w, ids)
            assert rel(y, expect) < tol, (m, cfg, rel(y, expect))
            for _ in range(repeats):
                assert torch.equal(y, t.apply(x, w, ids)), (m, cfg)
            other = same(cfg) if same is not None else None
            if other is not None:
                t.config = other
                assert torch.equal(t.apply(x, w, ids), y), (m, cfg, other)


def dropped_id_then_replay(t, reference, h: int, k: int, experts: int = 8, tol: float = 1e-2) -> None:
    """A GPU MoE t (moe_pair with zero_expert) on 37 tokens: an out-of-range id adds nothing (the reference's
    all-zero expert `experts` in its place), then the call captured and replayed (replay_moe), ids unchecked."""
    t.check_inputs = False
    x = torch.randn(37, h, dtype=torch.bfloat16, device="cuda")
    w, ids = routing(37, experts, k, "cuda")
    bad, on_zero = ids.clone(), ids.clone()
    bad[3, 0], on_zero[3, 0] = experts + 1, experts
    assert rel(t.apply(x, w, bad), reference(x, w, on_zero)) < tol
    replay_moe(t.apply, reference, x, w, ids, experts, tol, times=2)


def replay_moe(call, reference, x: torch.Tensor, w: torch.Tensor, ids: torch.Tensor, experts: int, tol: float,
               times: int = 3) -> None:
    """Capture call(x, w, ids) in a CUDA graph (after one call on a side stream, so compiles and one-time
    allocations happen outside the capture), then refill x, w and ids with new tokens and a new routing
    over `experts` and replay: each replay within tol of reference(x, w, ids) (relative) and bit for bit
    what an eager call computes (split reductions' counters back at zero)."""
    m, k = ids.shape
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        call(x, w, ids)
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = call(x, w, ids)
    for _ in range(times):
        x.copy_(torch.randn_like(x))
        nw, nids = routing(m, experts, k, x.device)
        w.copy_(nw)
        ids.copy_(nids)
        g.replay()
        torch.cuda.synchronize()
        err = rel(out, reference(x, w, ids))
        assert err < tol, err
        assert torch.equal(out, call(x, w, ids))


def sm90_declared_cases(group: str) -> int:
    """How many kernels sm90_compile.py's `group` (e.g. "small_batch_cases") declares: it prints one ok/FAIL
    line per kernel, so a test checks that every declared kernel was compiled, however many are added."""
    import sm90_compile

    return len(getattr(sm90_compile, group)())
