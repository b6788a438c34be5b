"""b12x packed Q8_0 embedding: token rows decoded straight from GGML blocks to BF16."""
from __future__ import annotations

from functools import partial
from typing import Any, Hashable

from oracle.errors import CaptureError, InputError
from oracle.formats import CODEC_BLOCKS
from oracle.kernel import Kernel
from oracle.warmup import WarmupUnit, is_capturing

from .common import PlanCache, capacities, capacity, check_tensor, refuse_during_capture, reuse_packed_storage
from .library import attr, load


_BLOCK, _BYTES = CODEC_BLOCKS["q8_0"]
_PLANS = PlanCache()


class B12xQ8Embedding(Kernel):
    weight: Any = None

    def __init__(self, layer: Any, mode: Any, spec: Any):
        super().__init__(layer, mode, spec)
        self.rows, self.dim = layer.num_embeddings, layer.embedding_dim
        self.owner = f"{spec.name} layer {layer.name!r}" if layer.name else spec.name

    def process_weights(self, weight: Any = None) -> None:
        import torch

        refuse_during_capture(f"{self.owner}: process_weights")
        if isinstance(weight, torch.Tensor) and weight.ndim != 3:
            raise InputError(f"b12x serves Q8_0 tables only; packed vectors ({weight.ndim}-D) are not supported: "
                             f"expected [{self.rows}, {self.dim // _BLOCK}, {_BYTES}]", source=self.owner,
                             field="weight")
        check_tensor(self.owner, "weight", weight, dtypes=[torch.uint8],
                     shape=[self.rows, self.dim // _BLOCK, _BYTES], what="GGML Q8_0 blocks [V, D/32, 34]")
        if not weight.is_cuda:
            raise InputError("b12x looks rows up on the GPU: expected a CUDA tensor", source=self.owner,
                             field="weight")
        self.weight, _ = reuse_packed_storage(self.weight, weight.contiguous())

    def apply(self, ids: Any) -> Any:
        import torch

        if self.weight is None:
            raise RuntimeError(f"{self.owner}: call process_weights before apply")
        check_tensor(self.owner, "ids", ids, dtypes=[torch.int32, torch.int64], shape=None, what="token ids")
        flat = ids.reshape(-1)
        if not flat.is_contiguous():
            if is_capturing():
                raise CaptureError(f"{self.owner}: ids must be contiguous during CUDA-graph capture")
            flat = flat.contiguous()
        out = torch.empty(flat.numel(), self.dim, dtype=torch.bfloat16, device=self.weight.device)
        plan = self._plan_for(capacity(flat.numel()), flat.dtype, running=True)
        attr(load("sequence.embedding"), "run", "Q8_0 embedding")(self.weight, flat, out=out, plan=plan)
        return out.reshape(*ids.shape, self.dim)

    def _signature(self, cap: int, id_dtype: Any) -> Hashable:
        return (self.rows, self.dim, str(id_dtype), str(self.weight.device), cap)

    def _plan_for(self, cap: int, id_dtype: Any, *, running: bool = False) -> Any:
        return _PLANS.get(self._signature(cap, id_dtype), partial(self._make_plan, cap, id_dtype),
                          owner=self.owner, what=f"{cap} ids", running=running)

    def _make_plan(self, cap: int, id_dtype: Any) -> Any:
        emb = load("sequence.embedding")
        query = attr(emb, "EmbeddingQuery", "Q8_0 embedding")(max_rows=cap, table_rows=self.rows, width=self.dim,
                                                              row_stride=self.weight.stride(0), weight_dtype="uint8",
                                                              id_dtype=str(id_dtype).removeprefix("torch."))
        return attr(emb, "plan", "Q8_0 embedding")(query, device=self.weight.device)

    def warmup_units(self, token_counts) -> list:
        import torch

        return [WarmupUnit(kernel=self.spec.name, signature=self._signature(cap, torch.int64),
                           run=partial(self._warm, cap)) for cap in capacities(token_counts)]

    def _warm(self, cap: int) -> None:
        import torch

        self.apply(torch.zeros(cap, dtype=torch.int64, device=self.weight.device))
