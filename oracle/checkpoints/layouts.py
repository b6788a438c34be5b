"""Every checkpoint tensor layout the adapters read: the one place these facts live.

Each `TensorLayout` row says, for one dialect and weight format, which tensor suffix
a checkpoint module carries, which kernel argument (oracle.kernel) it feeds, its
dtype and shape (over N = output rows, K = input columns, E = experts, g = group
size), and the conversion the adapter applies. The adapters check every tensor
against its row before converting it, and docs/user-guide.md's layout table is
rendered from this table (`render_markdown`; tests/test_checkpoints_layouts.py
checks the two agree).

Shapes are Python expressions over N, K, E, g and `cdiv` (ceiling division); a
tensor whose shape lies in `alt` (e.g. [1] for a per-tensor scale) is accepted too.
This module imports nothing heavy: dtypes are torch attribute names.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TensorLayout:
    dialect: str             # compressed-tensors | fp8 | mxfp4 | modelopt | gptq | awq
    fmt: str                 # the kernel's weight format
    suffix: str              # the checkpoint tensor name after the module name
    arg: str                 # the process_weights argument it feeds (linear names)
    dtypes: tuple[str, ...]  # torch dtype attribute names accepted
    shape: str               # expected shape, an expression over N, K, E, g
    convert: str = "as is"   # what the adapter does to it
    required: bool = True
    alt: tuple[str, ...] = ()  # other shapes accepted for the same fact

    def shapes(self, n: int, k: int, g: int | None = None, e: int | None = None) -> list[list[int]]:
        env = {"N": n, "K": k, "g": g or k, "E": e or 1, "cdiv": lambda a, b: -(-a // b)}
        return [list(eval(s, {"__builtins__": {}}, env)) for s in (self.shape, *self.alt)]  # noqa: S307 (constants of this module)


F32, F16, BF16, E4M3, U8, I32 = "float32", "float16", "bfloat16", "float8_e4m3fn", "uint8", "int32"
SCALE_FLOATS = (F32, F16, BF16)
_T = TensorLayout

LAYOUTS: tuple[TensorLayout, ...] = (
    # ---- compressed-tensors (format float-quantized / nvfp4-pack / mxfp4-pack / pack-quantized)
    _T("compressed-tensors", "fp8_tensor", "weight", "weight", (E4M3,), "(N, K)"),
    _T("compressed-tensors", "fp8_tensor", "weight_scale", "weight_scale", SCALE_FLOATS, "(1,)", "fused parts requantized to their largest scale", alt=("()",)),
    _T("compressed-tensors", "fp8_tensor", "input_scale", "input_scale", SCALE_FLOATS, "(1,)", "static activations; absent = dynamic", required=False, alt=("()",)),
    _T("compressed-tensors", "fp8_channel", "weight", "weight", (E4M3,), "(N, K)"),
    _T("compressed-tensors", "fp8_channel", "weight_scale", "weight_scale", (F32, BF16, F16), "(N, 1)", "reshaped to [N], fp32", alt=("(N,)",)),
    _T("compressed-tensors", "fp8_block", "weight", "weight", (E4M3,), "(N, K)"),
    _T("compressed-tensors", "fp8_block", "weight_scale", "weight_scale", (F32, BF16, F16), "(cdiv(N, 128), cdiv(K, 128))", "fp32; block_structure must be [128, 128]"),
    _T("compressed-tensors", "nvfp4", "weight_packed", "weight", (U8,), "(N, K // 2)", "two E2M1 per byte, low nibble = even k"),
    _T("compressed-tensors", "nvfp4", "weight_scale", "weight_scale", (E4M3,), "(N, K // 16)"),
    _T("compressed-tensors", "nvfp4", "weight_global_scale", "weight_global_scale", SCALE_FLOATS, "(1,)", "a divisor: kernel global = 1 / value", alt=("()",)),
    _T("compressed-tensors", "nvfp4", "input_global_scale", "input_global_scale", SCALE_FLOATS, "(1,)", "W4A4 only; kernel input global = 1 / value", required=False, alt=("()",)),
    _T("compressed-tensors", "mxfp4", "weight_packed", "weight", (U8,), "(N, K // 2)", "two E2M1 per byte, low nibble = even k"),
    _T("compressed-tensors", "mxfp4", "weight_scale", "weight_scale", (U8,), "(N, K // 32)", "E8M0 exponent bytes"),
    _T("compressed-tensors", "int4", "weight_packed", "weight", (I32,), "(N, K // 8)", "pack-quantized: nibbles stored as q + 8 along K; unpacked, transposed and repacked to GPTQ [K/8, N]", required=False),
    _T("compressed-tensors", "int4", "weight", "weight", ("int8",), "(N, K)", "int-quantized (W4A8, W4AFP8): one value -8..7 per byte; + 8, packed to GPTQ [K/8, N]", required=False),
    _T("compressed-tensors", "int4", "weight_scale", "weight_scale", SCALE_FLOATS, "(N, K // g)", "transposed to [K/g, N], fp16"),
    _T("compressed-tensors", "int4", "weight_zero_point", "weight_zero_point", (I32, "int8"), "(N // 8, K // g)", "zero points + 8 packed along N (int8 [N, K/g]: + 8 added here); transposed and repacked to GPTQ qzeros [K/g, N/8]; absent = symmetric (zero 8)", required=False, alt=("(N, K // g)",)),
    _T("compressed-tensors", "int4", "weight_shape", "-", ("int64", I32), "(2,)", "checked against [N, K]", required=False),
    _T("compressed-tensors", "int8", "weight", "weight", ("int8",), "(N, K)", "int-quantized (W8A8): as is", required=False),
    _T("compressed-tensors", "int8", "weight_packed", "weight", (I32,), "(N, K // 4)", "pack-quantized (W8A16): four bytes per int32 along K, low byte first, stored as q + 128", required=False),
    _T("compressed-tensors", "int8", "weight_scale", "weight_scale", SCALE_FLOATS, "(N, K // g)", "per channel (g = K) or per group; fp32"),
    _T("compressed-tensors", "int8", "weight_shape", "-", ("int64", I32), "(2,)", "checked against [N, K]", required=False),
    _T("compressed-tensors", "mxfp8", "weight", "weight", (E4M3,), "(N, K)"),
    _T("compressed-tensors", "mxfp8", "weight_scale", "weight_scale", (U8,), "(N, K // 32)", "E8M0 exponent bytes"),
    # ---- transformers fine-grained FP8 (quant_method fp8, weight_block_size [128, 128])
    _T("fp8", "fp8_block", "weight", "weight", (E4M3,), "(N, K)"),
    _T("fp8", "fp8_block", "weight_scale_inv", "weight_scale", (F32, BF16), "(cdiv(N, 128), cdiv(K, 128))", "despite the name a multiplier (dequant = w * s); fp32"),
    _T("fp8", "fp8_tensor", "weight", "weight", (E4M3,), "(N, K)"),
    _T("fp8", "fp8_tensor", "weight_scale_inv", "weight_scale", (F32, BF16), "()", "a multiplier (transformers' FineGrainedFP8Config(weight_block_size=None) writes [1, 1]); fused parts requantized to their largest scale", alt=("(1,)", "(1, 1)")),
    _T("fp8", "fp8_tensor", "activation_scale", "input_scale", (F32, BF16), "()", "static activations only", required=False, alt=("(1,)", "(1, 1)")),
    # ---- ModelOpt (hf_quant_config.json; FP8, NVFP4, quantized_layers codecs)
    _T("modelopt", "fp8_tensor", "weight", "weight", (E4M3,), "(N, K)"),
    _T("modelopt", "fp8_tensor", "weight_scale", "weight_scale", (F32,), "()", "fused parts requantized to their largest scale", alt=("(1,)",)),
    _T("modelopt", "fp8_tensor", "input_scale", "input_scale", (F32,), "()", "static per-tensor activation scale", required=False, alt=("(1,)",)),
    _T("modelopt", "nvfp4", "weight", "weight", (U8,), "(N, K // 2)", "two E2M1 per byte, low nibble = even k"),
    _T("modelopt", "nvfp4", "weight_scale", "weight_scale", (E4M3,), "(N, K // 16)"),
    _T("modelopt", "nvfp4", "weight_scale_2", "weight_global_scale", (F32,), "()", "a multiplier; fused parts brought to their largest (block scales rescaled)", alt=("(1,)",)),
    _T("modelopt", "nvfp4", "input_scale", "input_global_scale", (F32,), "()", "W4A4 activation global scale (max over fused parts)", required=False, alt=("(1,)",)),
    _T("modelopt", "q8_0", "weight", "weight", (U8,), "(N, K // 32, 34)", "GGML blocks"),
    _T("modelopt", "iq2_xs", "weight", "weight", (U8,), "(N, K // 256, 74)", "GGML blocks"),
    _T("modelopt", "iq2_xxs", "weight", "weight", (U8,), "(N, K // 256, 66)", "GGML blocks"),
    # ---- GPTQ / AWQ (quantize_config.json or quant_method gptq/awq)
    _T("gptq", "int4", "qweight", "weight", (I32,), "(K // 8, N)", "as is (8 nibbles per int32 along K, low first)"),
    _T("gptq", "int4", "scales", "weight_scale", SCALE_FLOATS, "(K // g, N)", "fp16"),
    _T("gptq", "int4", "qzeros", "weight_zero_point", (I32,), "(K // g, N // 8)", "GPTQ v1 stores zero - 1: + 1 before use; symmetric checkpoints give 8"),
    _T("gptq", "int4", "g_idx", "-", (I32, "int64"), "(K,)", "act-order: must be the trivial k // g (desc_act checkpoints with a permuted g_idx are refused)", required=False),
    _T("awq", "int4", "qweight", "weight", (I32,), "(K, N // 8)", "AWQ packs along N in the order 0,2,4,6,1,3,5,7; repacked to GPTQ [K/8, N]"),
    _T("awq", "int4", "scales", "weight_scale", SCALE_FLOATS, "(K // g, N)", "fp16"),
    _T("awq", "int4", "qzeros", "weight_zero_point", (I32,), "(K // g, N // 8)", "AWQ order along N; repacked to GPTQ order"),
    # ---- gpt-oss MXFP4 (quant_method mxfp4): fused expert tensors of mlp.experts
    _T("mxfp4", "mxfp4", "gate_up_proj_blocks", "w13", (U8,), "(E, N, K // 32, 16)", "N = 2I rows, gate/up interleaved (even rows gate); reshaped to [E, 2I, H/2]"),
    _T("mxfp4", "mxfp4", "gate_up_proj_scales", "w13_scale", (U8,), "(E, N, K // 32)", "E8M0 bytes"),
    _T("mxfp4", "mxfp4", "gate_up_proj_bias", "w13_bias", SCALE_FLOATS, "(E, N)", "interleaved like the rows"),
    _T("mxfp4", "mxfp4", "down_proj_blocks", "w2", (U8,), "(E, N, K // 32, 16)", "N = H, K = I; reshaped to [E, H, I/2]"),
    _T("mxfp4", "mxfp4", "down_proj_scales", "w2_scale", (U8,), "(E, N, K // 32)", "E8M0 bytes"),
    _T("mxfp4", "mxfp4", "down_proj_bias", "w2_bias", SCALE_FLOATS, "(E, N)"),
)

#: How the adapters fuse parts, per format (one place, shown in the docs too).
FUSION = {
    "weights": "q/k/v -> qkv and gate/up -> gate_up are concatenated along N (rows; int4: the last dim)",
    "moe": "per-expert tensors are stacked along a leading E; w13 = [gate; up] rows, except swigluoai "
           "(gpt-oss) whose rows interleave gate and up (even rows gate)",
    "fp8_tensor": "parts with different scales are requantized to the largest one (as vLLM does)",
    "nvfp4": "parts with different global scales: block scales rescaled to the largest global scale",
    "fp8_block": "each part's N must be a multiple of 128 so blocks do not straddle parts",
}


def rows(dialect: str, fmt: str) -> list[TensorLayout]:
    return [r for r in LAYOUTS if r.dialect == dialect and r.fmt == fmt]


def render_markdown() -> str:
    """The layout table of docs/user-guide.md (generated from LAYOUTS)."""
    out = ["| dialect | format | tensor | kernel argument | dtype | shape | conversion |",
           "|---|---|---|---|---|---|---|"]
    for r in LAYOUTS:
        opt = "" if r.required else " (optional)"
        shape = " or ".join(s.replace("cdiv", "ceil_div") for s in (r.shape, *r.alt))
        out.append(f"| {r.dialect} | {r.fmt} | `{r.suffix}`{opt} | `{r.arg}` | {', '.join(r.dtypes)} | "
                   f"`{shape}` | {r.convert} |")
    out.append("")
    out += [f"- **{k}**: {v}" for k, v in FUSION.items()]
    return "\n".join(out)


if __name__ == "__main__":    # python -m oracle.checkpoints.layouts > the table in docs/user-guide.md
    print(render_markdown())
