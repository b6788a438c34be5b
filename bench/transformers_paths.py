"""Can transformers' own quantized paths (fine-grained FP8, MXFP4) run on this machine? Tried, not assumed.

#24 asks the decode benchmark to compare, in one run, oracle.hf, plain BF16 transformers and
transformers' own loading of the same quantized model "where it has one". This module calls each of
transformers' quantized entry points once, on the device, with a tiny layer of the real formats, and
reports what happened: an output (the path runs: the benchmark would have to build that engine), or
the exception and the transformers source line that raised it. Read from transformers 5.23.0:

- loading: quantizers/quantizer_finegrained_fp8.py `validate_environment` raises ImportError without
  `accelerate` (line 33); quantizer_mxfp4.py does the same (line 61), and without the `kernels` package
  it sets `dequantize = True` (lines 113-120): the MXFP4 experts become BF16, which is the bf16 row.
- FP8 compute: `FP8Linear.forward` (integrations/finegrained_fp8.py:432) runs F.linear only for a weight
  wider than one byte (a dequantized one); an FP8 weight goes to `fp8_linear` (:208), which tries
  DeepGEMM only when `is_deepgemm_loadable()` (integrations/deepgemm.py:170: needs `kernels`) and
  otherwise `finegrained_fp8_linear` (:179) -> `load_finegrained_fp8_kernel` -> ImportError when
  `kernels` is missing (:106-107); the FP8 experts (`FP8Experts.linear` :852, grouped_mm :613 via
  `fp8_grouped_matmul` :325, batched_mm :538) all reach the same loader. No pure-torch FP8 kernel.
- MXFP4 compute: `replace_with_mxfp4_linear` (integrations/mxfp4.py:521) fetches
  `kernels-community/gpt-oss-triton-kernels` with `get_kernel`, which raises ImportError without
  `kernels` (integrations/hub_kernels.py:981-982); `Mxfp4GptOssExperts.forward` needs that module.
- The only path without hub kernels, `dequantize=True`, converts the weights to BF16 at load and leaves
  the model's own BF16 modules (finegrained_fp8.py:952 returns before replacing any module): the bf16
  engine of the benchmark, not a quantized path.

    python bench/transformers_paths.py [--device cuda]      # one line per path, exit 0
"""
from __future__ import annotations

import argparse
import traceback
from typing import Any, Callable


def _where(exc: BaseException) -> str:
    """The innermost transformers frame of the exception's traceback, as file:line (path from transformers/)."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "/transformers/" in f.filename]
    if not frames:
        return "outside transformers"
    f = frames[-1]
    return f"transformers/{f.filename.split('/transformers/', 1)[1]}:{f.lineno} ({f.name})"


def _try(name: str, fn: Callable[[], Any]) -> dict[str, str]:
    try:
        out = fn()
    except Exception as exc:  # noqa: BLE001 - the point is to report whatever it raises
        return {"path": name, "runs": "no", "why": f"{type(exc).__name__}: {str(exc).splitlines()[0][:240]}",
                "where": _where(exc)}
    return {"path": name, "runs": "yes", "why": f"output {tuple(getattr(out, 'shape', ()))}", "where": ""}


def probe(device: str = "cuda") -> list[dict[str, str]]:
    """Each quantized entry point of transformers, called once on `device` with a tiny layer."""
    import torch
    from transformers.utils import is_accelerate_available, is_kernels_available

    rows = [{"path": "environment", "runs": "-", "where": "",
             "why": f"transformers `kernels` package installed: {is_kernels_available()}; "
                    f"`accelerate` installed: {is_accelerate_available()}"}]

    def fp8_linear() -> Any:
        from transformers.integrations.finegrained_fp8 import FP8Linear
        layer = FP8Linear(256, 256, block_size=(128, 128)).to(device)
        with torch.no_grad():
            layer.weight.copy_(torch.randn(256, 256, device=device).to(torch.float8_e4m3fn))
            layer.weight_scale_inv.fill_(1.0)
            return layer(torch.randn(1, 256, device=device, dtype=torch.bfloat16))

    def fp8_grouped() -> Any:
        from transformers.integrations.finegrained_fp8 import fp8_grouped_matmul
        w = torch.randn(2, 256, 256, device=device).to(torch.float8_e4m3fn)
        s = torch.ones(2, 2, 2, device=device)
        x = torch.randn(2, 256, device=device, dtype=torch.bfloat16)
        counts = torch.tensor([1, 1], device=device, dtype=torch.int32)
        return fp8_grouped_matmul(x, w, s, counts.cumsum(0).to(torch.int32), counts, [128, 128])

    def mxfp4_experts() -> Any:
        from transformers import GptOssConfig, GptOssForCausalLM
        from transformers.integrations.mxfp4 import replace_with_mxfp4_linear
        from transformers.utils.quantization_config import Mxfp4Config
        cfg = GptOssConfig(hidden_size=64, intermediate_size=64, num_hidden_layers=1, num_local_experts=4,
                           num_attention_heads=2, num_key_value_heads=1, head_dim=32, vocab_size=128)
        with torch.device("meta"):
            model = GptOssForCausalLM(cfg)
        return replace_with_mxfp4_linear(model, quantization_config=Mxfp4Config())

    def fp8_loader() -> Any:
        from transformers.quantizers.quantizer_finegrained_fp8 import FineGrainedFP8HfQuantizer
        from transformers.utils.quantization_config import FineGrainedFP8Config
        quantizer = FineGrainedFP8HfQuantizer(FineGrainedFP8Config())
        quantizer.validate_environment(device_map={"": device})
        return quantizer

    def mxfp4_loader() -> Any:
        from transformers.quantizers.quantizer_mxfp4 import Mxfp4HfQuantizer
        from transformers.utils.quantization_config import Mxfp4Config
        quantizer = Mxfp4HfQuantizer(Mxfp4Config())
        quantizer.pre_quantized = True
        quantizer.validate_environment(device_map={"": device})
        if quantizer.quantization_config.dequantize:
            raise RuntimeError("validate_environment chose dequantize=True: the experts load as BF16 (the bf16 row)")
        return quantizer

    for name, fn in (("fine-grained FP8 loading (quantizer)", fp8_loader),
                     ("fine-grained FP8 linear (FP8Linear.forward)", fp8_linear),
                     ("fine-grained FP8 experts (fp8_grouped_matmul)", fp8_grouped),
                     ("MXFP4 loading (quantizer, pre-quantized)", mxfp4_loader),
                     ("MXFP4 experts (replace_with_mxfp4_linear)", mxfp4_experts)):
        rows.append(_try(name, fn))
    return rows


def lines(rows: list[dict[str, str]]) -> list[str]:
    out = ["| transformers path | runs here | what happened | where |", "|---|---|---|---|"]
    out += [f"| {r['path']} | {r['runs']} | {r['why']} | {r['where']} |" for r in rows]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()
    print("\n".join(lines(probe(args.device))))


if __name__ == "__main__":
    main()
