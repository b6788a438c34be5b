"""Fused MoE kernel class: up to five launches per forward (A16), no host synchronization under capture.

count -> align (expert blocks; one launch up to ALIGN_SMALL_PAIRS pairs) -> grouped GEMM w13 +
activation -> grouped GEMM w2 x router weight -> top-k sum. Expert weights stay packed; W8A8/W4A4
modes round each GEMM's input first (gemm.act_qdq_kernel) with oracle-emulation's rounding (per
token/group/tensor, or NVFP4; per-tensor dynamic scales come from one amax over the tensor); with
1x128 groups the one alignment launch rounds FC1's input and QUANT_OUT has FC1 round FC2's. Few
tokens take the direct, swap or CUDA-core paths below instead (config_for chooses).
"""
from __future__ import annotations

from typing import Any, Sequence

import torch

from oracle.errors import TensorError
from oracle.kernel import Kernel
from oracle.formats import E2M1_MAX, E4M3_MAX, GATED_ACTIVATIONS, INTERLEAVED_ACTIVATIONS, torch_dtype
from oracle.integration.eager_graphs import EagerGraphs
from oracle.tensors import check_scales, check_tensor, forbid, moe_activation_params

from . import fastlaunch
from .formats import ACT_CODES, ACT_GROUP, ACT_NONE, ACT_NVFP4, ACT_TENSOR, BF16, E2M1_MX, E2M1_NV, INT4, WS_BK
from .launch import (FP8_CODES, TENSOR_SCALE_MAX, check_config, device_facts, device_traits, interpreting,
                     quantize_activation_codes, quantize_activations, tensor_scale, tensor_scale_wide)
from .linear import dynamic_tensor_scale
from .moe_rega import mx_fused_ok, rega_layer_ok
from .weights import pack

#: Eager calls up to this many tokens take a launch plan (TritonMoE.planned; as EagerGraphs.MAX_ROWS)
PLAN_ROWS = 64
#: TritonMoE.planned's default. On since R27 of the eleventh pass (H200, bench/host_cost.py --moe, M=1): the
#: planned eager call is 3.9-18.7 us above graph replay on Qwen3-30B INT4 / INT4-zp / FP8, gpt-oss-120b and
#: DeepSeek-R1, against 13.5-61.0 us for the eager graph it replaces (the plans' GPU tests passed there)
PLANNED = True

#: Larger dynamic per-tensor activation scales from launch.tensor_scale_wide (one launch of many programs)
#: instead of torch's reduction (six or seven launches, ~45 us a call for qwen3-235b NVFP4 W4A4 at M=256 in
#: the ninth pass's R23 profile). On since R110 (thirty-fourth pass, H100, with launch.TENSOR_SCALE_BLOCK 8192):
#: Qwen3-235B's 4096-token FC1 input amax 28.5 -> 20.6 us (torch's reduction and its five element-wise launches
#: -> one), the same output bits; GPU-tested against linear.dynamic_tensor_scale (test_triton_moe_small.py)
TENSOR_SCALE_WIDE = True

#: Pairs up to which the alignment is one launch of a program per expert (each histograms every pair):
#: Qwen3-30B / DeepSeek-R1 at M = 16 (128 pairs) spent 7.8 / 9.6 us in the two launches (R7 profile).
ALIGN_SMALL_PAIRS = 1024
#: Beyond those, align_kernel's one program scatters the pairs 256 at a time on 4 warps, or with ALIGN_WIDE
#: ALIGN_BLOCK at a time on ALIGN_WARPS: its loop is a chain of dependent loads (ids and ranks, then the experts'
#: offsets), one step about 0.6 us, so 256 a step took 41.6 us of gpt-oss-20b's 4096-token call (16384 pairs,
#: R97b's profile). On since R98a (H100, the twenty-seventh pass): 38.5-94.9 -> 19.9-48.4 us at 4096 tokens
#: (gpt-oss-20b / Qwen3-30B INT4); GPU-tested in R98t.
ALIGN_WIDE = True
ALIGN_BLOCK, ALIGN_WARPS = 4096, 16
#: align_kernel on a grid of one program per ALIGN_PART_PAIRS pairs (ALIGN_PART_WARPS each), past
#: ALIGN_SMALL_PAIRS: each program computes the offsets itself and scatters its own pairs, the last one to finish
#: resets the counts. One program's scatter is a chain of scattered stores on one SM: align_kernel took 49-54 us
#: of every 32768-pair call (Qwen3-235B and Qwen3-30B at 4096 tokens, R109a's profile, H100) and 21-29 us of
#: gpt-oss's 16384. The same sorted ids and labels as one program (the ranks come from count_kernel either way).
#: On since R110 (thirty-fourth pass, H100): 49.7-51.2 -> 9.4-9.8 us at 32768 pairs, 20.1 / 28.7 -> 7.6 / 8.6 at
#: gpt-oss-20b / 120b's 16384; every 4096-token 4-bit row the same output bits. GPU-tested: the WS path with it
#: (test_triton_moe_ws.py, R110g) and the alignment tests' checks of a call (R110a; their check that a second call
#: orders the pairs alike, which the GPU's atomics do not promise, failed every form and was taken out)
ALIGN_PARTS = True
ALIGN_PART_PAIRS, ALIGN_PART_WARPS = 1024, 4


def moe_config(tokens: int, top_k: int, experts: int, pack: int = 1, wide: bool = False) -> dict[str, int]:
    """BLOCK_M from the expected rows per expert (shape-only, no device values).

    From 16 rows per expert on, 4-bit weights are decoded to whole tiles (FULL_TILE: one dot per
    K tile with a contiguous activation tile). From 64 on, 128-row tiles with 8 warps; the gated
    FC1 (two accumulators, gate and up) takes 64 columns (BLOCK_N1), FC2 128: the largest
    tiles that compile for sm_90 without register spills (ptxas -v on the Triton 3.7 output).
    From 256 rows per expert on, E2M1 weights get 256-row tiles (K tiles of 64): decoding a
    weight tile costs about as many instructions as 128 rows of its MMA, so the taller tile
    halves the decode per output (SASS of the K loop: 499 instructions per 16 MMAs at 256
    rows, 792 at 128). 4-bit FC1 stacks its gate and up rows into one weight tile (FUSE_GU: one
    dot twice as wide, 10% fewer instructions); FP8 keeps two (the stacked tile spills there).
    wide (BF16 weights, two bytes each): K tiles of 64 from 64 rows on, so the staged tiles fit
    in shared memory as FP8's 128-wide ones do. FP8 from 64 rows per expert on: N_FAST (a block's
    column tiles run together and share its activation rows in L2; column tiles first, DeepSeek-R1's
    235 MB FC1 input at M = 4096 was read from HBM once per column tile)."""
    cfg = _moe_rule(tokens * top_k / experts, pack)
    if wide and cfg["BLOCK_M"] >= 64:
        cfg["BLOCK_K"] = 64
    if pack == 1 and not wide and cfg["BLOCK_M"] >= 64:
        cfg["N_FAST"] = 1
    return cfg


def _moe_rule(per_expert: float, pack: int) -> dict[str, int]:
    if per_expert <= 16:
        return {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 128, "num_warps": 8, "num_stages": 3, "FULL_TILE": 0}
    w4 = int(pack > 1)
    if per_expert <= 64:
        return {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 128, "num_warps": 4, "num_stages": 4 if pack == 1 else 3,
                "FULL_TILE": w4, "FUSE_GU": w4}
    if pack == 2 and per_expert >= 256:        # E2M1 (INT4 groups may span 128 along K)
        return {"BLOCK_M": 256, "BLOCK_N": 128, "BLOCK_N1": 64, "BLOCK_K": 64, "num_warps": 8, "num_stages": 3,
                "FULL_TILE": 1, "FUSE_GU": 1}
    return {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_N1": 64, "BLOCK_K": 128, "num_warps": 8,
            "num_stages": 4 if pack == 1 else 3, "FULL_TILE": w4, "FUSE_GU": w4}


def use_direct(tokens: int, top_k: int, experts: int, elem: int, words: bool = False) -> bool:
    """The direct two-launch path (moe_gemv.py) for 4-bit experts while the pairs are few: up to
    twice the experts when weights are decoded a word at a time (W4A16 on capability >= 8.9), half
    of them otherwise; the aligned grouped GEMM above that, and for FP8 (whose tensor-core tile
    measured faster at M = 1 on DeepSeek). Measured on an H200 with bench/sweep_gemv.py: gpt-oss-20b
    (32 experts, top 4) M=1/4/16 direct 50/156/578 us vs aligned 174/404/776 us; qwen3-235b NVFP4 W4A4
    (128 experts, top 8, no word decoder) M=1 193 vs 288 us, M=16 2712 vs 1982 us."""
    pairs = tokens * top_k
    return elem in (E2M1_MX, E2M1_NV, INT4) and pairs <= (2 * experts if words else max(1, experts // 2))


def use_swap_words(tokens: int, top_k: int, experts: int, elem: int, act: int, ptx: bool, group: int = 0) -> bool:
    """The swap-AB tensor-core path with word decoding (TritonMoE.apply_swap, WORDS; swap_words_config)
    for E2M1 experts (MXFP4, NVFP4) with layer-dtype or NVFP4 activations and INT4 experts with 128-wide
    groups (the K tile must be one group) and layer-dtype activations: each weight is decoded once for a
    block of its expert's pairs, where the CUDA-core direct path decodes it for every pair and the aligned
    tiles (moe_config) pay a generic decode per 16-row MMA tile. From above 1.5 pairs per expert (W4A16,
    where the direct path decodes words too) or half a pair per expert (NVFP4 W4A4, whose direct path has
    no word decoder) up to SWAP_MAX_PAIRS per expert, and to SWAP_MID_PAIRS (NVFP4 W4A4, INT4) or
    SWAP_WIDE_MAX_PAIRS (E2M1 W4A16) per expert on larger blocks. ptx: the PTX word decoders (capability
    >= 8.9, compiled). Measured on an H200, weights from HBM, graph replay (bench/sweep_moe.py --configs
    configs/moe_w4_words_r7.json / _r8.json): gpt-oss-20b (32 experts, top 4) M=16 298.8 us against 475
    for the direct path, M=32 321.9 and M=64 323.6 against 858 / 885 for the aligned tiles; M=1 (4 pairs)
    59 against 39 for the direct path; qwen3-235b NVFP4 W4A4 (128 experts, top 8) M=16 714 against 1965
    for the aligned tiles; gpt-oss-20b M=256 (32 pairs per expert) 540.6 us against 790.0 for the aligned
    tiles (R10, 2026-12-02). Ninth pass (2026-12-02, session 9), R23 (bench/bench_peers.py, one process,
    16 pairs per expert at M=256, 32-pair blocks): qwen3-235b NVFP4 W4A4 1152.9 us against 4232.5 for the
    aligned tiles and 1275.1 for this MoE's BF16 mode; qwen3-30b INT4 with zero points 348.2 against 670.8
    (BF16 mode 346.6), symmetric 327.3 against 518.7 (BF16 mode 346.5). INT4 was timed at 16 pairs per
    expert only, so the rule takes it only above SWAP_MAX_PAIRS per expert (its 32-pair blocks); fewer
    pairs keep the direct path or the aligned tiles until a run times them there. At
    one pair per expert (qwen3-30b M=16, below the 1.5 threshold) R23 (moe10a) found this path faster with
    zero points (175.3 us against 188.0 for the direct path's best tiles; BF16 mode 183.3) and slower without
    (173.0 against 161.5): the tuned table's INT4 entries (by zero_point) carry that choice, not this rule."""
    pairs = tokens * top_k
    if not ptx or act not in (ACT_NONE, ACT_NVFP4):
        return False
    if elem == INT4:                    # timed at 16 pairs per expert only: the 32-pair blocks' range
        return act == ACT_NONE and group == 128 and SWAP_MAX_PAIRS * experts < pairs <= SWAP_MID_PAIRS * experts
    if elem not in (E2M1_MX, E2M1_NV):
        return False
    if act == ACT_NONE:
        return 1.5 * experts < pairs <= SWAP_WIDE_MAX_PAIRS * experts
    return max(1, experts // 2) < pairs <= SWAP_MID_PAIRS * experts


#: use_swap_words up to this many pairs per expert on 16-pair blocks (measured to 8: gpt-oss-20b M=64),
#: to SWAP_MID_PAIRS on 32-pair blocks (measured at 16: Qwen3 NVFP4 / INT4 at M=256, ninth pass R23), and
#: with E2M1 W4A16 up to SWAP_WIDE_MAX_PAIRS on 64-pair blocks (measured at 32: gpt-oss-20b M=256).
SWAP_MAX_PAIRS = 8
SWAP_MID_PAIRS = 16
SWAP_WIDE_MAX_PAIRS = 32


def swap_words_config(per_expert: float = 0.0) -> dict[str, int]:
    """Blocks of 16 pairs of one expert (the alignment launches), 64 weight rows per FC2 program and
    32 gate + 32 up rows per FC1 program, K tiles of 128 decoded into one interleaved tile per dot
    (JOIN), 4 warps, registers double-buffering the loads (num_stages 1). gpt-oss-20b M=16 on an
    H200: 298.8 us (R8) against 322.3 without JOIN, 327.7 with loads two tiles ahead (PREFETCH 2),
    348.0 with 32-row FC2 tiles, 388.5 with 128-row ones at 8 warps; R7 without JOIN: 64/64 rows
    337.5, 128/128 at 8 warps 460.2, K tiles of 256 420.4. Above SWAP_MAX_PAIRS pairs per expert
    (per_expert) up to SWAP_MID_PAIRS, blocks of 32 pairs at 4 warps (an expert's pairs in one block:
    at 16 per expert on average, 16-pair blocks decode each weight 1.41 times): ninth pass R23, Qwen3
    at M=256, qwen3-235b NVFP4 W4A4 1152.9 us against 1357.4 with 16-pair blocks and 1614.3 with 64-pair
    blocks at 8 warps; qwen3-30b INT4 with zero points 348.2 against 406.7 / 621.2. Above that, blocks of
    64 pairs at 8 warps: gpt-oss-20b M=256 540.6 us against 566.3 with 32-pair blocks at 4 warps (R10)."""
    cfg = {"SWAP": 2, "WORDS": 1, "JOIN": 1, "BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_N1": 32, "BLOCK_K": 128,
           "SPLIT_K": 1, "num_warps": 4, "num_stages": 1}
    if per_expert > SWAP_MID_PAIRS:
        cfg.update(BLOCK_M=64, num_warps=8)
    elif per_expert > SWAP_MAX_PAIRS:
        cfg.update(BLOCK_M=32)
    return cfg


def use_direct_mma(tokens: int, top_k: int, experts: int, act: int) -> bool:
    """The tensor-core direct path (TritonMoE.apply_direct_mma) for W8A8 experts while the pairs are at
    most a quarter of the experts (few pairs share an expert, so reading each pair's expert alone costs
    little). Measured on an H200 with weights from HBM (bench/sweep_moe.py --quick, 2026-12-01):
    qwen3-30b-a3b M=1 28.0 us against 40.5 for the aligned path (8 launches to 4), M=8 82.7 against
    93.0; deepseek-r1 M=1 106-110 against 128, M=8 614 against 635; at M=16 on Qwen3 (pairs = experts)
    the aligned path wins."""
    return act in FP8_CODES and tokens * top_k <= experts // 4


def direct_mma_config(act: int) -> dict[str, int]:
    """16-row tiles (one pair each), 64 columns, the top-k sum in the FC2 GEMM (FUSE_SUM); with 1x128
    activation groups each FC1 program rounds its pair's input row before its K loop (QUANT_PRO: no
    quantization launch before FC1). Measured on an H200 (bench/sweep_moe.py --configs, R5): Qwen3-30B
    M=1 25.4 us against 28.1 with the launch; DeepSeek-R1 106.7 against 107.5."""
    cfg = {"DIRECT": 1, "BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 128, "num_warps": 4, "num_stages": 3,
           "FULL_TILE": 1, "FUSE_SUM": 1}
    if act == ACT_GROUP:
        cfg["QUANT_PRO"] = 1
    return cfg


def moe_gemv_config(tokens: int, elem: int, group: int = 1, words: bool = False) -> dict[str, int]:
    """BLOCK_N/K, DECODE, warps and stages of moe_gemv's kernels (one activation row per program;
    NVFP4 16 rows: its W4A4 mode rounds every weight and activation in registers). words: decode
    whole 32-bit words by inline PTX (launch.gemv_config); then moe_up_split_kernel (gate and up
    rows loaded in one K loop) with 8-row tiles 512 wide in both kernels: the best of 18 variants
    on gpt-oss-20b on an H200 with weights from HBM (bench/sweep_moe.py, 2026-12-01: M=1/8/16
    38.9/242/474 us against 50.4/296/577 for the 32x256 tiles and separate gate/up loops). XW (E2M1 in
    the checkpoint layout, bf16): the activations read as 64-bit words (gemv.tile_load), 38.9 us against
    40.1 at M=1 (R11, 2026-12-02). HX (MXFP4, bf16, with XW): products in packed f16 (gemv._e2m1_hx_ptx;
    HX 2: one f16 sum per 32-value group), TAIL 2: FC2's whole K tiles in a loop without masks (TAIL 1
    does FC1's too, which costs it 24 registers): gpt-oss-20b M=1 34.3 us (FC1 17.5 + FC2 15.6) against
    40.2 without HX in the same run; HX 1 with TAIL 2 34.9, HX 2 with TAIL 1 35.4, HX 1 with TAIL 1 39.2
    (R15 of the sixth session, bench/results/h200-2026-12-02/moe7a_rounds.md). Warps (seventh pass, R16 /
    R17, moe8a_rounds.md): the one-row programs are latency chains of 6-12 K steps, so what counts is that
    all of them are resident at once: FC2 at 2 warps (14 of its 1440 programs per SM, one wave) 12.0 us
    against 15.4 at 4 warps (9 per SM, 1.21 waves), FC1 with 256-wide K tiles at 2 warps (14 per SM)
    17.1 against 17.9 (MXFP4 at one token only: other formats and token counts keep the 4-warp tiles; the
    ninth pass measured 2-warp 8x256 tiles on INT4 at qwen3-30b-a3b's shape only, 22.1 against 24.6 us at
    one token with zero points and 161.5 against 212.4 at 16 symmetric, and ships them as tuned entries).
    GUARD (on): a tile whose f16 products overflowed is recomputed in fp32. NVFP4 W4A4 experts take their own kernels through a tuned entry (XQ: TritonMoE.apply_w4a4_rows), not
    this rule."""
    from .gemv import DECODE_E4M3_PTX, DECODE_F16

    if words and tokens == 1 and elem == E2M1_MX:       # the seventh pass's measurement (gpt-oss, one token)
        return {"BLOCK_N": 8, "BLOCK_K": 256, "SPLIT_K": 1, "DECODE": DECODE_E4M3_PTX, "num_warps": 2,
                "num_stages": 3, "BLOCK_N2": 8, "BLOCK_K2": 512, "WARPS2": 2, "XW": 1, "HX": 2, "TAIL": 2}
    if words:
        return {"BLOCK_N": 8, "BLOCK_K": 512, "SPLIT_K": 1, "DECODE": DECODE_E4M3_PTX, "num_warps": 4,
                "num_stages": 3, "BLOCK_N2": 8, "BLOCK_K2": 512, "WARPS2": 4, "XW": 1, "HX": 2, "TAIL": 2}
    return {"BLOCK_N": 16 if elem == 2 else 32, "BLOCK_K": 256, "DECODE": DECODE_F16, "num_warps": 4, "num_stages": 3}


class TritonMoE(Kernel):
    """Every weight format of triton.moe.*; the mode picks the activation handling."""

    w13 = None
    capture_safe = True   # the expert-id check (check_inputs) syncs only in eager calls, never under capture
    _config: dict[str, int] | None = None
    eager: EagerGraphs | None = None
    #: eager calls up to PLAN_ROWS tokens replay a launch plan of the whole call (fastlaunch.CallPlans: no copy in,
    #: replay and copy out as the eager graph's; PLANNED); benchmarks and tests set it
    planned: bool = PLANNED
    plans: fastlaunch.CallPlans | None = None
    #: PERSIST probe (bench/persist_probe.py): an int64 [programs, moe_persist.STAMP_SLOTS] buffer the persistent
    #: launch writes each program's timeline into (None: no stamps, the kernel as timed)
    stamps: torch.Tensor | None = None

    @property
    def config(self) -> dict[str, int] | None:
        """Launch parameters to use instead of moe_config's (benchmark sweeps, bench/sweep_large_m.py);
        setting them drops the eager graphs captured with the previous ones."""
        return self._config

    @config.setter
    def config(self, value: dict[str, int] | None) -> None:
        self._config = value
        if self.eager is not None:
            self.eager.reset()
        if self.plans is not None:
            self.plans.reset()

    def process_weights(self, w13: Any, w2: Any, w13_scale: Any = None, w2_scale: Any = None,
                        w13_global_scale: Any = None, w2_global_scale: Any = None,
                        w13_input_scale: Any = None, w2_input_scale: Any = None,
                        w13_bias: Any = None, w2_bias: Any = None, w13_zero_point: Any = None,
                        w2_zero_point: Any = None) -> None:
        layer, fmt = self.layer, self.mode.weight
        e = layer.num_experts // layer.ep_size
        h, i = layer.hidden_size, layer.intermediate_size // layer.tp_size
        gated = layer.activation in GATED_ACTIVATIONS
        rows = layer.w13_rows
        self.experts, self.hidden, self.inter, self.rows, self.gated = e, h, i, rows, gated
        self.dtype = torch_dtype(layer.dtype)
        params = moe_activation_params(layer.activation, layer.activation_params)
        self.limit = params.get("limit")
        self.alpha, self.beta = params.get("alpha", 1.0), params.get("beta", 1.0)
        self.lbeta = params.get("linear_beta", 1.0)
        group = getattr(layer, "group_size", None)
        self.w13 = pack(fmt, {"weight": "w13", "scale": "w13_scale", "zero": "w13_zero_point",
                              "global": "w13_global_scale"},
                        {"weight": w13, "scale": w13_scale, "global": w13_global_scale, "zero": w13_zero_point},
                        [e], rows, h, group)
        self.w2 = pack(fmt, {"weight": "w2", "scale": "w2_scale", "zero": "w2_zero_point",
                             "global": "w2_global_scale"},
                       {"weight": w2, "scale": w2_scale, "global": w2_global_scale, "zero": w2_zero_point},
                       [e], h, i, group)
        floats = (torch.float32, torch.bfloat16, torch.float16)
        self.b13 = None if w13_bias is None else check_tensor(
            "w13_bias", w13_bias, dtypes=floats, shapes=[[e, rows]],
            why="one bias per expert and FC1 row").to(self.dtype).contiguous()
        self.b2 = None if w2_bias is None else check_tensor(
            "w2_bias", w2_bias, dtypes=floats, shapes=[[e, h]],
            why="one bias per expert and hidden unit").to(self.dtype).contiguous()
        granularity = self.mode.params.get("activation_granularity") if self.mode.activation == "fp8" else None
        self.act = ACT_CODES[granularity] if granularity else ACT_NONE
        if self.mode.activation == "nvfp4":
            self.act = ACT_NVFP4
        self.static = [None, None]
        for idx, (name, t) in enumerate((("w13_input_scale", w13_input_scale), ("w2_input_scale", w2_input_scale))):
            if t is None:
                continue
            if self.act not in (ACT_TENSOR, ACT_NVFP4):
                raise TensorError(name, f"None ({self.mode.name} activations are not statically scaled)",
                                  f"a tensor of shape {list(t.shape)}")
            if not isinstance(t, torch.Tensor) or list(t.shape) not in ([], [1], [e]):
                raise TensorError(name, f"an fp32 tensor of shape [], [1] or [{e}]", str(getattr(t, "shape", t)))
            check_tensor(name, t, dtypes=(torch.float32,), shapes=None, why="fp32 activation scale")
            check_scales(name, t, sign="positive")
            self.static[idx] = t.float().max().reshape(1)       # one scale for all experts, as emulation
        dev = self.w13.weight.device
        if dev.type != "cuda" and not interpreting():
            raise TensorError("w13", "a CUDA tensor (Triton kernels run on NVIDIA GPUs)", str(dev))
        self.device = dev
        self.static = [None if s is None else s.to(dev) for s in self.static]
        self.facts = device_facts(dev)
        self.counts = torch.zeros(e, dtype=torch.int32, device=dev)
        self.offsets = torch.zeros(e, dtype=torch.int32, device=dev)
        self.align_done = torch.zeros(1, dtype=torch.int32, device=dev)     # align_kernel's arrivals (ALIGN_PARTS)
        # MXFP4 scales w4_rega's / w4_ws's fused decoder covers: SWAP 3 / WS may serve the layer (checked here, at
        # load, never in a call, which may be captured)
        self.fused_ok = self.w13.layout.elem == E2M1_MX and mx_fused_ok(self.w13.scale) and mx_fused_ok(self.w2.scale)
        self.eager = EagerGraphs(self.forward)
        self.plans = fastlaunch.CallPlans(self.forward)

    def _check(self, x: Any, topk_weights: Any, topk_ids: Any) -> None:
        if not isinstance(x, torch.Tensor) or x.dim() != 2 or x.shape[1] != self.hidden:
            raise TensorError("hidden_states", f"a tensor of shape [M, {self.hidden}]",
                              str(list(x.shape)) if isinstance(x, torch.Tensor) else type(x).__name__)
        if x.dtype not in (torch.bfloat16, torch.float16, torch.float32):
            raise TensorError("hidden_states", "dtype bfloat16, float16 or float32", str(x.dtype))
        m = x.shape[0]
        for name, t in (("topk_weights", topk_weights), ("topk_ids", topk_ids)):
            if not isinstance(t, torch.Tensor) or list(t.shape) != [m, self.layer.top_k]:
                raise TensorError(name, f"a tensor of shape [{m}, {self.layer.top_k}] (tokens x top_k)",
                                  str(list(t.shape)) if isinstance(t, torch.Tensor) else type(t).__name__)
            if t.device != self.device:
                raise TensorError(name, f"a tensor on {self.device}", str(t.device))
        if topk_ids.dtype not in (torch.int32, torch.int64):
            raise TensorError("topk_ids", "dtype int32 or int64 (expert ids)", str(topk_ids.dtype))
        if x.device != self.device:
            raise TensorError("hidden_states", f"a tensor on {self.device}", str(x.device))

    def check_expert_ids(self, topk_ids: torch.Tensor) -> None:
        """Out-of-range ids are named here in eager calls while `check_inputs` is set (this reads the ids
        back: one host sync, which serializes host and GPU; an engine that vouches for its router's ids
        clears it); otherwise, and always under graph capture, the kernels drop such pairs without
        touching memory."""
        if topk_ids.numel():
            lo, hi = torch.stack(torch.aminmax(topk_ids)).tolist()     # one sync for both bounds
            if lo < 0 or hi >= self.experts:
                raise TensorError("topk_ids", f"expert ids in [0, {self.experts})", f"{lo if lo < 0 else hi}")

    def apply(self, hidden_states: Any, topk_weights: Any, topk_ids: Any) -> torch.Tensor:
        if self.w13 is None:
            raise RuntimeError(f"{self!r}: call process_weights before apply")
        self._check(hidden_states, topk_weights, topk_ids)
        capturing = hidden_states.is_cuda and torch.cuda.is_current_stream_capturing()
        if self.check_inputs and not capturing:
            self.check_expert_ids(topk_ids)          # eager calls only: a captured graph cannot sync
        if topk_ids.shape[0] == 0:
            return torch.empty(0, self.hidden, dtype=self.dtype, device=self.device)
        if self.planned and not capturing and hidden_states.is_cuda and topk_ids.shape[0] <= PLAN_ROWS:
            y = self.plans(hidden_states, topk_weights, topk_ids)
            if y is not None:
                return y
        return self.eager(hidden_states, topk_weights, topk_ids)

    def forward(self, hidden_states: torch.Tensor, topk_weights: torch.Tensor, topk_ids: torch.Tensor) -> torch.Tensor:
        """The launches of one call on checked inputs (what an eager graph captures)."""
        x = hidden_states.to(self.dtype).contiguous()
        m, k = topk_ids.shape
        t = m * k
        ids = topk_ids.reshape(-1).contiguous()
        topw = topk_weights.reshape(-1).float().contiguous()
        by_pair = bool(self.layer.apply_router_weight_on_input)
        cfg = self.config_for(m, k)
        if cfg.get("WS"):                            # thousands of tokens: the decode in its own warps (moe_ws)
            from .moe_ws import apply_ws, ws_fallback, ws_ok
            if ws_ok(self, x, cfg.get("BK", WS_BK)):
                return apply_ws(self, x, topw, ids, m, k, cfg)
            cfg = ws_fallback(cfg)
        if cfg.get("DEQUANT_MM"):                    # many tokens: experts decoded once per call, BF16 GEMMs
            from .moe_dequant import apply_dequant
            return apply_dequant(self, x, topw, ids, m, k, cfg)
        if cfg.get("SWAP"):                          # 4-bit weights as the MMA's tall side, one pair per program
            return self.apply_swap(x, topw, ids, m, k, cfg)
        if cfg.get("PERSIST"):                       # the direct tiles of both GEMMs in one persistent launch
            return self.apply_persistent(x, topw, ids, m, k, cfg)
        if cfg.get("DIRECT"):                        # tensor-core tiles, one pair per program, no alignment
            return self.apply_direct_mma(x, topw, ids, m, k, cfg)
        if "DECODE" in cfg:                          # the direct (one row per program) path
            return self.apply_direct(x, topw, ids, m, k, cfg)
        if self.config is not None:
            check_config(self.config, self.w13.layout, "w13/w2")
        bm = cfg["BLOCK_M"]
        dev = self.device
        a1 = self._input(x, topw, k)
        fuse = bool(cfg.get("FUSE_SUM", 0))
        if fuse and not cfg.get("PREP"):
            raise ValueError("FUSE_SUM on the aligned tiles needs PREP (its launch zeroes the rows of tokens "
                             "with no expert id in range, which no FC2 program sums)")
        out = torch.empty(m, self.hidden, dtype=self.dtype, device=dev)
        by_expert = bool(cfg.get("BY_EXPERT", 0))
        if by_expert:                                # a program per expert finds its own rows: no alignment
            if by_pair or m > bm or fuse or cfg.get("PREP"):
                raise ValueError(f"BY_EXPERT: at most BLOCK_M={bm} tokens (one row per token and expert), the "
                                 f"router weight on the output, no PREP or FUSE_SUM; not M={m}, cfg {cfg}")
            sorted_ids, block_expert, blocks, a_in = ids, ids, self.experts, self._round(0, a1)
        elif cfg.get("PREP"):                        # count, align and FC1's input codes in one launch
            sorted_ids, block_expert, blocks, a_in = self._prep(ids, t, bm, a1, out if fuse else None, k)
        else:
            sorted_ids, block_expert, blocks, a_in = self._align_round(ids, t, bm, a1)
        quant_out = bool(cfg.get("QUANT_OUT", 0))
        if quant_out:                                # FC1 writes FC2's input codes and scales (no launch between)
            self._check_quant_out(cfg)
            inter = torch.empty(t, self.inter, dtype=torch.uint8, device=dev)
            inter_scales = torch.empty(-(-self.inter // 128), t, dtype=torch.float32, device=dev)
        else:
            inter, inter_scales = torch.empty(t, self.inter, dtype=self.dtype, device=dev), None
        self._gemm(1, a_in, by_pair, self.w13, self.b13, topw, sorted_ids, block_expert, inter, t, k,
                   self.inter, self.rows, self.hidden, cfg, blocks, out_scales=inter_scales, by_expert=by_expert)
        a2 = (inter.view(torch.float8_e4m3fn) if self.facts["fp8_dot"] else inter, inter_scales) if quant_out \
            else self._round(1, inter)
        # FC2's rounded outputs in the layer dtype, weighed as they are summed (half the bytes of fp32 rows)
        pairs = torch.empty(t, self.hidden, dtype=torch.float32 if fuse else self.dtype, device=dev)
        cnt = self._counters(m * -(-self.hidden // cfg["BLOCK_N"]), "_sum_counters") if fuse else None
        self._gemm(2, a2, True, self.w2, self.b2, topw, sorted_ids, block_expert, pairs, t, k,
                   self.hidden, self.hidden, self.inter, cfg, blocks, sum_out=out if fuse else None, cnt=cnt,
                   pair_ids=ids if fuse else None, raw_pairs=not fuse, by_expert=by_expert)
        if not fuse:
            self._topk_sum(pairs, ids, out, m, k, None if by_pair else topw, dedup=by_expert)
        return out

    def config_for(self, tokens: int, top_k: int) -> dict[str, int]:
        """The launch parameters a call for `tokens` tokens uses: the override (`config`), the tuned
        table's entry for this device, shape and token bucket (any path: DIRECT, DECODE or aligned
        tiles), else the rules: the word-decoding swap-AB path's (use_swap_words; SWAP), the CUDA-core
        direct path's (use_direct; it has DECODE), the tensor-core direct path's (use_direct_mma;
        DIRECT) or the aligned grouped GEMM's (moe_config).
        The one place the choice is made."""
        if self.config is not None:
            return self.config
        from .tuned import lookup
        lay = self.w13.layout
        found = lookup(self.facts["name"], "moe", self.mode.name, self.rows, self.hidden, tokens, self.experts,
                       zero_point=lay.stride_zk != 0 if lay.elem == INT4 else None, traits=device_traits(self.facts))
        if found is not None:
            return found
        words = self.facts["hw_fp8"] and self.act == ACT_NONE
        if use_swap_words(tokens, top_k, self.experts, lay.elem, self.act, self.facts["hw_fp8"] and not interpreting(),
                          lay.group):
            return swap_words_config(tokens * top_k / self.experts)
        if use_direct(tokens, top_k, self.experts, lay.elem, words):
            return moe_gemv_config(tokens, lay.elem, lay.group, words=words)
        if use_direct_mma(tokens, top_k, self.experts, self.act):
            return direct_mma_config(self.act)
        return moe_config(tokens, top_k, self.experts, lay.pack, wide=lay.elem == BF16)

    def _input(self, x: torch.Tensor, topw: torch.Tensor, k: int) -> torch.Tensor:
        """FC1's input: the tokens, or one row per pair scaled by its router weight (weight on input)."""
        if self.layer.apply_router_weight_on_input:
            return (x.repeat_interleave(k, 0).float() * topw[:, None]).to(self.dtype)
        return x

    def _act_scale(self, idx: int, a: torch.Tensor) -> torch.Tensor | None:
        """The per-tensor scale of FC1's (idx 0) or FC2's (idx 1) input: static, or its dynamic amax."""
        if self.act not in (ACT_TENSOR, ACT_NVFP4):
            return None
        if self.static[idx] is not None:
            return self.static[idx]
        div = E4M3_MAX if self.act == ACT_TENSOR else E2M1_MAX * E4M3_MAX
        if a.is_contiguous() and a.numel() <= TENSOR_SCALE_MAX:     # one program instead of torch's ~7 launches
            return tensor_scale(a, div)
        if TENSOR_SCALE_WIDE and a.is_contiguous():                 # many programs, one launch
            return tensor_scale_wide(a, div, self._counters(2, "_scale_state"))
        return dynamic_tensor_scale(a, self.act)

    def _round(self, idx: int, a: torch.Tensor, gdc: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """FC1's (idx 0) or FC2's (idx 1) input rounded through the activation format, as the
        reference: FP8 as E4M3 codes and their scales, NVFP4 as values (no scales). gdc (FP8): the
        GEMM launched next is a programmatic dependent launch of the quantizer (QPDL)."""
        if self.act == ACT_NONE:
            return a, None
        if self.act in FP8_CODES:
            return quantize_activation_codes(a, self.act, self._act_scale(idx, a), self.facts, gdc=gdc)
        return quantize_activations(a, self.act, self._act_scale(idx, a), self.facts), None

    def apply_direct_mma(self, x: torch.Tensor, topw: torch.Tensor, ids: torch.Tensor, m: int, k: int,
                         cfg: dict[str, int]) -> torch.Tensor:
        """A few tokens on tensor-core tiles without the alignment launches: each program of the two
        grouped GEMMs serves one (token, slot) pair (moe_gemm_kernel DIRECT). W8A8 activations are
        rounded to codes by a quantization launch per GEMM, or inside the GEMMs: QUANT_IN (bit 1: FC1,
        bit 2: FC2) rounds that GEMM's input row per K tile, QUANT_OUT has the FC1 GEMM write FC2's
        input as codes and group scales (1x128 groups, a 128-wide FC1 tile: BLOCK_N1); with FC1's
        QUANT_IN and QUANT_OUT, the call is two launches. QUANT_PRO: each FC1 program rounds its pair's
        whole input row into codes before its K loop, which then runs on them as on the launch's (no
        per-tile rounding in the loop); QUANT_PRO bit 2 does the same for FC2's input in each FC2 program
        (no quantization launch between the GEMMs). The slots are summed by topk_sum_kernel or by the FC2
        GEMM itself (FUSE_SUM). FC2 may have its own tile: BLOCK_N2, WARPS2, STAGES2. PDL (sm_90): the FC2
        GEMM is a programmatic dependent launch whose programs become resident while FC1 drains and wait
        for it on the device (1), and also ask L2 for their own weight rows before waiting (2). PF_NEXT
        (rows): each FC1 program asks L2 for that many of FC2's weight rows of its pair's expert after its
        store (rows pid_n * PF_NEXT onward), so FC2's first programs find them there. QUANT_LAST (1x128 groups):
        the last of each pair's FC1 programs to finish rounds the pair's output row into FC2's codes and
        scales (arrival counters, zero between calls), so no quantization launch sits between the GEMMs
        and FC1 keeps its own tile width (QUANT_OUT needs 128-column FC1 tiles). QPDL (sm_90; FC1's input
        rounded by the quantization launch: no QUANT_PRO / QUANT_IN bit 1, no PDL): FC1 is launched as a
        programmatic dependent launch of that quantizer, resident while it runs, waiting for it first thing."""
        fp8 = self.act in FP8_CODES
        quant1 = fp8 and bool(cfg.get("QUANT_IN", 0) & 1)
        quant_out = fp8 and bool(cfg.get("QUANT_OUT", 0))
        quant_last = fp8 and bool(cfg.get("QUANT_LAST", 0)) and not quant_out
        if quant_last and (self.act != ACT_GROUP or cfg.get("QUANT_IN", 0) & 2 or cfg.get("QUANT_PRO", 0) & 2):
            raise ValueError(f"QUANT_LAST: 1x128 activation groups, FC2 reading the codes (no QUANT_IN / QUANT_PRO "
                             f"bit 2); not {self.mode.name} with {cfg}")
        quant2 = fp8 and bool(cfg.get("QUANT_IN", 0) & 2) and not quant_out
        if (quant1 or quant2) and self.act == ACT_GROUP and cfg["BLOCK_K"] != 128:
            raise ValueError(f"BLOCK_K={cfg['BLOCK_K']}: 1x128 activation groups are rounded per 128-wide K tile")
        if quant_out:
            self._check_quant_out(cfg)
        t, dev = m * k, self.device
        by_pair = bool(self.layer.apply_router_weight_on_input)
        a1 = self._input(x, topw, k)
        pro_bits = int(cfg.get("QUANT_PRO", 0)) if fp8 else 0
        pro, pro2 = bool(pro_bits & 1), bool(pro_bits & 2) and not quant_out
        if (pro and (self.act != ACT_GROUP or quant1)) or (pro2 and (self.act != ACT_GROUP or quant2)):
            raise ValueError(f"QUANT_PRO: 1x128 activation groups rounded before a GEMM's loop (not with that "
                             f"GEMM's QUANT_IN), not {self.mode.name} with QUANT_IN={cfg.get('QUANT_IN', 0)}")
        pdl = int(cfg.get("PDL", 0)) if self.facts.get("pdl") else 0
        if cfg.get("QPDL", 0) and (not fp8 or pro or quant1 or cfg.get("PDL", 0)):
            raise ValueError(f"QPDL: FC1 a dependent launch of the FP8 quantization launch of its input (no QUANT_PRO "
                             f"bit 1, QUANT_IN bit 1 or PDL), not {self.mode.name} with {cfg}")
        qpdl = bool(cfg.get("QPDL", 0)) and bool(self.facts.get("pdl"))
        if pro:                                      # codes and scales written by the FC1 GEMM's programs
            codes = torch.empty(a1.shape, dtype=torch.uint8, device=dev)
            scales = torch.empty(-(-self.hidden // 128), a1.shape[0], dtype=torch.float32, device=dev)
            a_in = (codes.view(torch.float8_e4m3fn) if self.facts["fp8_dot"] else codes, scales)
        else:
            a_in = (a1, self._act_scale(0, a1)) if quant1 else self._round(0, a1, gdc=qpdl)
        if quant_out:
            inter = torch.empty(t, self.inter, dtype=torch.uint8, device=dev)
            inter_scales = torch.empty(-(-self.inter // 128), t, dtype=torch.float32, device=dev)
        else:
            inter, inter_scales = torch.empty(t, self.inter, dtype=self.dtype, device=dev), None
        last = None
        if quant_last:                               # (codes, scales, arrival counters) the last FC1 tile fills
            last = (torch.empty(t, self.inter, dtype=torch.uint8, device=dev),
                    torch.empty(-(-self.inter // 128), t, dtype=torch.float32, device=dev), self._counters(t, "_last_counters"))
        lay2 = self.w2.layout
        rows_contiguous = lay2.pack == 1 and lay2.stride_wk == 1 and lay2.stride_wn == self.inter
        pf_rows = int(cfg.get("PF_NEXT", 0)) if rows_contiguous and not interpreting() else 0
        lay1 = self.w13.layout
        pf_head = int(cfg.get("PF_HEAD", 0)) if (fp8 and lay1.pack == 1 and lay1.stride_wk == 1 and
                                                 self.facts.get("pdl") and not interpreting()) else 0
        if pf_head % 16:
            raise ValueError(f"PF_HEAD={pf_head}: bytes per weight row asked of L2, a multiple of 16")
        self._gemm(1, a_in, by_pair, self.w13, self.b13, topw, ids, ids, inter, t, k, self.inter, self.rows,
                   self.hidden, cfg, t, direct=True, quant_in=quant1, out_scales=inter_scales,
                   pro=(a1, codes) if pro else None, gdc=1 if pdl else 2 if qpdl else 0,
                   prefetch=(self.w2.weight, pf_rows * self.inter, self.hidden * self.inter) if pf_rows else None,
                   last=last, pf_head=pf_head)
        pairs = torch.empty(t, self.hidden, dtype=torch.float32, device=dev)
        pro_in = None
        if last is not None:
            a_in = (last[0].view(torch.float8_e4m3fn) if self.facts["fp8_dot"] else last[0], last[1])
        elif quant_out:
            a_in = (inter.view(torch.float8_e4m3fn) if self.facts["fp8_dot"] else inter, inter_scales)
        elif pro2:                                   # codes and scales written by the FC2 GEMM's programs
            codes2 = torch.empty(t, self.inter, dtype=torch.uint8, device=dev)
            a_in = (codes2.view(torch.float8_e4m3fn) if self.facts["fp8_dot"] else codes2,
                    torch.empty(-(-self.inter // 128), t, dtype=torch.float32, device=dev))
            pro_in = (inter, codes2)
        else:
            a_in = (inter, self._act_scale(1, inter)) if quant2 else self._round(1, inter)
        out = torch.empty(m, self.hidden, dtype=self.dtype, device=dev)
        fuse = bool(cfg.get("FUSE_SUM", 0))
        bn2 = cfg.get("BLOCK_N2", cfg["BLOCK_N"])
        cnt = self._counters(m * -(-self.hidden // bn2), "_sum_counters") if fuse else ids
        self._gemm(2, a_in, True, self.w2, self.b2, topw, cnt, ids, pairs, t, k, self.hidden, self.hidden,
                   self.inter, cfg, t, direct=True, quant_in=quant2, sum_out=out if fuse else None, pro=pro_in,
                   gdc=(3 if pdl == 2 and rows_contiguous else 2) if pdl else 0)
        if not fuse:
            self._topk_sum(pairs, ids, out, m, k)
        return out

    def apply_persistent(self, x: torch.Tensor, topw: torch.Tensor, ids: torch.Tensor, m: int, k: int,
                         cfg: dict[str, int]) -> torch.Tensor:
        """A few tokens' W8A8 experts (1x128 activation groups) in one launch of PERSIST programs per SM
        (moe_persist.moe_pairs_persistent_kernel): the tiles of apply_direct_mma's two GEMMs (QUANT_PRO,
        QUANT_LAST, FUSE_SUM; BLOCK_N / BLOCK_N2 columns, SWAP_AB, PF_HEAD as there) taken in order from
        one counter, FC2's tiles of a pair once its FC1 tiles are done."""
        from . import moe_kernels as mk
        from .moe_persist import moe_pairs_persistent_kernel

        l1, l2 = self.w13.layout, self.w2.layout
        if self.act != ACT_GROUP or l1.pack != 1 or l1.stride_wk != 1 or l2.stride_wk != 1 or \
                self.layer.apply_router_weight_on_input or cfg["BLOCK_K"] != 128:
            raise ValueError(f"PERSIST: FP8 experts with 1x128 activation groups, the router weight on the output and "
                             f"K tiles of 128; not {self.mode.name} with {cfg}")
        t, dev, fp8_dot = m * k, self.device, self.facts["fp8_dot"]
        h, i = self.hidden, self.inter
        bn1, bn2 = cfg["BLOCK_N"], cfg.get("BLOCK_N2", cfg["BLOCK_N"])
        x = x.contiguous()
        xq = torch.empty(m, h, dtype=torch.uint8, device=dev)
        xs = torch.empty(-(-h // 128), m, dtype=torch.float32, device=dev)
        inter = torch.empty(t, i, dtype=self.dtype, device=dev)
        iq = torch.empty(t, i, dtype=torch.uint8, device=dev)
        isc = torch.empty(-(-i // 128), t, dtype=torch.float32, device=dev)
        pairs = torch.empty(t, h, dtype=torch.float32, device=dev)
        out = torch.empty(m, h, dtype=self.dtype, device=dev)
        last = self._counters(t, "_last_counters")
        sums = self._counters(m * -(-h // bn2), "_sum_counters")
        ready = self._counters(t, "_ready_flags")
        work = self._counters(2, "_work_counters")
        pf_head = int(cfg.get("PF_HEAD", 0)) if self.facts.get("pdl") and not interpreting() else 0
        if pf_head % 16:
            raise ValueError(f"PF_HEAD={pf_head}: bytes per weight row asked of L2, a multiple of 16")
        interleaved = self.layer.activation in INTERLEAVED_ACTIVATIONS
        rows = l1.scale_rows
        uniform1 = rows % ((2 if self.gated and interleaved else 1) * bn1) == 0 and (
            not self.gated or interleaved or i % rows == 0)
        view = (lambda u: u.view(torch.float8_e4m3fn)) if fp8_dot else (lambda u: u)  # noqa: E731
        stride = lambda tt: tt.stride(0) if tt is not None else 0   # noqa: E731
        swap = int(cfg.get("SWAP_AB", 0))
        programs = max(1, int(cfg["PERSIST"]) * int(self.facts["sms"]))
        moe_pairs_persistent_kernel[(programs,)](
            x, view(xq), xq, xs, view(self.w13.weight), self.w13.scale, _or(self.b13, self.w13.scale), inter, view(iq),
            iq, isc,
            view(self.w2.weight), self.w2.scale, _or(self.b2, self.w2.scale), pairs, out,
            ids, topw, last, sums, ready, work, work[1:], t, m, k, self.experts, h, i, self.rows,
            x.stride(0), inter.stride(0), pairs.stride(0),
            stride(self.w13.weight), stride(self.w13.scale), stride(self.b13), l1.stride_wn, l1.stride_sn, l1.stride_sk,
            stride(self.w2.weight), stride(self.w2.scale), stride(self.b2), l2.stride_wn, l2.stride_sn, l2.stride_sk,
            float(self.limit if self.limit is not None else 0.0), float(self.alpha), float(self.beta), float(self.lbeta),
            ACTFN=mk.ACTIVATION_CODES[self.layer.activation], GATED=self.gated, INTERLEAVED=interleaved,
            HAS_LIMIT=self.limit is not None, GROUP1=l1.group, GROUP2=l2.group, SCALE_ROWS=rows,
            HAS_BIAS1=self.b13 is not None, HAS_BIAS2=self.b2 is not None, BLOCK_N1=bn1, BLOCK_N2=bn2, BLOCK_K=128, HW_FP8=self.facts["hw_fp8"],
            DOT_F32=self.facts["dot_f32"], OUT_F16=self.dtype == torch.float16, FP8_DOT=fp8_dot, UNIFORM1=uniform1,
            UNIFORM2=l2.scale_rows % bn2 == 0, EVEN_K1=h % 128 == 0, EVEN_K2=i % 128 == 0,
            K_GROUPS=triton_pow2(-(-h // 128)), N_GROUPS=triton_pow2(-(-i // 128)), SWAP1=bool(swap & 1),
            SWAP2=bool(swap & 2), PF_HEAD=pf_head, SPIN_ASM=not interpreting(), num_warps=cfg["num_warps"],
            num_stages=cfg["num_stages"], **({"stamp_ptr": self.stamps, "STAMP": True} if self.stamps is not None else {}))
        return out

    def apply_swap(self, x: torch.Tensor, topw: torch.Tensor, ids: torch.Tensor, m: int, k: int,
                   cfg: dict[str, int]) -> torch.Tensor:
        """4-bit W4A16 experts on swap-AB tensor-core tiles (moe_gemv.moe_swap_kernel): the weight rows
        are the tile's tall side and the pairs its columns. SWAP 1 (a few tokens): one pair per program
        (16 columns, one used), two launches (FC2 sums the top-k slots itself); SWAP 2: blocks of
        BLOCK_M pairs of one expert from the alignment launches, then topk_sum_kernel (five launches).
        NVFP4 activations (W4A4) are rounded to values first, as the reference. BLOCK_N1 / BLOCK_N:
        weight rows (gate and up rows each) per FC1 / FC2 program; SCALED_DOT 0 decodes MXFP4 by hand
        instead of tl.dot_scaled (which the interpreter lacks, so it is off there); PREFETCH 1 / 2 loads
        the K tile one / two ahead before tl.dot_scaled multiplies the current one. WORDS 1: the dense
        few-row kernel's K loop (gemm.w4_swap_tiles: whole 32-bit words decoded by inline PTX, DECODE
        4 for E2M1 / 3 for INT4, the next tile's loads in flight), each weight decoded once for the
        BLOCK_M pairs of its block; K tiles of whole 128s (INT4: one 128-wide group); SPLIT_K splits K
        over that many programs per tile (a few pairs cannot fill the GPU); JOIN 1 (word decoders only)
        and PREFETCH 2 as in gemm.w4_swap_kernel; X_PIPE 1 (E2M1 with JOIN; num_stages >= 2): the activation
        tiles go to shared memory by Triton's pipelined copies (gemm.w4_swap_tiles); TABLE 1 (E2M1, bf16; the
        default for NVFP4, 0 turns it off): the byte-table word decoder, NVFP4's weights exactly the reference's
        (R27, eleventh pass: 0 / 1.9e-6 from emulation at M=8 / 128 against 4.3e-2 / 3.3e-2 for the single-factor
        decoder, whose bf16-rounded group scale FC2's FP4 input rounding amplifies; Qwen3-235B M=256 1154 us
        against 1152, M=16 640 against 616). MXFP4's power-of-two scales need no table (550 against 539 us)."""
        from . import moe_kernels as mk
        from .moe_gemv import moe_swap_kernel

        if cfg["SWAP"] == 3:                 # w4_rega's grouped mode (moe_rega), else the same entry as SWAP 2
            from .moe_rega import apply_swap_rega, grouped_ok
            if grouped_ok(self, x):
                return apply_swap_rega(self, x, topw, ids, m, k, cfg)
            cfg = dict(cfg, SWAP=2)
        lay = self.w13.layout
        if lay.pack == 1 or self.act not in (ACT_NONE, ACT_NVFP4):
            raise ValueError(f"SWAP: 4-bit weights with unquantized or NVFP4 activations, not {self.mode.name}")
        if cfg.get("WORDS") and (cfg["BLOCK_K"] % 128 or (lay.elem == INT4 and cfg["BLOCK_K"] != lay.group)):
            raise ValueError(f"SWAP WORDS: BLOCK_K={cfg['BLOCK_K']} must be whole 128s (INT4: its 128-wide group, "
                             f"not {lay.group})")
        words = bool(cfg.get("WORDS", 0))
        aligned = cfg["SWAP"] == 2
        bm = cfg["BLOCK_M"] if aligned else 16
        t, dev = m * k, self.device
        by_pair = bool(self.layer.apply_router_weight_on_input)
        if aligned:
            sorted_ids, block_expert, blocks = self._align(ids, t, bm)
        else:
            sorted_ids, block_expert, blocks = ids, ids, t
        a1 = self._round(0, self._input(x, topw, k))[0]      # W4A4: rounded to NVFP4 values, as the reference
        inter = torch.empty(t, self.inter, dtype=self.dtype, device=dev)
        pairs = torch.empty(t, self.hidden, dtype=torch.float32, device=dev)
        out = torch.empty(m, self.hidden, dtype=self.dtype, device=dev)
        cnt = ids if aligned else self._counters(m * -(-self.hidden // cfg["BLOCK_N"]), "_sum_counters")
        scaled = lay.elem == E2M1_MX and not interpreting() and bool(cfg.get("SCALED_DOT", 1)) and not words
        decode = cfg.get("DECODE", 3 if lay.elem == INT4 else 4) if self.facts["hw_fp8"] and not interpreting() else 0
        split = int(cfg.get("SPLIT_K", 1)) if words else 1
        for stage, packed, bias, dst, n_out, n_w, kdim, bn in (
                (1, self.w13, self.b13, inter, self.inter, self.rows, self.hidden, cfg.get("BLOCK_N1", cfg["BLOCK_N"])),
                (2, self.w2, self.b2, pairs, self.hidden, self.hidden, self.inter, cfg["BLOCK_N"])):
            a = a1 if stage == 1 else self._round(1, inter)[0]
            w, ly = packed, packed.layout
            tiles = blocks * -(-n_out // bn)
            if split > 1:                            # K slices and their arrival counters (zero between calls)
                wn = bn * (2 if stage == 1 and self.gated else 1)
                part = torch.empty(split, tiles, wn, bm, dtype=torch.float32, device=dev)
                kcnt = self._counters(tiles, "_split_counters")
            else:
                part, kcnt = dst, cnt
            moe_swap_kernel[(blocks, -(-n_out // bn), split)](
                a, ids, topw, w.weight, w.scale, _or(w.zero, w.scale), _or(w.global_scale, w.scale),
                _or(bias, w.scale), dst, cnt, out, sorted_ids, block_expert, part, kcnt, t, self.experts, k, n_out,
                n_w, kdim,
                a.stride(0), dst.stride(0), *_expert_strides(w, bias), ly.stride_wn, ly.stride_wk, ly.stride_sn,
                ly.stride_sk, ly.stride_zk, float(self.limit if self.limit is not None else 0.0), float(self.alpha),
                float(self.beta), float(self.lbeta), STAGE=stage, ACTFN=mk.ACTIVATION_CODES[self.layer.activation],
                GATED=self.gated, INTERLEAVED=self.layer.activation in INTERLEAVED_ACTIVATIONS,
                HAS_LIMIT=self.limit is not None, A_BY_PAIR=by_pair, WEIGHT_OUT=not by_pair, ELEM=ly.elem,
                PACK=ly.pack, GROUP=ly.group, HAS_ZERO=ly.stride_zk != 0, HAS_BIAS=bias is not None,
                SCALED_DOT=scaled, ALIGNED=aligned, FUSE_SUM=not aligned, BLOCK_M=bm, BLOCK_N=bn,
                BLOCK_K=cfg["BLOCK_K"], EXACT_BF16=self.facts["dot_f32"], OUT_F16=self.dtype == torch.float16,
                EVEN_K=kdim % cfg["BLOCK_K"] == 0, PREFETCH=int(cfg.get("PREFETCH", 0)), WORDS=words, DECODE=decode,
                SPLIT_K=split, JOIN=words and bool(cfg.get("JOIN", 0)) and decode != 0,
                X_PIPE=words and bool(cfg.get("X_PIPE", 0)) and ly.elem != INT4,
                TABLE=decode != 0 and bool(cfg.get("TABLE", int(ly.elem == E2M1_NV))), num_warps=cfg["num_warps"],
                num_stages=cfg["num_stages"])
        if aligned:
            self._topk_sum(pairs, ids, out, m, k)
        return out

    def _align(self, ids: torch.Tensor, t: int, bm: int) -> tuple[torch.Tensor, torch.Tensor, int]:
        """The count and align launches: pair ids sorted by expert in BLOCK_M-row blocks (padded with t),
        each block's expert (-1: unused), and the static bound on the number of blocks. Up to
        ALIGN_SMALL_PAIRS pairs one launch of a program per expert does both (moe_kernels.align_small_kernel)."""
        from . import moe_kernels as mk

        blocks = -(-t // bm) + min(self.experts, t)
        dev = self.device
        sorted_ids = torch.empty(blocks * bm, dtype=torch.int32, device=dev)
        block_expert = torch.empty(blocks, dtype=torch.int32, device=dev)
        if t <= ALIGN_SMALL_PAIRS:                   # one launch, one program per expert, no atomics
            self._align_small(ids, t, bm, sorted_ids, block_expert, blocks)
            return sorted_ids, block_expert, blocks
        rank = torch.empty(t, dtype=torch.int32, device=dev)
        mk.count_kernel[(-(-t // 1024),)](ids, self.counts, rank, t, self.experts, BLOCK=1024)
        if ALIGN_PARTS:         # a program per ALIGN_PART_PAIRS pairs, the last to arrive resetting the counts
            programs, step, warps, done = -(-t // ALIGN_PART_PAIRS), ALIGN_PART_PAIRS, ALIGN_PART_WARPS, self.align_done
        else:
            programs, done = 1, None
            step, warps = (min(ALIGN_BLOCK, triton_pow2(t)), ALIGN_WARPS) if ALIGN_WIDE else (256, 4)
        mk.align_kernel[(programs,)](ids, rank, self.counts, self.offsets, sorted_ids, block_expert, t, self.experts,
                                     blocks, BLOCK_M=bm, E_POW2=triton_pow2(self.experts), BLOCK=step,
                                     num_warps=warps, done_ptr=done)
        return sorted_ids, block_expert, blocks

    def _align_small(self, ids: torch.Tensor, t: int, bm: int, sorted_ids: torch.Tensor, block_expert: torch.Tensor,
                     blocks: int, a1: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor] | None:
        """moe_kernels.align_small_kernel; with a1 (1x128 activation groups) its extra programs also round
        FC1's input rows, and FC1's input (codes, scales) is returned as _round gives it."""
        from . import moe_kernels as mk

        e_pow2 = triton_pow2(self.experts)
        quant = a1 is not None
        rows = a1.shape[0] if quant else 0
        if quant:
            codes = torch.empty(a1.shape, dtype=torch.uint8, device=self.device)
            scales = torch.empty(-(-self.hidden // 128), rows, dtype=torch.float32, device=self.device)
        mk.align_small_kernel[(self.experts + rows,)](
            ids, sorted_ids, block_expert, t, self.experts, blocks, BLOCK_M=bm, E_POW2=e_pow2,
            CHUNK=max(16, 16384 // e_pow2), num_warps=8,
            **(dict(x_ptr=a1, q_ptr=codes, qs_ptr=scales, stride_x=a1.stride(0), stride_q=codes.stride(0),
                    stride_qs=scales.stride(0), K=self.hidden, QUANT=True,
                    K_GROUPS=triton_pow2(-(-self.hidden // 128))) if quant else {}))
        if not quant:
            return None
        return codes.view(torch.float8_e4m3fn) if self.facts["fp8_dot"] else codes, scales

    def _align_round(self, ids: torch.Tensor, t: int, bm: int, a1: torch.Tensor):
        """_align's result and FC1's input as _round gives it: from the one alignment launch where it is
        align_small_kernel and the activations are 1x128 groups (no quantization launch), else _round's."""
        if self.act != ACT_GROUP or t > ALIGN_SMALL_PAIRS:
            return (*self._align(ids, t, bm), self._round(0, a1))
        blocks = -(-t // bm) + min(self.experts, t)
        sorted_ids = torch.empty(blocks * bm, dtype=torch.int32, device=self.device)
        block_expert = torch.empty(blocks, dtype=torch.int32, device=self.device)
        a_in = self._align_small(ids, t, bm, sorted_ids, block_expert, blocks, a1.contiguous())
        return sorted_ids, block_expert, blocks, a_in

    def _prep(self, ids: torch.Tensor, t: int, bm: int, a1: torch.Tensor, zero_out: torch.Tensor | None, k: int):
        """_align's result and FC1's input as _round gives it, from one launch (moe_kernels.prep_kernel) where
        the input is rounded to 1x128-group codes; other activations are rounded as _round does. zero_out:
        the output, whose rows of tokens with no expert id in range that launch zeroes (FUSE_SUM)."""
        from . import moe_kernels as mk

        blocks = -(-t // bm) + min(self.experts, t)
        dev = self.device
        rank = torch.empty(t, dtype=torch.int32, device=dev)
        sorted_ids = torch.empty(blocks * bm, dtype=torch.int32, device=dev)
        block_expert = torch.empty(blocks, dtype=torch.int32, device=dev)
        quant = self.act == ACT_GROUP
        if quant:
            codes = torch.empty(a1.shape, dtype=torch.uint8, device=dev)
            scales = torch.empty(-(-self.hidden // 128), a1.shape[0], dtype=torch.float32, device=dev)
        else:
            codes, scales = rank, rank
        mk.prep_kernel[(1 + (a1.shape[0] if quant else 0),)](
            ids, rank, self.counts, self.offsets, sorted_ids, block_expert, t, self.experts, blocks,
            a1, codes, scales, a1.stride(0), codes.stride(0) if quant else 0, scales.stride(0) if quant else 0,
            self.hidden, zero_out if zero_out is not None else a1, k, self.hidden, BLOCK_M=bm,
            E_POW2=triton_pow2(self.experts), BLOCK=256, QUANT=quant, K_GROUPS=triton_pow2(-(-self.hidden // 128)),
            ZERO_OUT=zero_out is not None)
        if quant:
            a_in = (codes.view(torch.float8_e4m3fn) if self.facts["fp8_dot"] else codes, scales)
        else:
            a_in = self._round(0, a1)
        return sorted_ids, block_expert, blocks, a_in

    def _check_quant_out(self, cfg: dict[str, int]) -> None:
        """QUANT_OUT needs FC1 tiles of exactly one 1x128 group of FC2's input (and group activations)."""
        bn1 = cfg.get("BLOCK_N1", cfg["BLOCK_N"]) if self.gated else cfg["BLOCK_N"]
        if self.act != ACT_GROUP or bn1 != 128 or cfg.get("FUSE_GU", 0):
            raise ValueError(f"QUANT_OUT: FC1 tiles of one 1x128 activation group (BLOCK_N1=128 and group "
                             f"activations, no FUSE_GU), not BLOCK_N1={bn1} with {self.mode.name}")

    def _topk_sum(self, pairs: torch.Tensor, ids: torch.Tensor, out: torch.Tensor, m: int, k: int,
                  weigh: torch.Tensor | None = None, dedup: bool = False) -> None:
        """out = the sum of each token's k pair rows (fp32, slot order); pairs of out-of-range ids add nothing.
        256-wide programs up to 64 tokens (more programs in flight: R7 timed 4.1 / 4.4 us for 2 x 16 /
        7 x 16 programs of 1024 at M = 16), 1024 above. weigh: the router weights, by which the rows (FC2's
        rounded outputs, moe_gemm_kernel RAW_PAIRS) are multiplied as they are added. dedup: a token's
        repeated expert id reads its first slot's row (moe_gemm_kernel BY_EXPERT computed only that one)."""
        from . import moe_kernels as mk

        block = 256 if m <= 64 else 1024
        mk.topk_sum_kernel[(m, -(-self.hidden // block))](pairs, ids, out, self.hidden, self.experts, TOPK=k,
                                                          BLOCK=block, EXACT_BF16=self.facts["dot_f32"],
                                                          topw_ptr=weigh, WEIGH=weigh is not None, DEDUP=dedup,
                                                          TOPK_P2=triton_pow2(k))

    def apply_direct(self, x: torch.Tensor, topw: torch.Tensor, ids: torch.Tensor, m: int, k: int,
                     config: dict[str, int] | None = None) -> torch.Tensor:
        """A few tokens: moe_gemv's up and down kernels (two launches, activations rounded inside).
        config keys: BLOCK_N/BLOCK_K/num_warps/num_stages/DECODE (both kernels unless the down
        kernel's BLOCK_N2/BLOCK_K2/WARPS2 are given); SPLIT_K selects moe_up_split_kernel (gate
        and up in one K loop, K split over SPLIT_K programs)."""
        from .moe_gemv import moe_down_kernel, moe_up_kernel, moe_up_split_kernel
        from .moe_kernels import ACTIVATION_CODES

        cfg = config or moe_gemv_config(m, self.w13.layout.elem, self.w13.layout.group,
                                        words=self.facts["hw_fp8"] and self.act == ACT_NONE)
        if cfg.get("XQ") and self.act == ACT_NVFP4 and self.w13.layout.elem == E2M1_NV:
            if cfg["XQ"] == 2 and self.w4a4_rega_ok(x):
                return self.apply_w4a4_rega(x, topw, ids, m, k, cfg)
            return self.apply_w4a4_rows(x, topw, ids, m, k, cfg, self.facts["hw_fp8"] and not interpreting())
        t, dev, bn = m * k, self.device, cfg["BLOCK_N"]
        by_pair = bool(self.layer.apply_router_weight_on_input)
        a1 = self._input(x, topw, k)
        common = dict(ELEM=self.w13.layout.elem, GROUP=self.w13.layout.group, SCALE_ROWS=self.w13.layout.scale_rows,
                      ACT=self.act, HW_FP8=self.facts["hw_fp8"], DECODE=cfg["DECODE"], EXACT_BF16=self.facts["dot_f32"],
                      OUT_F16=self.dtype == torch.float16, num_stages=cfg["num_stages"])
        w, lay = self.w13, self.w13.layout
        xw = bool(cfg.get("XW", 0)) and cfg["DECODE"] == 3 and lay.elem in (E2M1_MX, E2M1_NV) \
            and self.dtype == torch.bfloat16 and self.act == ACT_NONE
        common["XW"] = xw and _rows_align8(a1)
        split = cfg.get("SPLIT_K")
        # packed f16 products: MXFP4 only (NVFP4 W4A16 runs the same code, but no GPU run has checked it yet)
        hx = int(cfg.get("HX", 0)) if common["XW"] and split is not None and lay.elem == E2M1_MX else 0
        if hx == 2 and lay.group != 32:          # one sum per scale group: 4 words (MXFP4's groups)
            hx = 1
        common["HX"] = hx
        guard = bool(cfg.get("GUARD", 1))      # HX: a tile whose f16 products overflowed is redone in fp32
        tail = int(cfg.get("TAIL", 1)) if hx else 0     # whole K tiles without masks: 1 both kernels, 2 FC2 only
        common["TAIL"] = tail == 1
        inter = torch.empty(t, self.inter, dtype=self.dtype, device=dev)
        xs = self._act_scale(0, a1)
        up_args = (w.weight, w.scale, _or(w.zero, w.scale), _or(w.global_scale, w.scale), _or(self.b13, w.scale),
                   _or(xs, w.scale), inter)
        up_tail = (self.experts, k, self.inter, self.rows, self.hidden, a1.stride(0), inter.stride(0),
                   *_expert_strides(w, self.b13), lay.stride_wn, lay.stride_wk, lay.stride_sn, lay.stride_sk,
                   lay.stride_zk, float(self.limit if self.limit is not None else 0.0), float(self.alpha),
                   float(self.beta), float(self.lbeta))
        up_flags = dict(ACTFN=ACTIVATION_CODES[self.layer.activation], GATED=self.gated,
                        INTERLEAVED=self.layer.activation in INTERLEAVED_ACTIVATIONS, HAS_LIMIT=self.limit is not None,
                        A_BY_PAIR=by_pair, HAS_ZERO=lay.stride_zk != 0, HAS_BIAS=self.b13 is not None,
                        BLOCK_N=bn, BLOCK_K=cfg["BLOCK_K"], num_warps=cfg["num_warps"], **common)
        tiles_up = -(-self.inter // bn)
        if split is None:
            moe_up_kernel[(t, tiles_up)](a1, ids, *up_args, *up_tail, **up_flags)
        else:
            part = torch.empty(split, t, 2, self.inter, dtype=torch.float32, device=dev) if split > 1 else inter
            cnt = self._counters(t * tiles_up, "_up_counters") if split > 1 else ids
            moe_up_split_kernel[(t, tiles_up, split)](a1, ids, *up_args, part, cnt, *up_tail, SPLIT_K=split,
                                                      PAIRS=bool(int(cfg.get("PAIRS", 0)) & 1), GUARD=guard,
                                                      **up_flags)
        w, lay = self.w2, self.w2.layout
        xs = self._act_scale(1, inter)
        common["XW"] = xw and _rows_align8(inter)
        common["HX"] = hx if common["XW"] else 0
        common["TAIL"] = tail in (1, 2) and bool(common["HX"])
        out = torch.empty(m, self.hidden, dtype=self.dtype, device=dev)
        bn2 = cfg.get("BLOCK_N2", bn)
        tiles = -(-self.hidden // bn2)
        bk2, warps2 = cfg.get("BLOCK_K2", cfg["BLOCK_K"]), cfg.get("WARPS2", cfg["num_warps"])
        part = torch.empty(k, m, self.hidden, dtype=torch.float32, device=dev) if k > 1 else out
        cnt = self._counters(m * tiles) if k > 1 else w.scale
        moe_down_kernel[(m, tiles, k)](
            inter, ids, topw, w.weight, w.scale, _or(w.zero, w.scale), _or(w.global_scale, w.scale),
            _or(self.b2, w.scale), _or(xs, w.scale), out, part, cnt, m, self.experts, k, self.hidden, self.inter,
            inter.stride(0), out.stride(0), *_expert_strides(w, self.b2),
            lay.stride_wn, lay.stride_wk, lay.stride_sn, lay.stride_sk, lay.stride_zk,
            WEIGHT_OUT=not by_pair, HAS_ZERO=lay.stride_zk != 0, HAS_BIAS=self.b2 is not None, SPLIT=k,
            BLOCK_N=bn2, BLOCK_K=bk2, num_warps=warps2, GUARD=guard, PAIRS=bool(int(cfg.get("PAIRS", 0)) & 2),
            **common)
        return out

    def _rounded_nvfp4(self, idx: int, a: torch.Tensor) -> torch.Tensor:
        """FC1's (idx 0) or FC2's (idx 1) input a [rows, K] rounded through NVFP4 (values in a's dtype): one
        program (moe_w4a4.nvfp4_round_kernel) for a dynamic scale of a small tensor, else _round's launches."""
        from .moe_w4a4 import ROUND_BLOCK, ROUND_WARPS, nvfp4_round_kernel

        if self.static[idx] is not None or not a.is_contiguous() or a.numel() > TENSOR_SCALE_MAX:
            return self._round(idx, a)[0]
        out = torch.empty_like(a)
        xs = torch.empty(1, dtype=torch.float32, device=a.device)
        nvfp4_round_kernel[(1,)](a, out, xs, a.numel(), BLOCK=ROUND_BLOCK, EXACT_BF16=self.facts["dot_f32"],
                                 num_warps=ROUND_WARPS)
        return out

    def apply_w4a4_rows(self, x: torch.Tensor, topw: torch.Tensor, ids: torch.Tensor, m: int, k: int,
                        cfg: dict[str, int], ptx: bool) -> torch.Tensor:
        """The one-row NVFP4 W4A4 path (config XQ, oracle_triton.moe_w4a4): the inputs rounded once
        (_rounded_nvfp4), FC1 and FC2 by moe_w4a4_up_kernel / moe_w4a4_down_kernel. cfg: BLOCK_N/BLOCK_K/
        num_warps/num_stages (FC1), BLOCK_N2/BLOCK_K2/WARPS2 (FC2), PAIRS (bit 1 FC1, bit 2 FC2). ptx: the
        PRMT decoder (compiled GPU runs; the interpreter computes the same weights by Triton arithmetic)."""
        from .moe_kernels import ACTIVATION_CODES
        from .moe_w4a4 import moe_w4a4_down_kernel, moe_w4a4_up_kernel

        t, dev = m * k, self.device
        by_pair = bool(self.layer.apply_router_weight_on_input)
        exact, f16 = self.facts["dot_f32"], self.dtype == torch.float16
        a1 = self._rounded_nvfp4(0, self._input(x, topw, k))
        w = self.w13
        we, se, _, be = _expert_strides(w, self.b13)
        inter = torch.empty(t, self.inter, dtype=self.dtype, device=dev)
        bn = cfg["BLOCK_N"]
        moe_w4a4_up_kernel[(t, -(-self.inter // bn))](
            a1, ids, w.weight, w.scale, w.global_scale, _or(self.b13, w.scale), inter, self.experts, k, self.inter,
            self.rows, self.hidden, a1.stride(0), inter.stride(0), we, se, be, w.layout.stride_wn, w.layout.stride_sn,
            float(self.limit if self.limit is not None else 0.0), float(self.alpha), float(self.beta),
            float(self.lbeta), ACTFN=ACTIVATION_CODES[self.layer.activation], GATED=self.gated,
            INTERLEAVED=self.layer.activation in INTERLEAVED_ACTIVATIONS, HAS_LIMIT=self.limit is not None,
            A_BY_PAIR=by_pair, HAS_BIAS=self.b13 is not None, BLOCK_N=bn, BLOCK_K=cfg["BLOCK_K"], PTX=ptx,
            EXACT_BF16=exact, OUT_F16=f16, PAIRS=bool(int(cfg.get("PAIRS", 0)) & 1), num_warps=cfg["num_warps"],
            num_stages=cfg["num_stages"])
        a2 = self._rounded_nvfp4(1, inter)
        w = self.w2
        we, se, _, be = _expert_strides(w, self.b2)
        out = torch.empty(m, self.hidden, dtype=self.dtype, device=dev)
        bn2 = cfg.get("BLOCK_N2", bn)
        tiles = -(-self.hidden // bn2)
        part = torch.empty(k, m, self.hidden, dtype=torch.float32, device=dev) if k > 1 else out
        cnt = self._counters(m * tiles) if k > 1 else w.scale
        moe_w4a4_down_kernel[(m, tiles, k)](
            a2, ids, topw, w.weight, w.scale, w.global_scale, _or(self.b2, w.scale), out, part, cnt, m, self.experts,
            k, self.hidden, self.inter, a2.stride(0), out.stride(0), we, se, be, w.layout.stride_wn,
            w.layout.stride_sn, WEIGHT_OUT=not by_pair, HAS_BIAS=self.b2 is not None, SPLIT=k, BLOCK_N=bn2,
            BLOCK_K=cfg.get("BLOCK_K2", cfg["BLOCK_K"]), PTX=ptx, EXACT_BF16=exact, OUT_F16=f16,
            PAIRS=bool(int(cfg.get("PAIRS", 0)) & 2), num_warps=cfg.get("WARPS2", cfg["num_warps"]),
            num_stages=cfg["num_stages"])
        return out

    def w4a4_rega_ok(self, x: torch.Tensor) -> bool:
        """Can the register-A kernels (XQ 2) serve this call: bf16, an sm_90 GPU (w4_rega is Gluon: wgmma,
        compiled only), hidden and intermediate sizes multiples of w4_rega's 128-wide K tile, the NVFP4 words
        along K in rows of whole 16-byte pieces (the int32 view). Else XQ 1's kernels serve the entry
        (apply_w4a4_rows)."""
        layer_ok = getattr(self, "_rega_layer_ok", None)
        if layer_ok is None:        # the layer's part, checked once (not on every call's hot path)
            layer_ok = self._rega_layer_ok = rega_layer_ok(self, 128)
        return layer_ok and x.dtype == torch.bfloat16

    def apply_w4a4_rega(self, x: torch.Tensor, topw: torch.Tensor, ids: torch.Tensor, m: int, k: int,
                        cfg: dict[str, int]) -> torch.Tensor:
        """The one-row NVFP4 W4A4 path on tensor cores (config XQ 2): FC1 and FC2 by w4_rega_kernel's MoE mode
        (each pair's activation row as the 16-row tile's first row, the exact byte-table weights as wgmma's
        register A operand, TABLE), between them the activation over many programs (moe_w4a4.w4a4_act_kernel) and
        FC2's input rounding (_rounded_nvfp4), then the router-weighted top-k sum (_topk_sum): the XQ kernels spent
        ~9 instructions a weight on CUDA cores. cfg: RWARPS / RSPLIT (FC1's 16 x RWARPS weight rows a program,
        K split RSPLIT ways), RWARPS2 / RSPLIT2 (FC2), XT / PF / TABLE (both, as a REGA entry's), XDB (both: the
        activations' chunks double-buffered)."""
        t, dev = m * k, self.device
        by_pair = bool(self.layer.apply_router_weight_on_input)
        a1 = self._rounded_nvfp4(0, self._input(x, topw, k))
        y1 = torch.empty(t, self.rows, dtype=self.dtype, device=dev)
        self._rega(0, a1, ids, y1, t, k, by_pair, self.w13, self.b13, cfg["RWARPS"], cfg["RSPLIT"], cfg)
        inter = self._activation(y1, ids)
        a2 = self._rounded_nvfp4(1, inter)
        y2 = torch.empty(t, self.hidden, dtype=self.dtype, device=dev)
        self._rega(1, a2, ids, y2, t, k, True, self.w2, self.b2, cfg.get("RWARPS2", cfg["RWARPS"]),
                   cfg.get("RSPLIT2", cfg["RSPLIT"]), cfg)
        out = torch.empty(m, self.hidden, dtype=self.dtype, device=dev)
        self._topk_sum(y2, ids, out, m, k, weigh=None if by_pair else topw)
        return out

    def _rega(self, idx: int, a: torch.Tensor, ids: torch.Tensor, y: torch.Tensor, t: int, k: int, by_pair: bool,
              w, bias: torch.Tensor | None, warps: int, split: int, cfg: dict[str, int]) -> None:
        """y[p] = a's row of pair p (p // k, or p with by_pair) times pair p's expert's weights w (+ bias), in
        the layer dtype: one w4_rega_kernel launch, grid (rows / (16 x warps), pairs, split)."""
        from .w4_rega import launch_keys, w4_rega_kernel

        words = w.weight.view(torch.int32)          # [E, rows, K / 8]: word j = codes k 8j..8j+7
        n, kdim = words.shape[1], a.shape[1]
        tiles = -(-n // (16 * warps))
        if split > 1:
            part = torch.empty(split, t, n, dtype=torch.float32, device=a.device)
            cnt = self._counters(t * tiles, f"_rega{idx}_counters")
        else:
            part, cnt = y, ids
        w4_rega_kernel[(tiles, t, split)](
            a, words, w.scale, w.scale, w.global_scale, _or(bias, w.scale), y, part, cnt, t, n, kdim, a.stride(0),
            y.stride(0), words.stride(1), 1, w.scale.stride(1), 1, 0, ELEM=E2M1_NV, GROUP=16, HAS_ZERO=False,
            HAS_BIAS=bias is not None, SPLIT_K=split, XT=cfg["XT"], PF=cfg.get("PF", 2),
            **launch_keys(cfg, w.scale.data_ptr() | w.scale.stride(0), w.scale.stride(1)), ids_ptr=ids,
            E=self.experts, TOPK=k,
            stride_we=words.stride(0), stride_se=w.scale.stride(0), stride_be=bias.stride(0) if bias is not None else 0,
            MOE=1, A_BY_PAIR=by_pair, XDB=cfg.get("XDB", 0), num_warps=warps)

    def _activation(self, y1: torch.Tensor, ids: torch.Tensor, ids_first: bool = False) -> torch.Tensor:
        """FC2's input [rows, I] from FC1's rows y1 [rows, N_W] (bias added, layer dtype), the activation over many
        programs (moe_w4a4.w4a4_act_kernel); ids: each row's expert id (zeros where out of range); ids_first: those
        rows not read (moe_ws's block rows, many of them padding)."""
        from .moe_kernels import ACTIVATION_CODES
        from .moe_w4a4 import w4a4_act_kernel

        rows = y1.shape[0]
        inter = torch.empty(rows, self.inter, dtype=self.dtype, device=y1.device)
        w4a4_act_kernel[(-(-rows * self.inter // 1024),)](
            y1, ids, inter, rows * self.inter, self.experts, self.inter, y1.stride(0),
            float(self.limit if self.limit is not None else 0.0), float(self.alpha), float(self.beta),
            float(self.lbeta), ACTFN=ACTIVATION_CODES[self.layer.activation], GATED=self.gated,
            INTERLEAVED=self.layer.activation in INTERLEAVED_ACTIVATIONS, HAS_LIMIT=self.limit is not None,
            BLOCK=1024, EXACT_BF16=self.facts["dot_f32"], IDS_FIRST=ids_first, num_warps=4)
        return inter

    def _counters(self, tiles: int, name: str = "_down_counters") -> torch.Tensor:
        """Arrival counters of a slice reduction (zero between calls), one per output tile: moe_down_kernel's
        slots (name _down_counters) or moe_up_split_kernel's K slices (_up_counters)."""
        have = getattr(self, name, None)
        if have is None or have.numel() < tiles:
            have = torch.zeros(max(tiles, 64), dtype=torch.int32, device=self.device)
            setattr(self, name, have)
        return have

    def _gemm(self, stage, a_in, by_pair, packed, bias, topw, sorted_ids, block_expert, out, t, k, n_out, n_w, kdim,
              cfg, blocks, direct: bool = False, quant_in: bool = False, sum_out: torch.Tensor | None = None,
              out_scales: torch.Tensor | None = None, pro: tuple | None = None, gdc: int = 0,
              cnt: torch.Tensor | None = None, pair_ids: torch.Tensor | None = None,
              prefetch: tuple | None = None, raw_pairs: bool = False, by_expert: bool = False,
              last: tuple | None = None, pf_head: int = 0) -> None:
        """One grouped GEMM; a_in = (A, its FP8 scales or None) from _round (quant_in: A in the layer
        dtype and its per-tensor scale or None, rounded to codes inside). direct: block_expert holds
        the pairs' expert ids, one pair per program; sum_out (stage 2, direct): the top-k sum is written
        there by the GEMM itself (FUSE_SUM; sorted_ids then holds its arrival counters); out_scales (stage 1,
        direct): out gets FC2's input as E4M3 codes and out_scales their 1x128 group scales (QUANT_OUT);
        pro (direct): (layer-dtype input, uint8 view of a_in's codes buffer), filled by the GEMM's
        programs before their loops (QUANT_PRO). gdc: moe_gemm_kernel's GDC (programmatic dependent
        launch; 2 and 3 launch this GEMM with launch_pdl). cnt, pair_ids (stage 2, aligned, with sum_out):
        the top-k sum's arrival counters and the pairs' expert ids (moe_kernels.sum_rows). prefetch (stage 1,
        direct): (the next GEMM's packed weights, bytes per program, bytes per expert) asked of L2 by
        each program after its store (PF_NEXT). raw_pairs (stage 2, aligned): out is in the layer dtype and
        gets the rounded outputs unweighted (RAW_PAIRS; _topk_sum weighs them). by_expert (aligned tiles without
        the alignment launches, blocks = experts): sorted_ids holds the pairs' expert ids (BY_EXPERT). last
        (stage 1, direct): (codes, group scales, arrival counters): the last program of each pair rounds its
        output row into them (QUANT_LAST). pf_head: bytes of each weight row asked of L2 first (PF_HEAD).
        cfg K_PAIR (W8A8 on codes; bit 1 FC1, bit 2 FC2): the K loop takes two tiles an iteration
        (moe_gemm_kernel K_UNROLL) where K is a multiple of two tiles, else one."""
        from .moe_kernels import ACTIVATION_CODES, moe_gemm_kernel

        a, a_scale = a_in
        codes = a_scale is not None or quant_in
        fp8_dot = codes and self.facts["fp8_dot"]
        lay = packed.layout
        w = packed.weight.view(torch.float8_e4m3fn) if fp8_dot else packed.weight
        s, z, g = packed.scale, packed.zero, packed.global_scale
        stride = lambda tt: tt.stride(0) if tt is not None else 0   # noqa: E731
        gated = stage == 1 and self.gated
        bn = cfg.get("BLOCK_N1", cfg["BLOCK_N"]) if gated else cfg["BLOCK_N"]
        warps, stages = cfg["num_warps"], cfg["num_stages"]
        if stage == 2:                              # FC2 may have its own warps and stages (and tile: direct)
            bn = cfg.get("BLOCK_N2", bn) if direct else bn
            warps, stages = cfg.get("WARPS2", warps), cfg.get("STAGES2", stages)
        fuse = gated and bool(cfg.get("FUSE_GU", 0))
        interleaved = self.layer.activation in INTERLEAVED_ACTIVATIONS
        rows = packed.layout.scale_rows      # do the tile's gate (and up) rows each sit in one scale block?
        uniform = codes and not fuse and rows % ((2 if gated and interleaved else 1) * bn) == 0 and (
            not gated or interleaved or n_out % rows == 0)
        n_fast = bool(cfg.get("N_FAST", 0)) and not direct
        swap_ab = codes and not quant_in and bool(int(cfg.get("SWAP_AB", 0)) & stage)    # bit 1 FC1, bit 2 FC2
        k_pair = codes and not quant_in and bool(int(cfg.get("K_PAIR", 0)) & stage) and \
            kdim % (2 * cfg["BLOCK_K"]) == 0                # K_UNROLL 2 (bit 1 FC1, bit 2 FC2)
        moe_gemm_kernel[(-(-n_out // bn), blocks) if n_fast else (blocks, -(-n_out // bn))](
            a, w, s, z if z is not None else s, g if g is not None else s,
            bias if bias is not None else s, topw, sorted_ids, block_expert, out, a_scale if a_scale is not None else s,
            t, k, n_out, n_w, kdim, a.stride(0), out.stride(0),
            stride(w), stride(s), stride(z), stride(bias),
            lay.stride_wn, lay.stride_wk, lay.stride_sn, lay.stride_sk, lay.stride_zk, a.shape[0],
            float(self.limit if self.limit is not None else 0.0), float(self.alpha), float(self.beta),
            float(self.lbeta), self.experts, sum_out if sum_out is not None else out,
            STAGE=stage, ACTFN=ACTIVATION_CODES[self.layer.activation], GATED=gated,
            INTERLEAVED=interleaved, HAS_LIMIT=self.limit is not None,
            A_BY_PAIR=by_pair, WEIGHT_OUT=not self.layer.apply_router_weight_on_input,
            ELEM=lay.elem, PACK=lay.pack, GROUP=lay.group, SCALE_ROWS=lay.scale_rows,
            HAS_ZERO=lay.stride_zk != 0, EXACT_W=self.act != ACT_NONE, HAS_BIAS=bias is not None,
            BLOCK_M=cfg["BLOCK_M"], BLOCK_N=bn, BLOCK_K=cfg["BLOCK_K"],
            HW_FP8=self.facts["hw_fp8"], DOT_F32=self.facts["dot_f32"], OUT_F16=self.dtype == torch.float16,
            A_CODES=self.act if codes else 0, FP8_DOT=fp8_dot,
            FULL_TILE=bool(cfg.get("FULL_TILE", 0)) and lay.pack > 1, FUSE_GU=fuse, UNIFORM_WS=uniform,
            EVEN_K=kdim % cfg["BLOCK_K"] == 0, DIRECT=direct, QUANT_IN=quant_in, FUSE_SUM=sum_out is not None,
            os_ptr=out_scales if last is None else last[1], QUANT_OUT=out_scales is not None,
            lq_ptr=last[0] if last else None, QUANT_LAST=last is not None,
            N_GROUPS=triton_pow2(-(-n_out // 128)) if last else 1,
            xq_ptr=pro[0] if pro else None, qc_ptr=pro[1] if pro else None, stride_xq=pro[0].stride(0) if pro else 0,
            QUANT_PRO=pro is not None, K_GROUPS=triton_pow2(-(-kdim // 128)) if pro else 1, GDC=gdc,
            cnt_ptr=cnt if last is None else last[2], ids_ptr=pair_ids, N_FAST=n_fast, PF_NEXT=prefetch is not None,
            pf_ptr=prefetch[0] if prefetch else None, pf_stride_e=prefetch[0].stride(0) if prefetch else 0,
            pf_bytes=prefetch[1] if prefetch else 0, pf_total=prefetch[2] if prefetch else 0, RAW_PAIRS=raw_pairs,
            BY_EXPERT=by_expert, T_POW2=triton_pow2(t) if by_expert else 1, SWAP_AB=swap_ab, PF_HEAD=pf_head,
            K_UNROLL=2 if k_pair else 1, num_warps=warps, num_stages=stages,
            **({"launch_pdl": True} if gdc >= 2 else {}))

    def warmup_units(self, token_counts: Sequence[int]) -> list:
        from oracle.warmup import WarmupUnit

        units = []
        for m in token_counts:
            cfg = self.config_for(m, self.layer.top_k)
            sig = (self.mode.name, self.experts, self.hidden, self.inter, self.layer.activation,
                   tuple(sorted(cfg.items())))

            def run(m=m):
                x = torch.zeros(m, self.hidden, dtype=self.dtype, device=self.device)
                ids = (torch.arange(m * self.layer.top_k, device=self.device) % self.experts).view(m, -1)
                self.apply(x, torch.ones(m, self.layer.top_k, device=self.device), ids.to(torch.int32))
            units.append(WarmupUnit(self.spec.name if self.spec else "triton.moe", sig, run))
        return units


def _or(t: torch.Tensor | None, placeholder: torch.Tensor) -> torch.Tensor:
    """Kernels take a pointer for every optional tensor; an absent one is never read (constexpr off)."""
    return t if t is not None else placeholder


def _rows_align8(a: torch.Tensor) -> bool:
    """Every row of `a` starts on 8 bytes (XW reads bf16 activations 64 bits at a time)."""
    return a.data_ptr() % 8 == 0 and (a.stride(0) * a.element_size()) % 8 == 0 and a.stride(-1) == 1


def _expert_strides(packed, bias: torch.Tensor | None) -> tuple[int, int, int, int]:
    """Per-expert strides of weight, scale, zero points and bias (0 where absent)."""
    stride = lambda tt: tt.stride(0) if tt is not None else 0   # noqa: E731
    return stride(packed.weight), stride(packed.scale), stride(packed.zero), stride(bias)


def triton_pow2(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p
