"""oracle-triton's tests. Without CUDA the kernels are built for Triton's CPU interpreter
(TRITON_INTERPRET=1 only while they are decorated, so no other plugin's Triton code is
affected); GPU tests skip cleanly with the reason."""
from __future__ import annotations

import os

import pytest
import torch


def _build_for_interpreter() -> None:
    before = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"
    try:
        import triton.experimental.gluon  # noqa: F401  (imported lazily by the interpreter; must agree)
        import oracle_triton.gemm  # noqa: F401
        import oracle_triton.moe_kernels  # noqa: F401
        import oracle_triton.gemv  # noqa: F401
        import oracle_triton.moe_gemv  # noqa: F401
        import oracle_triton.moe_w4a4  # noqa: F401
        import oracle_triton.moe_persist  # noqa: F401
        import oracle_triton.moe_dequant  # noqa: F401
        import oracle_triton.moe_rega  # noqa: F401
        import oracle_triton.moe_ws  # noqa: F401
        import oracle_triton.fp4_gemv  # noqa: F401
        import oracle_triton.fp8_rowgemv  # noqa: F401
        import oracle_triton.w4_rowgemv  # noqa: F401
    finally:
        if before is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = before


if not torch.cuda.is_available():
    try:
        import numpy  # noqa: F401  (the interpreter needs it)
        _build_for_interpreter()
    except ImportError:
        pass


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
