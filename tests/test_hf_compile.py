"""oracle.hf models under torch.compile: each oracle layer is one opaque custom-op node.

Reference: the same model run eagerly. Compiled with the aot_eager backend (Dynamo tracing,
AOTAutograd over the ops' fake implementations, the same aten kernels afterwards), the logits
must be bit-equal to eager, a fused q/k/v or gate/up kernel must still run once per forward
(the runner's cache survives tracing), and new inputs of the same shape must not recompile
(nothing the runner keeps between calls is guarded on).
"""
from __future__ import annotations

import contextlib

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import tf_checkpoints as tf  # noqa: E402

import oracle.hf  # noqa: E402


def test_compiled_model_runs_each_kernel_once_and_equals_eager(tmp_path, monkeypatch):
    model = oracle.hf.load_quantized(tf.write_fp8_moe(tmp_path / "fp8"), device="cpu")
    calls = []
    for name, kernel in model.oracle.kernels.items():
        monkeypatch.setattr(kernel, "apply", lambda *a, _f=kernel.apply, _n=name, **k: calls.append(_n) or _f(*a, **k))
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="aot_eager")
    # config.patch, not monkeypatch: undoing a monkeypatch deletes the option from torch's config
    # module, which breaks every later compile in the process
    with torch.no_grad(), contextlib.ExitStack() as later:
        for seed in range(3):
            ids = torch.randint(0, 256, (1, 6), generator=torch.Generator().manual_seed(seed))
            want = model(ids).logits
            eager_calls, calls[:] = list(calls), []
            got = compiled(ids).logits
            assert torch.equal(got, want)
            assert sorted(calls) == sorted(eager_calls) == sorted(model.oracle.kernels)
            calls.clear()
            if seed == 0:
                later.enter_context(torch._dynamo.config.patch(error_on_recompile=True))
