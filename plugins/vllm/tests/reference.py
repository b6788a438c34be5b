"""Teacher-forced log-probabilities of token sequences under compressed-tensors' own decompression of a
checkpoint in transformers (run by the main .venv, which has the compressed-tensors that wrote it).

argv: a JSON file with jobs {"id", "checkpoint", "activations": bool (keep the scheme's activation
fake-quantization, W8A8), "pairs": [[prompt ids, generated ids], ...]} and the output JSON file:
{id: per pair, per generated position, [logprob of the generated token, the largest logprob there]}.
One process for every job, so transformers is imported once. A test helper, not a test.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests"))
import ct_checkpoints as ct  # noqa: E402  (the repository's checkpoint writer and reference builder)


def logprobs(model, prompt: list[int], generated: list[int]) -> list[list[float]]:
    ids = torch.tensor([prompt + generated])
    logp = torch.log_softmax(model(ids).logits[0].float(), dim=-1)
    return [[float(logp[len(prompt) - 1 + i][t]), float(logp[len(prompt) - 1 + i].max())]
            for i, t in enumerate(generated)]


def main() -> int:
    jobs = json.loads(Path(sys.argv[1]).read_text())
    out = {}
    with torch.no_grad():
        for job in jobs:
            model = ct.reference_model(Path(job["checkpoint"]), activations=job["activations"])
            out[job["id"]] = [logprobs(model, p, g) for p, g in job["pairs"]]
    Path(sys.argv[2]).write_text(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
