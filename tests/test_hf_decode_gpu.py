"""CUDA-graph decoding on a GPU: every oracle kernel on the decode path captures and replays.

Two references: each kernel's own eager `apply` on the same input (a captured call, replayed
after the static input was overwritten, must give the eager result of the new input, up to
summation order, directly and through the oracle::* custom ops), and the eager Decoder (graph replay must give
the same greedy tokens, at batch 1 and 4, for Qwen3-MoE FP8, gpt-oss MXFP4 and DeepSeek MLA).
"""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA device", allow_module_level=True)

pytestmark = pytest.mark.gpu     # so scripts/gpu-check (`pytest -m gpu`) runs them

import decode_models  # noqa: E402

from oracle.hf.decode import Decoder  # noqa: E402
from oracle.integration import ops  # noqa: E402


@pytest.fixture(scope="module", params=decode_models.KINDS)
def model(request, tmp_path_factory):
    return decode_models.build(request.param, tmp_path_factory.mktemp(request.param), device="cuda")


def _inputs(kernel, m, gen):
    layer = kernel.layer
    if layer.op == "linear":
        return (torch.randn(m, layer.in_features, generator=gen, device="cuda").bfloat16(),)
    x = torch.randn(m, layer.hidden_size, generator=gen, device="cuda").bfloat16()
    ids = torch.stack([torch.randperm(layer.num_experts, generator=gen, device="cuda")[:layer.top_k]
                       for _ in range(m)]).int()
    return x, torch.rand(m, layer.top_k, generator=gen, device="cuda"), ids


def _replay_equals_eager(fn, kernel, m):
    gen = torch.Generator(device="cuda").manual_seed(m)
    static = _inputs(kernel, m, gen)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn(*static)
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = fn(*static)
    fresh = _inputs(kernel, m, gen)
    for s, f in zip(static, fresh):
        s.copy_(f)
    g.replay()
    torch.cuda.synchronize()
    want = fn(*fresh)
    # equal up to summation order (split-K reductions may add in arrival order); a stale input or
    # a skipped launch would differ completely
    return torch.allclose(out.float(), want.float(), rtol=1e-2, atol=1e-2 * float(want.float().abs().max()))


@pytest.mark.parametrize("m", [1, 4])
def test_every_kernel_on_the_decode_path_captures_and_replays(model, m):
    for name, kernel in model.oracle.kernels.items():
        handle = ops.register(kernel)
        op = torch.ops.oracle.linear if kernel.layer.op == "linear" else torch.ops.oracle.moe
        assert _replay_equals_eager(kernel.apply, kernel, m), f"{name}: {kernel!r} replay differs from eager"
        assert _replay_equals_eager(lambda *a: op(*a, handle), kernel, m), f"{name}: oracle op replay differs"


@pytest.mark.parametrize("batch", [1, 4])
def test_graph_decode_equals_eager_decode(model, batch):
    ids = torch.randint(0, model.config.vocab_size, (batch, 20), device="cuda",
                        generator=torch.Generator(device="cuda").manual_seed(batch))
    eager = Decoder(model, batch, 64, "eager").generate(ids, 24)
    graphs = Decoder(model, batch, 64, "graphs").generate(ids, 24)
    assert torch.equal(graphs, eager)


def test_eager_steps_replay_kernel_mlps_as_one_graph(model):
    """oracle.hf.blocks on a GPU: the eager decoder wraps every MLP made of oracle kernels (DeepSeek's
    dense MLP and shared experts; none in the Qwen3-MoE and gpt-oss kinds) and its steps replay each
    from one graph, in place where the input comes back at its address (tokens: checked against graphs above)."""
    from oracle.hf import blocks

    mlps = [m for m in model.modules() if blocks.is_kernel_mlp(m)]
    ids = torch.randint(0, model.config.vocab_size, (1, 20), device="cuda",
                        generator=torch.Generator(device="cuda").manual_seed(7))
    Decoder(model, 1, 64, "eager").generate(ids, 8)
    assert len(mlps) == (3 if "deepseek" in str(model.config.model_type) else 0)
    for m in mlps:
        served = m._oracle_mlp_graph.eager.served      # [in place, copied in, raw]
        assert served[0] + served[1] >= 4, served


def test_compiled_layers_capture_and_follow_eager(model):
    """Inductor-compiled layers inside the captured step: the capture succeeds (no fallback) and the
    step logits stay within the FP8 bound of tests/test_hf_decode_models.py of the eager steps'."""
    ids = torch.randint(0, model.config.vocab_size, (2, 12), device="cuda",
                        generator=torch.Generator(device="cuda").manual_seed(7))
    errs, mode = decode_models.compiled_step_errors(model, ids)
    assert mode == "compiled", mode
    assert errs.median() < 0.15, errs


def test_router_topk_op_equals_torch_topk():
    """oracle::topk (oracle.hf.topk, the routers' top-k in compiled steps) on CUDA: torch.topk's values
    and indices (rows without ties), for fp32 and bf16 rows, rows with a stride and a row with a NaN."""
    from oracle.hf import topk  # noqa: F401 - registers the op

    gen = torch.Generator(device="cuda").manual_seed(3)       # distinct values, exact in bf16 (no ties)
    x = torch.stack([torch.randperm(128, generator=gen, device="cuda") for _ in range(8)]).float() / 16 - 4
    nan = x.clone()
    nan[2, 5] = float("nan")                           # counts as the largest value, as in torch.topk
    for t, k in ((x, 8), (x.bfloat16(), 8), (x[:, :32], 4), (x[:1], 8), (nan, 8)):
        v, i = torch.ops.oracle.topk(t, k)
        want_v, want_i = torch.topk(t, k)
        assert torch.equal(v.nan_to_num(), want_v.nan_to_num()) and torch.equal(i, want_i)
