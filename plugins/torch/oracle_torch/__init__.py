"""oracle-torch: real FP8 (and, on capability 10.x, MXFP8/NVFP4) linear kernels from torch's scaled matmul.

Importing this package imports no torch; the kernels import it when instantiated.
"""
