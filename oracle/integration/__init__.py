"""Engine-neutral pieces that inference engines (oracle.hf, the vLLM plugin, an SGLang adapter next) share.

An engine describes its layers in its own words (quant keys, scalar types, kernel
configs); an adapter translates those words into the neutral facts of `layers`
(`WeightQuant`, `ActQuant`) and gets `LinearLayer`/`MoELayer` back; `convert` turns the
engine's loaded parameters into a kernel's `process_weights` arguments through the
checkpoint adapters (oracle.checkpoints); `records` writes and reads the per-layer
records (one JSON object a layer) that shadow and enforce runs leave; `ops` holds the
opaque torch custom ops that run a kernel as one graph node.

Nothing here is imported by `import oracle`: `oracle.integration.ops` needs torch and is
imported only by code that runs kernels.
"""
