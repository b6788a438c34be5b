"""Teacher-forced log-probabilities of token sequences under compressed-tensors' own decompression of a
checkpoint in transformers (run by the main .venv, which has the compressed-tensors that wrote it).

argv: checkpoint dir, "1" to keep activation fake-quantization (W8A8 schemes) else "0", a JSON file
with [[prompt ids], [generated ids]] pairs, the output JSON file. Output per pair: for each generated
position, [logprob of the generated token, the largest logprob there]. A test helper, not a test.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests"))
import ct_checkpoints as ct  # noqa: E402  (the repository's checkpoint writer and reference builder)


def main() -> int:
    root, activations, pairs_file, out_file = sys.argv[1:5]
    model = ct.reference_model(Path(root), activations=activations == "1")
    out = []
    with torch.no_grad():
        for prompt, generated in json.loads(Path(pairs_file).read_text()):
            ids = torch.tensor([prompt + generated])
            logp = torch.log_softmax(model(ids).logits[0].float(), dim=-1)
            rows = []
            for i, token in enumerate(generated):
                step = logp[len(prompt) - 1 + i]
                rows.append([float(step[token]), float(step.max())])
            out.append(rows)
    Path(out_file).write_text(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
