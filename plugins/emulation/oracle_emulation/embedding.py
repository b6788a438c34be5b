"""Emulated embedding lookup: the packed table is dequantized once, lookups are plain indexing."""
from __future__ import annotations

from typing import Any

import torch

from oracle.errors import TensorError
from oracle.formats import torch_dtype
from oracle.kernel import Kernel
from oracle.tensors import check_dtype, shape_of

from .weights import dequantize_weight


class EmulationEmbedding(Kernel):
    """table[ids] for Q8_0 (and any block codec) tables."""

    table: torch.Tensor | None = None

    def process_weights(self, weight: Any) -> None:
        layer = self.layer
        v, d = layer.num_embeddings, layer.embedding_dim
        self.dtype = torch_dtype(layer.dtype)
        table = dequantize_weight(self.mode.weight, {"weight": weight}, {"weight": "weight"}, [], v, d)
        self.table = table.to(self.dtype).contiguous()

    def apply(self, ids: Any) -> torch.Tensor:
        if self.table is None:
            raise RuntimeError(f"{self!r}: call process_weights before apply")
        if not isinstance(ids, torch.Tensor):
            raise TensorError("ids", "a torch.Tensor of token ids", type(ids).__name__)
        check_dtype("ids", ids, (torch.int32, torch.int64), "integer token ids")
        if ids.device != self.table.device:
            raise TensorError("ids", f"a tensor on {self.table.device} (where the table is)", str(ids.device))
        if ids.numel():
            lo, hi = int(ids.min()), int(ids.max())
            if lo < 0 or hi >= self.layer.num_embeddings:
                bad = lo if lo < 0 else hi
                raise TensorError("ids", f"ids in [0, {self.layer.num_embeddings})",
                                  f"{bad} (shape {shape_of(ids)})")
        return torch.nn.functional.embedding(ids.long(), self.table)
