"""Checkpoint adapters: one layer's checkpoint tensors -> its kernel's process_weights arguments.

One `Adapter` per dialect the front end reads (oracle.models.quant): it reads each
part's tensors by the rows of `layouts.LAYOUTS` (dtype and shape checked there, so an
error names the tensor, its file and the expected fact), converts them to the kernel
layout of oracle.kernel, then fuses parts (q/k/v, gate/up) and experts (fuse.py).

    adapter = adapter_for("compressed-tensors")
    args = adapter.linear(source, layer, [("...q_proj", 2048), ("...k_proj", 512), ("...v_proj", 512)])
    kernel.process_weights(**args)
"""
from __future__ import annotations

from typing import Any, Callable

from ..formats import INTERLEAVED_ACTIVATIONS
from .fuse import join_rows, stack_experts
from .layouts import rows
from .packing import pack_nibbles, unpack_bytes, unpack_nibbles
from .preflight import check_values
from .source import CheckpointError, TensorSource

AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)   # AWQ nibble i holds column AWQ_ORDER[i] of each group of 8
DIALECTS = ("compressed-tensors", "fp8", "mxfp4", "modelopt", "gptq", "awq")


class Adapter:
    """Reads one dialect; `options` carries facts from the quantization config (group size, ...)."""

    def __init__(self, dialect: str, **options: Any):
        if dialect not in DIALECTS and dialect != "none":      # "none": an unquantized checkpoint
            raise CheckpointError(f"no checkpoint adapter for dialect {dialect!r}; known: {', '.join(DIALECTS)}")
        self.dialect = dialect
        self.options = options

    # ---- reading one module -----------------------------------------------------------
    def read(self, src: TensorSource, module: str, fmt: str, n: int, k: int, group: int | None,
             experts: int | None = None) -> dict[str, Any]:
        """The checkpoint tensors of `module` (suffix -> tensor), each checked against its layout row."""
        table = rows(self.dialect, fmt)
        if not table:
            raise CheckpointError(f"the {self.dialect} adapter has no layout for {fmt} weights", tensor=module)
        found: dict[str, Any] = {}
        for row in table:
            name = f"{module}.{row.suffix}"
            if name in src or row.required:
                found[row.suffix] = self._checked(src, name, row, n, k, group, experts, fmt)
        bias = f"{module}.bias"
        if bias in src and experts is None:
            b = src.get(bias)
            if list(b.shape) != [n]:
                raise CheckpointError(f"expected shape [{n}] (one bias per output row), got {list(b.shape)}",
                                      tensor=bias, file=src.file(bias))
            found["bias"] = b
        return found

    def part(self, src: TensorSource, module: str, fmt: str, n: int, k: int, group: int | None) -> dict[str, Any]:
        """One module's tensors in the kernel layout (linear argument names)."""
        found = self.read(src, module, fmt, n, k, group)
        convert = CONVERTERS.get((self.dialect, fmt), _renamed)
        out = convert(self, found, fmt, n, k, group, module, src)
        if "bias" in found:
            out["bias"] = found["bias"]
        return out

    # ---- layers --------------------------------------------------------------------------
    def linear(self, src: TensorSource, layer: Any, parts: list[tuple[str, int]]) -> dict[str, Any]:
        """process_weights arguments of a linear layer whose checkpoint modules are `parts` (name, rows)."""
        fmt, k, group = layer.weight_format, layer.in_features, layer.group_size
        total = sum(n for _, n in parts)
        if total != layer.out_features:
            raise CheckpointError(f"parts {[p for p, _ in parts]} have {total} rows, the layer {layer.out_features}",
                                  tensor=layer.name)
        done = [self.part(src, name, fmt, n, k, group) for name, n in parts]
        return join_rows(fmt, done, [name for name, _ in parts])

    def moe(self, src: TensorSource, layer: Any, parts: tuple[str, ...]) -> dict[str, Any]:
        """process_weights arguments of a fused-MoE layer.

        `parts` are the front end's names: `<experts>.0.<gate>, <experts>.0.<up>, <experts>.0.<down>`
        for per-expert checkpoints, or `<experts>.gate_up_proj, <experts>.down_proj` for fused ones."""
        fmt, group = layer.weight_format, layer.group_size
        e, h, i = layer.num_experts, layer.hidden_size, layer.intermediate_size
        interleave = layer.activation in INTERLEAVED_ACTIVATIONS
        if self.dialect == "mxfp4":
            return self._gpt_oss_experts(src, layer.name, e, h, i)
        prefix = layer.name
        suffixes = [p[len(prefix) + 3:] if p.startswith(prefix + ".0.") else None for p in parts]
        if len(suffixes) != 3 or None in suffixes:
            raise CheckpointError(f"the {self.dialect} adapter reads per-expert tensors ({prefix}.<e>.<proj>), "
                                  f"not {list(parts)}", tensor=prefix)
        gate, up, down = suffixes
        src = _fused_expert_scales(self.dialect, src, prefix, (gate, up, down), e, i)
        w13, w2 = [], []
        for x in range(e):
            base = f"{prefix}.{x}"
            g_part = self.part(src, f"{base}.{gate}", fmt, i, h, group)
            u_part = self.part(src, f"{base}.{up}", fmt, i, h, group)
            w13.append(join_rows(fmt, [g_part, u_part], [f"{base}.{gate}", f"{base}.{up}"], interleave=interleave))
            w2.append(self.part(src, f"{base}.{down}", fmt, h, i, group))
        return {**stack_experts(fmt, w13, "w13"), **stack_experts(fmt, w2, "w2")}

    def _gpt_oss_experts(self, src: TensorSource, prefix: str, e: int, h: int, i: int) -> dict[str, Any]:
        out = {}
        for which, stem, n, k in (("w13", "gate_up_proj", 2 * i, h), ("w2", "down_proj", h, i)):
            t = {row.suffix[len(stem) + 1:]: self._checked(src, f"{prefix}.{row.suffix}", row, n, k, 32, e, "mxfp4")
                 for row in rows("mxfp4", "mxfp4") if row.suffix.startswith(stem + "_")}
            out[which] = t["blocks"].reshape(e, n, k // 2)      # 16-byte blocks of 32 codes -> [E, N, K/2]
            out[f"{which}_scale"] = t["scales"]
            out[f"{which}_bias"] = t["bias"]
        return out

    def _checked(self, src: TensorSource, name: str, row: Any, n: int, k: int, group: int | None,
                 experts: int | None, fmt: str) -> Any:
        what = f"{fmt} weights in the {self.dialect} layout"
        if name not in src:
            raise CheckpointError(f"missing tensor: {what} carry {row.suffix} ({', '.join(row.dtypes)} {row.shape})",
                                  tensor=name, file=near(src, name.rsplit(".", 1)[0]))
        t = src.get(name)
        dtype = str(t.dtype).removeprefix("torch.")
        if dtype not in row.dtypes:
            raise CheckpointError(f"expected dtype {' or '.join(row.dtypes)} ({what}), got {dtype}",
                                  tensor=name, file=src.file(name))
        shapes = row.shapes(n, k, group, experts)
        if list(t.shape) not in shapes:
            raise CheckpointError(f"expected shape {' or '.join(map(str, shapes))} for N={n}, K={k}"
                                  + (f", group {group}" if group else "") + f" ({what}), got {list(t.shape)}",
                                  tensor=name, file=src.file(name))
        if not src.made_here:          # a synthetic source's values come from the quantizer itself
            check_values(t, name, row.arg, fmt, src.file(name))
        return t


class _WithTensors(TensorSource):
    """`src` plus tensors derived here (per-expert slices of a fused tensor); names and claims go to `src`."""

    def __init__(self, src: TensorSource, extra: dict[str, Any], origin: dict[str, str]):
        super().__init__(src.files, src.root)
        self.src, self.extra, self.origin = src, extra, origin
        self.claimed, self.made_here = src.claimed, src.made_here

    def __contains__(self, name: str) -> bool:
        return name in self.extra or name in self.src

    def names(self) -> Any:
        return self.src.names()

    def file(self, name: str) -> str:
        return self.src.file(self.origin.get(name, name))

    def get(self, name: str) -> Any:
        return self.extra[name] if name in self.extra else self.src.get(name)


def _fused_expert_scales(dialect: str, src: TensorSource, prefix: str, parts: tuple[str, str, str], e: int,
                         i: int) -> TensorSource:
    """transformers 5 saves FP8 experts with per-expert weights (its names reverted on save) but one
    fused scale per projection: `<experts>.gate_up_proj_scale_inv` [E, rows, cols] (gate rows first)
    and `<experts>.down_proj_scale_inv`. Slice them into the per-expert `weight_scale_inv` the layout
    reads; checkpoints with per-expert scales (Qwen, DeepSeek) pass through unchanged."""
    fused_up, fused_down = f"{prefix}.gate_up_proj_scale_inv", f"{prefix}.down_proj_scale_inv"
    if dialect != "fp8" or fused_up not in src or f"{prefix}.0.{parts[0]}.weight_scale_inv" in src:
        return src
    gate, up, down = parts
    s13, s2 = src.get(fused_up), src.get(fused_down) if fused_down in src else None
    if s2 is None:
        raise CheckpointError("a fused gate_up_proj_scale_inv without down_proj_scale_inv", tensor=fused_down,
                              file=src.file(fused_up))
    if s13.dim() != 3 or s13.shape[0] != e or s2.dim() != 3 or s2.shape[0] != e:
        raise CheckpointError(f"expected [E={e}, rows, cols] fused expert scales, got {list(s13.shape)} and "
                              f"{list(s2.shape)}", tensor=fused_up, file=src.file(fused_up))
    extra: dict[str, Any] = {}
    rows = s13.shape[1]
    if rows == 1:                           # per-tensor: one scale for gate and up together
        halves = (s13[:, :1], s13[:, :1])
    elif rows % 2 == 0 and rows // 2 == -(-i // 128) and i % 128 == 0:
        halves = (s13[:, : rows // 2], s13[:, rows // 2:])
    else:
        raise CheckpointError(f"cannot split {rows} scale rows between gate and up (intermediate size {i}; "
                              "each half must be whole 128-row blocks)", tensor=fused_up, file=src.file(fused_up))
    for x in range(e):
        for proj, scale in ((gate, halves[0][x]), (up, halves[1][x]), (down, s2[x])):
            extra[f"{prefix}.{x}.{proj}.weight_scale_inv"] = scale
    origin = {name: fused_down if name.endswith(f".{down}.weight_scale_inv") else fused_up for name in extra}
    return _WithTensors(src, extra, origin)


def near(src: TensorSource, module: str) -> str:
    """The file that holds the module's other tensors (where the missing one was expected)."""
    for name in src.names():
        if name.startswith(module + "."):
            return src.file(name)
    return str(src.root or "checkpoint")


def adapter_for(dialect: str, **options: Any) -> Adapter:
    return Adapter(dialect, **options)


# ---------------------------------------------------------------- per-dialect conversions
Converter = Callable[..., dict]


def _scalar(t: Any) -> Any:
    return t.float().reshape(())


def _renamed(ad: Adapter, found: dict, fmt: str, n: int, k: int, g: int | None, module: str, src: Any) -> dict:
    """Tensors whose layout is the kernel's: only the names change (layout rows' `arg`)."""
    out = {}
    for row in rows(ad.dialect, fmt):
        if row.suffix in found and row.arg != "-":
            t = found[row.suffix]
            per_tensor = row.arg != "weight" and t.numel() == 1 and "()" in (row.shape, *row.alt)
            out[row.arg] = _scalar(t) if per_tensor else t
    if fmt in ("fp8_channel", "fp8_block") and "weight_scale" in out:
        out["weight_scale"] = out["weight_scale"].float().reshape(-1) if fmt == "fp8_channel" \
            else out["weight_scale"].float()
    return out


def _ct_nvfp4(ad: Adapter, found: dict, fmt: str, n: int, k: int, g: int | None, module: str, src: Any) -> dict:
    out = _renamed(ad, found, fmt, n, k, g, module, src)
    out["weight_global_scale"] = 1.0 / out["weight_global_scale"]    # compressed-tensors stores the divisor
    if "input_global_scale" in out:
        out["input_global_scale"] = 1.0 / out["input_global_scale"]
    return out


def _check_weight_shape(found: dict, n: int, k: int, module: str, src: Any) -> None:
    """compressed-tensors' packed layouts state the unpacked [N, K]: it must be the layer's."""
    if "weight_shape" in found and [int(v) for v in found["weight_shape"].tolist()] != [n, k]:
        raise CheckpointError(f"weight_shape says {found['weight_shape'].tolist()}, the layer is [{n}, {k}]",
                              tensor=f"{module}.weight_shape", file=src.file(f"{module}.weight_shape"))


def _ct_int4(ad: Adapter, found: dict, fmt: str, n: int, k: int, g: int | None, module: str, src: Any) -> dict:
    import torch

    _check_weight_shape(found, n, k, module, src)
    # pack-quantized stores value + 8, eight K-consecutive nibbles per int32, low nibble first: word [n, j]
    # holds exactly the nibbles of GPTQ's qweight word [j, n], so the conversion is a transpose (no
    # unpacking); zero points likewise (eight N-consecutive per word: [N/8, K/g] -> qzeros [K/g, N/8]).
    if "weight_packed" in found:
        qweight = found["weight_packed"].transpose(0, 1).contiguous()
    elif "weight" in found:
        q = found["weight"].to(torch.int64) + 8             # int-quantized: one signed value per byte
        qweight = pack_nibbles(q.transpose(0, 1), 0)
    else:
        raise CheckpointError("missing tensor: int4 weights in the compressed-tensors layout carry weight_packed "
                              "(int32 [N, K/8]) or weight (int8 [N, K])", tensor=f"{module}.weight_packed",
                              file=near(src, module))
    out = {"weight": qweight, "weight_scale": found["weight_scale"].transpose(0, 1).to(torch.float16).contiguous()}
    zp = found.get("weight_zero_point")
    if zp is not None:
        out["weight_zero_point"] = zp.transpose(0, 1).contiguous() if zp.dtype == torch.int32 else \
            pack_nibbles((zp.to(torch.int64) + 8).transpose(0, 1), -1)
    return out


def _ct_int8(ad: Adapter, found: dict, fmt: str, n: int, k: int, g: int | None, module: str, src: Any) -> dict:
    import torch

    _check_weight_shape(found, n, k, module, src)
    if "weight_packed" in found:
        q = unpack_bytes(found["weight_packed"], -1) - 128
    elif "weight" in found:
        q = found["weight"]
    else:
        raise CheckpointError("missing tensor: int8 weights in the compressed-tensors layout carry weight (int8 "
                              "[N, K]) or weight_packed (int32 [N, K/4])", tensor=f"{module}.weight",
                              file=near(src, module))
    return {"weight": q.to(torch.int8).contiguous(), "weight_scale": found["weight_scale"].float().contiguous()}


def _gptq(ad: Adapter, found: dict, fmt: str, n: int, k: int, g: int | None, module: str, src: Any) -> dict:
    import torch

    group = g or k
    gidx = found.get("g_idx")
    if gidx is not None and not torch.equal(gidx.long(), torch.arange(k) // group):
        raise CheckpointError("act-order (desc_act) checkpoints permute g_idx; the int4 kernels take groups in "
                              "K order only, so this checkpoint is refused (re-export with desc_act false, "
                              "or with the permutation folded into the weights)",
                              tensor=f"{module}.g_idx", file=src.file(f"{module}.g_idx"))
    zeros = unpack_nibbles(found["qzeros"], -1)
    if ad.options.get("checkpoint_format", "gptq") != "gptq_v2":
        zeros = (zeros + 1) & 0xF        # GPTQ v1 files store zero - 1
    return {"weight": found["qweight"], "weight_scale": found["scales"].to(torch.float16),
            "weight_zero_point": pack_nibbles(zeros, -1)}


def _awq(ad: Adapter, found: dict, fmt: str, n: int, k: int, g: int | None, module: str, src: Any) -> dict:
    import torch

    q = unpack_nibbles(found["qweight"], -1, AWQ_ORDER)       # [K, N]
    zeros = unpack_nibbles(found["qzeros"], -1, AWQ_ORDER)    # [K/g, N]
    return {"weight": pack_nibbles(q, 0), "weight_scale": found["scales"].to(torch.float16),
            "weight_zero_point": pack_nibbles(zeros, -1)}


CONVERTERS: dict[tuple[str, str], Converter] = {
    ("compressed-tensors", "nvfp4"): _ct_nvfp4,
    ("compressed-tensors", "int4"): _ct_int4,
    ("compressed-tensors", "int8"): _ct_int8,
    ("gptq", "int4"): _gptq,
    ("awq", "int4"): _awq,
}
