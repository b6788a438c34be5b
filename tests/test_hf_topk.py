"""oracle.hf.topk: the routers' one-launch top-k of compiled decode steps, against torch.topk.

The Triton kernel runs under Triton's CPU interpreter (a subprocess, so this process never imports
triton); the graph rewrite is checked on an aten graph (make_fx) and through inductor on the CPU.
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from oracle.hf import topk as T  # noqa: E402

_KERNEL = r"""
import torch
from oracle.hf import topk as T
torch.manual_seed(0)
for rows, width, k, dtype in [(1, 128, 8, torch.float32), (3, 32, 4, torch.bfloat16), (2, 257, 8, torch.float32),
                              (1, 7, 7, torch.float32)]:
    x = torch.randn(rows, width).to(dtype)
    x[0, 3] = float("-inf")
    v = torch.empty(rows, k, dtype=dtype); i = torch.empty(rows, k, dtype=torch.int64)
    T._kernel()[(rows,)](x, v, i, width, x.stride(0), K=k, BLOCK=max(16, 1 << (width - 1).bit_length()))
    want_v, want_i = torch.topk(x, k, dim=-1)
    assert torch.equal(v, want_v) and torch.equal(i, want_i), (rows, width, k, v, want_v, i, want_i)
x = torch.tensor([[1.0, 3.0, 3.0, 2.0, 3.0, float("-inf"), float("-inf")]])    # ties: smaller index first
v = torch.empty(1, 6); i = torch.empty(1, 6, dtype=torch.int64)
T._kernel()[(1,)](x, v, i, 7, 7, K=6, BLOCK=16)
assert i.tolist() == [[1, 2, 4, 3, 0, 5]] and v[0, :5].tolist() == [3.0, 3.0, 3.0, 2.0, 1.0], (i, v)
x = torch.tensor([[1.0, float("nan"), 5.0, float("nan"), 2.0]])       # NaN first, as torch.topk
v = torch.empty(1, 4); i = torch.empty(1, 4, dtype=torch.int64)
T._kernel()[(1,)](x, v, i, 5, 5, K=4, BLOCK=16)
assert i.tolist() == [[1, 3, 2, 4]] and v[0, :2].isnan().all() and v[0, 2:].tolist() == [5.0, 2.0], (i, v)
want_v, want_i = torch.topk(x, 4)
assert sorted(want_i[0, :2].tolist()) == [1, 3] and want_i[0, 2:].tolist() == [2, 4]
print("ok")
"""


def test_kernel_equals_torch_topk_under_the_interpreter():
    pytest.importorskip("triton")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    out = subprocess.run([sys.executable, "-c", _KERNEL], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-2000:]


def _router(logits):
    probs = torch.softmax(logits, dim=-1, dtype=torch.float)
    top, idx = torch.topk(probs, 4, dim=-1)
    wide, _ = torch.topk(logits, 2, dim=0)           # not the last dimension: left alone
    return top / top.sum(-1, keepdim=True), idx, wide


def test_rewrite_replaces_last_dim_topks_only_and_keeps_the_result():
    from torch.fx.experimental.proxy_tensor import make_fx

    logits = torch.randn(3, 32)
    gm = make_fx(_router)(logits)
    assert T.rewrite(gm.graph) == 1
    gm.recompile()
    targets = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert torch.ops.oracle.topk.default in targets and targets.count(torch.ops.aten.topk.default) == 1
    for got, want in zip(gm(logits), _router(logits)):
        assert torch.equal(got, want)


def test_eligibility_follows_torch_topk_arguments():
    from torch.fx.experimental.proxy_tensor import make_fx

    x = torch.randn(2, 2000)
    for fn, want in [(lambda t: torch.topk(t, 8), 0), (lambda t: torch.topk(t[:, :64], 8, largest=False), 0),
                     (lambda t: torch.topk(t[:, :64], 8, sorted=False), 1), (lambda t: torch.topk(t[:, :64], 40), 0)]:
        assert T.rewrite(make_fx(fn)(x).graph) == want


def test_inductor_runs_the_pass_and_equals_eager(monkeypatch):
    torch._dynamo.reset()
    rewrites = []
    monkeypatch.setattr(T, "rewrite", lambda graph, real=T.rewrite: rewrites.append(real(graph)) or rewrites[-1])
    logits = torch.randn(2, 64)
    fn = torch.compile(_router, backend="inductor", options={"post_grad_custom_post_pass": T.post_grad_pass(),
                                                            "fx_graph_cache": False})   # so the pass runs
    for got, want in zip(fn(logits), _router(logits)):
        assert torch.allclose(got.float(), want.float(), rtol=1e-6, atol=0) and got.dtype == want.dtype
    assert rewrites == [1]


def test_probe_turns_the_pass_off_with_one_warning_when_the_op_fails(monkeypatch):
    """A device where the op fails or disagrees (faked: a CUDA device, an op that raises) gets a warning and
    compiled steps keep torch.topk; the CPU needs no probe."""
    assert T.works(torch.device("cpu"))
    T.works.cache_clear()
    monkeypatch.setattr(T, "topk", lambda x, k: (_ for _ in ()).throw(RuntimeError("no kernel image")))
    monkeypatch.setattr(torch, "randperm", lambda n, device=None: torch.arange(n))
    with pytest.warns(RuntimeWarning, match="no kernel image"):
        assert not T.works(torch.device("cuda", 0))
    T.works.cache_clear()
