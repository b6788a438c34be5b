"""Engine-neutral pieces that inference engines (oracle.hf, the vLLM plugin) share.

Nothing here is imported by `import oracle`: `oracle.integration.ops` needs torch and is
imported only by code that runs kernels.
"""
