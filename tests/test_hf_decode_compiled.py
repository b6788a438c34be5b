"""oracle.hf.compiled: decoder layers compiled once (torch.compile) for the decode step, on the CPU.

References: the eager Decoder over the same static cache. With the aot_eager backend (Dynamo and
AOTAutograd tracing, the same aten kernels afterwards) the greedy tokens must be bit-equal: this
checks the one-layer cache view, the shared op handles (each layer runs its own kernels through
the first layer's compiled code) and that every layer reuses one compiled graph per layer kind.
With inductor (fused RMSNorm, rotary, residuals: other rounding), each step's logits must stay
within a BF16-rounding distance of the eager step's, fed the same tokens.
"""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import decode_models  # noqa: E402
from torch._dynamo.utils import counters  # noqa: E402

from oracle.hf.compiled import compile_layers  # noqa: E402
from oracle.hf.decode import Decoder  # noqa: E402

def _prompt(model, batch):
    return torch.randint(0, model.config.vocab_size, (batch, 10), generator=torch.Generator().manual_seed(batch))


#: compiled graphs per model: one shared by every layer (gpt-oss's sliding-window and full layers too:
#: the window is in the mask, an input); DeepSeek's dense first layers and its MoE layers differ
GRAPHS = {"qwen3-moe-fp8": 1, "gpt-oss-mxfp4": 1, "deepseek-fp8": 2}


@pytest.mark.parametrize("kind", sorted(GRAPHS))
def test_compiled_decode_equals_eager_and_layers_share_compiled_graphs(kind, tmp_path):
    model = decode_models.build(kind, tmp_path)
    ids = _prompt(model, 2)
    want = Decoder(model, 2, 32, "eager").generate(ids, 12)
    torch._dynamo.reset()
    counters.clear()
    compile_layers(model, backend="aot_eager")
    got = Decoder(model, 2, 32, "compiled").generate(ids, 12)
    assert torch.equal(got, want)
    assert counters["stats"]["unique_graphs"] == GRAPHS[kind]
    assert torch.equal(Decoder(model, 2, 32, "eager").generate(ids, 12), want)   # eager stays eager
    assert counters["stats"]["unique_graphs"] == GRAPHS[kind]


def test_inductor_step_logits_follow_eager(tmp_path):
    """FP8 activations round to E4M3 (steps of 6%): a BF16 rounding difference before a quantizer can
    move a value a whole step, so the bound is the one test_hf_decode_models sets for FP8 decode."""
    model = decode_models.build("qwen3-moe-fp8", tmp_path)
    errs, _ = decode_models.compiled_step_errors(model, _prompt(model, 1))
    assert errs.median() < 0.15, errs


def test_inductor_bf16_model_step_logits_follow_eager(tmp_path):
    """Without quantizers the compiled layers differ from eager by BF16 rounding only."""
    model = decode_models.build("qwen3-moe-fp8", tmp_path, engine="bf16")
    errs, _ = decode_models.compiled_step_errors(model, _prompt(model, 1))
    assert errs.max() < 0.02, errs
