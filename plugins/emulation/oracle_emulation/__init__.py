"""oracle-emulation: dequantize-to-BF16 reference kernels for every weight format.

Importing this package is cheap: torch is imported only by the format, activation and
kernel modules, which the engine loads when a decision is instantiated.
"""
__version__ = "0.1.0"
