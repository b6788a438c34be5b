"""oracle-vllm: kernel-oracle inside vLLM 0.32 (shadow: report per layer; enforce: run oracle kernels).

Loaded by vLLM through the `vllm.general_plugins` entry point (`plugin.register`). The
vLLM-specific part is kept thin: `mapping` translates vLLM's descriptions into the
engine-neutral facts of `oracle.integration`, `methods` wraps vLLM's per-layer quant
methods, `quant_config` re-registers vLLM's compressed-tensors config so its layers pass
through `methods`. Nothing here imports vLLM at package import.
"""
