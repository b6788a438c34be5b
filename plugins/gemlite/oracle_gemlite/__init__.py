"""kernel-oracle plugin: gemlite's Triton kernels as peer candidates (see kernels.yaml)."""
