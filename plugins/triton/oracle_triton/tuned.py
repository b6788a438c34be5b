"""Launch configurations measured per device and shape, shipped as data beside the kernels.

`tuned_configs.json` holds, per device name (as the driver reports it, e.g. "NVIDIA H200"), the
winners of `bench/sweep_large_m.py --write-table`, `bench/sweep_dense.py --write-table` and
`bench/sweep_moe.py` for each layer shape and token bucket: the way engines ship tuned per-device
JSON for their fused MoE. `DenseGemm.config_for` consults it at every M (an entry names its path:
the tiled GEMM, the one-row GEMV (it has DECODE), a swap-AB kernel (SWAP) or, for FP8 W8A8 per
channel, our activation codes multiplied by torch._scaled_mm (SCALED_MM), or, at many rows, the
weight dequantized once and multiplied by cuBLAS (DEQUANT_MM)); `TritonMoE.config_for` likewise
(a MoE entry may name a decode path: DIRECT, tensor-core tiles with one pair per program, or
DECODE, the CUDA-core direct path). Both fall back to the shape rules (launch.dense_config /
gemv_config / swap_config, moe.moe_config / moe.use_direct) where the table has no entry.

Key: kind ("dense" | "moe"), the mode name (weight format and activation handling), N and K of
the weight (per expert for MoE: the w13 rows and the hidden size), the expert count (MoE) and the
token bucket: the smallest of BUCKETS that is >= M (MoE: tokens, not pairs). An INT4 entry may also say
"zero_point": true or false, for experts with or without zero points only (INT4-zp and symmetric INT4
take different paths at 16 tokens on the H200: bench/results/h200-2026-12-02/moe10a_rounds.md); without
it an entry serves both, and an entry that says it is preferred where it matches. A file that does not
validate is an error naming the file and the entry; the launch parameters must pass the kernels'
own check (formats.check_config) when loaded, not at the first call.

Siblings: the file's "traits" give each device's compute capability and SM count. A device with no entry for
a key takes the entry of a device with the same traits (SIBLINGS), in the file's order: an H100 SXM or a GH200
(9.0, 132 SMs) the H200's, measured faster than the shape rules there (bench/results/h200-2026-12-05/r112); a
device of other traits (an H100 PCIe: 114 SMs) keeps the shape rules.
"""
from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from oracle.errors import PolicyError

from .formats import check_config, check_direct_config, layout_for, words_layout

TABLE = Path(__file__).with_name("tuned_configs.json")
BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
KEYS = {"BLOCK_M", "BLOCK_N", "BLOCK_N1", "BLOCK_K", "SPLIT_K", "GROUP_M", "FULL_TILE", "FUSE_GU", "SWAP", "DECODE",
        "SCALED_MM", "DEQUANT_MM", "ROWS", "PREFETCH", "PDL", "PF_L2", "KN", "COOP", "COOP_K", "COOP_SPIN", "WG", "PERM",
        "X_PIPE", "QUANT_IN", "EVICT", "PF_HEAD", "ROWGEMV", "ROWQ", "REGA", "XT", "PF", "SWAP_WARPS", "EARLY",
        "TABLE", "W4ROW", "MAXNREG", "HX", "WAIT", "VEC", "WS", "BM", "STAGES", "DW", "DREGS", "PFENCE", "XCP", "WPF",
        "MW", "XTMA", "PP", "DP", "WT", "PT", "BK", "PROMO", "FASTACC", "num_warps", "num_stages"}
NEEDED = {"BLOCK_M", "BLOCK_N", "BLOCK_K", "num_warps", "num_stages"}
#: Dense: a one-row GEMV entry (it has DECODE) has no BLOCK_M; a swap entry (SWAP) and a 4-bit wgmma
#: entry (WG: w4_wgmma) say their split.
NEEDED_GEMV = {"BLOCK_N", "BLOCK_K", "SPLIT_K", "DECODE", "num_warps", "num_stages"}
NEEDED_SWAP = NEEDED | {"SPLIT_K"}
#: Dense: the FP8 one-row CUDA-core GEMV (ROWGEMV 3: fp8_rowgemv) has no BLOCK_M.
NEEDED_ROWGEMV = {"ROWGEMV", "BLOCK_N", "BLOCK_K", "SPLIT_K", "num_warps", "num_stages"}
#: Dense: the register-A few-row 4-bit kernel (REGA: w4_rega, 16 x num_warps weight rows per program); it may
#: carry the swap entry it replaced (SWAP_WARPS and formats.REGA_SWAP_KEYS), for the calls w4_rega cannot serve.
NEEDED_REGA = {"REGA", "SPLIT_K", "XT", "num_warps"}
#: Dense: the warp-specialized many-row 4-bit kernel (WS: w4_ws; BM activation rows a program, a ring of STAGES K
#: tiles, DW decode warps with DREGS registers each, MAXNREG the launch's register budget a thread).
NEEDED_WS = {"WS", "BM", "STAGES", "DW", "DREGS", "MAXNREG", "num_warps"}
#: MoE only: the decode paths. DIRECT 1: tensor-core tiles, one pair per program (the tile keys
#: above); DECODE: the CUDA-core direct path (moe_gemv: BLOCK_N/BLOCK_K/SPLIT_K of the up kernel,
#: BLOCK_N2/BLOCK_K2/WARPS2 of the down kernel); SWAP with WORDS 1: 4-bit weights on swap-AB
#: tensor-core tiles decoded a word at a time (TritonMoE.apply_swap; SPLIT_K, BLOCK_N1, JOIN). The
#: other keys are options of the tensor-core paths (TritonMoE.apply_direct_mma and the aligned
#: forward; moe_kernels.moe_gemm_kernel says what each does). XQ 1: the one-token NVFP4 W4A4 byte-table kernels
#: (moe_w4a4, the DECODE keys); XQ 2: w4_rega's MoE mode for FC1 / FC2 (RWARPS / RSPLIT, RWARPS2 / RSPLIT2, XT, PF,
#: TABLE, XDB; TritonMoE.apply_w4a4_rega), the XQ 1 keys serving the calls it cannot.
MOE_KEYS = {"DIRECT", "FUSE_SUM", "QUANT_IN", "QUANT_OUT", "QUANT_PRO", "PDL", "PREP", "SCALED_DOT", "PREFETCH",
            "DECODE", "BLOCK_N2", "BLOCK_K2", "WARPS2", "STAGES2", "N_FAST", "PF_NEXT", "WORDS", "JOIN",
            "BY_EXPERT", "QUANT_LAST", "XW", "HX", "TAIL", "SWAP_AB", "PF_HEAD", "X_PIPE", "PERSIST", "PAIRS",
            "GUARD", "XQ", "K_PAIR", "TABLE", "DQ_OVERLAP", "RWARPS", "RSPLIT", "RWARPS2", "RSPLIT2",
            "XDB", "XP", "WS_WARPS", "WS_ACT", "WS_HALF", "WS_TAIL", "WS_QACT", "WGN", "QPDL"}
NEEDED_DECODE = {"BLOCK_N", "BLOCK_K", "num_warps", "num_stages", "DECODE"}
#: bf16: the fused MoE's BF16 mode (mode "bf16"), the benchmarks' own BF16 baseline, tuned like the formats it is set beside
FORMATS = {"fp8_block", "fp8_channel", "fp8_tensor", "mxfp4", "nvfp4", "int4", "bf16"}
#: On (shipped): a device without an entry for a key takes a sibling's (same capability and SM count, the file's
#: "traits"); off: the shape rules there (the benchmarks' "rules" variants switch it off to time what it replaces)
SIBLINGS = True
Traits = tuple[tuple[int, int], int]


class Table(dict):
    """{device: {key: config}}, and `traits`: {device: ((major, minor), SM count)} as the file states them."""
    traits: dict[str, Traits]


def bucket(m: int) -> int:
    """The smallest bucket >= m (the largest bucket above that)."""
    for b in BUCKETS:
        if m <= b:
            return b
    return BUCKETS[-1]


def _fail(path: Path, where: str, expected: str, got: Any) -> PolicyError:
    return PolicyError(f"{path}: {where}: expected {expected}, got {got!r}")


def parse_traits(data: Any, path: Path) -> dict[str, Traits]:
    """The file's optional "traits": {device: {"capability": [major, minor], "sms": count}}, checked."""
    raw = data.get("traits", {})
    if not isinstance(raw, dict):
        raise _fail(path, "traits", "a mapping {device: {capability: [major, minor], sms: count}}", raw)
    out: dict[str, Traits] = {}
    for device, t in raw.items():
        cap = t.get("capability") if isinstance(t, dict) else None
        sms = t.get("sms") if isinstance(t, dict) else None
        if not isinstance(cap, list) or len(cap) != 2 or not all(type(v) is int and v >= 0 for v in cap):
            raise _fail(path, f"traits.{device}.capability", "[major, minor], two integers", cap)
        if type(sms) is not int or sms <= 0:
            raise _fail(path, f"traits.{device}.sms", "a positive integer (the SM count)", sms)
        out[device] = ((cap[0], cap[1]), sms)
    return out


def parse(data: Any, path: Path) -> Table:
    """The file's content -> {device: {(kind, mode, weight, n, k, experts, bucket): config}} with the devices'
    traits, checked."""
    if not isinstance(data, dict) or data.get("schema") != 1 or not isinstance(data.get("devices"), dict):
        raise _fail(path, "top level", "a mapping with schema: 1 and devices: {name: [entries]}", data)
    out = Table()
    out.traits = parse_traits(data, path)
    for device, entries in data["devices"].items():
        if not isinstance(entries, list):
            raise _fail(path, f"devices.{device}", "a list of entries", entries)
        table = out.setdefault(device, {})
        for i, e in enumerate(entries):
            where = f"devices.{device}[{i}]"
            if not isinstance(e, dict):
                raise _fail(path, where, "a mapping", e)
            if e.get("kind") not in ("dense", "moe"):
                raise _fail(path, f"{where}.kind", "dense or moe", e.get("kind"))
            if e.get("weight") not in FORMATS:
                raise _fail(path, f"{where}.weight", f"one of {sorted(FORMATS)}", e.get("weight"))
            for field in ("n", "k", "m") + (("experts",) if e["kind"] == "moe" else ()):
                if not isinstance(e.get(field), int) or isinstance(e.get(field), bool) or e[field] <= 0:
                    raise _fail(path, f"{where}.{field}", "a positive integer", e.get(field))
            if e["m"] not in BUCKETS:
                raise _fail(path, f"{where}.m", f"a token bucket {list(BUCKETS)}", e["m"])
            if e["kind"] == "dense" and isinstance(e.get("config"), dict) and "DECODE" in e["config"] \
                    and not e["config"].get("SWAP") and not e["config"].get("REGA") and e["m"] != 1:
                raise _fail(path, f"{where}.m", "1 (a GEMV configuration serves one activation row)", e["m"])
            if e["kind"] == "dense" and isinstance(e.get("config"), dict) and e["config"].get("ROWGEMV") and e["m"] != 1:
                raise _fail(path, f"{where}.m", "1 (a ROWGEMV configuration serves one activation row)", e["m"])
            if "zero_point" in e and (not isinstance(e["zero_point"], bool) or e.get("weight") != "int4"):
                raise _fail(path, f"{where}.zero_point", "true or false, on an int4 entry only", e["zero_point"])
            if not isinstance(e.get("mode"), str):
                raise _fail(path, f"{where}.mode", "the kernel mode name, e.g. w8a8_block", e.get("mode"))
            cfg = e.get("config")
            moe = e["kind"] == "moe"
            allowed = KEYS | MOE_KEYS if moe else KEYS
            needed = NEEDED
            if isinstance(cfg, dict):
                if moe:
                    needed = NEEDED_DECODE if "DECODE" in cfg else NEEDED
                else:
                    needed = {"SCALED_MM"} if cfg.get("SCALED_MM") else {"DEQUANT_MM"} if cfg.get("DEQUANT_MM") \
                        else NEEDED_ROWGEMV if cfg.get("ROWGEMV") else NEEDED_REGA if cfg.get("REGA") \
                        else NEEDED_WS if cfg.get("WS") \
                        else NEEDED_SWAP if cfg.get("SWAP") or cfg.get("WG") else (NEEDED_GEMV if "DECODE" in cfg else NEEDED)
            if not isinstance(cfg, dict) or not needed <= set(cfg) or not set(cfg) <= allowed or \
                    not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in cfg.values()):
                raise _fail(path, f"{where}.config", f"integer launch parameters with {sorted(needed)} "
                            f"(allowed: {sorted(allowed)})", cfg)
            try:
                check = check_direct_config if moe and "DECODE" in cfg else check_config
                lay = words_layout(e["weight"], e["n"], e["k"]) if cfg.get("KN") and not moe else \
                    layout_for(e["weight"], e["n"], e["k"], e.get("group", 128))
                check(cfg, lay, where)
            except ValueError as exc:
                raise _fail(path, f"{where}.config", "launch parameters the kernels cover", str(exc)) from None
            key = (e["kind"], e["mode"], e["n"], e["k"], e.get("experts", 0), e["m"], e.get("zero_point"))
            table[key] = dict(cfg)
    return out


@functools.lru_cache(maxsize=None)
def load(path: Path) -> Table:
    """A table file (read once per path); a missing file is an empty table."""
    if not path.exists():
        empty = Table()
        empty.traits = {}
        return empty
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise PolicyError(f"{path}: not valid JSON ({exc})") from None
    return parse(data, path)


def find(device: str | None, kind: str, mode: str, n: int, k: int, m: int, experts: int = 0,
         path: Path | None = None, zero_point: bool | None = None,
         traits: Traits | None = None) -> tuple[dict[str, int] | None, str | None]:
    """(the measured configuration for this shape and M's bucket, the device it was measured on): `device`'s own
    entry (from TABLE unless `path`), else (SIBLINGS, `traits` given: the calling device's capability and SM count)
    the first device of the file with those traits that has one; (None, None) if none. zero_point (INT4 weights:
    whether they have zero points): an entry for that case first, then one for either, on each device."""
    if not device:
        return None, None
    table = load(path or TABLE)
    key = (kind, mode, n, k, experts, bucket(m))
    names = [device]
    if SIBLINGS and traits is not None:
        names += [d for d, t in table.traits.items() if t == tuple(traits) and d != device]
    for name in names:
        entries = table.get(name, {})
        found = entries.get((*key, zero_point)) if zero_point is not None else None
        if found is None:
            found = entries.get((*key, None))
        if found is not None:
            return dict(found), name
    return None, None


def lookup(device: str | None, kind: str, mode: str, n: int, k: int, m: int, experts: int = 0,
           path: Path | None = None, zero_point: bool | None = None,
           traits: Traits | None = None) -> dict[str, int] | None:
    """The configuration `find` gives (this device's entry, else a sibling's), or None."""
    return find(device, kind, mode, n, k, m, experts, path, zero_point, traits)[0]
