"""oracle-triton: weight-only GEMM and fused MoE kernels written in Triton (optimized tier)."""

__version__ = "0.1.0"
