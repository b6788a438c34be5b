"""Run vLLM engines on tiny checkpoints, one after another in this process (run by the overlay python).

Reads a JSON list of scenarios from the file named by argv[1] and writes a JSON list of results
to argv[2]. A scenario: {"id", "model", "kernel_oracle": {...} or null, "compile": bool,
"prompts": [[ids]], "max_tokens": n, "zero_moe": bool, "engine_args": {more LLM(...) arguments}}. A result: {"id", "tokens": [[ids]],
"logprobs": [[float]] (the chosen token's), "error": one line or null, "config_hash",
"cache_dir", "seconds"}. Engines share the process (VLLM_ENABLE_V1_MULTIPROCESSING=0) so vLLM's
imports and model inspection are paid once; this is a test helper, not a test.
"""
from __future__ import annotations

import gc
import json
import os
import sys
import time


def _one_line(exc: BaseException) -> str:
    causes = []
    while exc is not None and len(causes) < 4:
        text = str(exc).strip().splitlines()
        causes.append(f"{type(exc).__name__}: {text[0] if text else ''}")
        exc = exc.__cause__ or exc.__context__
    return " <- ".join(causes)


def _method_classes(model) -> dict:
    """Quantized module name -> [quant method class name, whether oracle-vllm wrapped it]."""
    out = {}
    for name, module in model.named_modules():
        method = getattr(module, "quant_method", None)
        if method is not None and type(method).__name__.startswith("CompressedTensors"):
            wrapped = any(c.__module__.startswith("oracle_vllm") for c in type(method).__mro__)
            out[name] = [type(method).__name__, wrapped]
    return out


def run(scenario: dict) -> dict:
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    start = time.time()
    out = {"id": scenario["id"], "tokens": None, "logprobs": None, "error": None}
    extra = {"kernel_oracle": scenario["kernel_oracle"]} if scenario.get("kernel_oracle") is not None else None
    llm = None
    try:
        kwargs = dict(model=scenario["model"], skip_tokenizer_init=True, dtype="bfloat16", max_model_len=128,
                      max_num_seqs=4, enforce_eager=not scenario.get("compile", False), seed=0)
        if extra is not None:
            kwargs["additional_config"] = extra
        kwargs.update(scenario.get("engine_args", {}))      # e.g. vLLM's own linear_backend / moe_backend
        llm = LLM(**kwargs)
        config = llm.llm_engine.vllm_config
        out["config_hash"] = config.compute_hash()
        out["cache_dir"] = str(getattr(config.compilation_config, "local_cache_dir", None) or "")
        out["methods"] = llm.apply_model(_method_classes)[0]
        if scenario.get("zero_moe"):
            import torch
            from oracle_vllm import methods
            methods.moe_call = lambda x, w, ids, handle: torch.zeros_like(x)
        params = SamplingParams(max_tokens=scenario.get("max_tokens", 8), temperature=0, logprobs=0,
                                detokenize=False)
        results = llm.generate([TokensPrompt(prompt_token_ids=p) for p in scenario["prompts"]], params,
                               use_tqdm=False)
        out["tokens"] = [list(r.outputs[0].token_ids) for r in results]
        out["logprobs"] = [[float(step[t].logprob) for step, t in zip(r.outputs[0].logprobs, r.outputs[0].token_ids)]
                           for r in results]
    except Exception as exc:     # the scenario's outcome, reported, not this helper's crash
        out["error"] = _one_line(exc)
    finally:
        if scenario.get("zero_moe"):
            from oracle_vllm import methods
            methods.moe_call = _ORIGINAL_MOE_CALL
        del llm
        gc.collect()
        try:
            from vllm.distributed import cleanup_dist_env_and_memory
            cleanup_dist_env_and_memory()
        except Exception:
            pass
    out["seconds"] = round(time.time() - start, 1)
    return out


def main() -> int:
    scenarios = json.loads(open(sys.argv[1]).read())
    results = []
    for scenario in scenarios:
        results.append(run(scenario))
        print(json.dumps({k: results[-1][k] for k in ("id", "error", "seconds")}), file=sys.stderr, flush=True)
        with open(sys.argv[2], "w") as fh:
            json.dump(results, fh)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    from oracle_vllm import methods as _m
    _ORIGINAL_MOE_CALL = _m.moe_call
    sys.exit(main())
