"""The tuning file: metadata about where it was measured, and one entry per
(layer signature, candidate, M). Versioned; `oracle schema tuning` prints it."""
from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

SCHEMA_VERSION = 1
Method = Literal["graph", "eager"]
#: Largest token count a tuning file or `oracle tune --m` may name (stated in docs/user-guide.md).
MAX_M = 1 << 20
#: Most distinct token counts per (layer, candidate): bounds what a report repeats per candidate.
MAX_MS = 64
#: Longest time a tuning file may hold, in ms (one hour per call; anything longer is a corrupt figure).
MAX_TIME_MS = 3_600_000.0
#: A time in milliseconds: a JSON number in (0, MAX_TIME_MS] (not a bool, not a string, not NaN/Infinity).
Millis = Annotated[float, Field(gt=0, le=MAX_TIME_MS, allow_inf_nan=False)]
Spread = Annotated[float, Field(ge=0, le=MAX_TIME_MS, allow_inf_nan=False)]
#: Text fields are bounded too, so what a report repeats per layer and candidate stays small.
Name = Annotated[str, Field(max_length=256)]
Text = Annotated[str, Field(max_length=2000)]
LayerKey = Annotated[str, Field(max_length=8192)]


class _Strict(BaseModel):
    """Strict JSON types: `true` is no number, "0.5" no time, 1.0 no token count."""

    model_config = ConfigDict(extra="forbid", strict=True)


class Metadata(_Strict):
    """Where and with what the figures were taken (the facts FlashInfer's autotuner keys on)."""

    vendor: Name = Field(description="nvidia, amd or cpu")
    device_name: Name = Field(description="the device as the driver names it, e.g. 'NVIDIA H200'")
    capability: Name | None = Field(None, description="compute capability, e.g. '9.0'; null on CPU")
    driver: Name | None = Field(None, description="GPU driver version (recorded, not compared)")
    cuda: Name | None = Field(None, description="CUDA version torch was built with (recorded, not compared)")
    torch: Name | None = Field(None, description="installed torch distribution version")
    triton: Name | None = Field(None, description="installed triton distribution version")
    oracle: Name = Field(description="kernel-oracle version")
    plugins: dict[Name, Name | None] = Field(default_factory=dict, max_length=256,
                                            description="plugin distribution -> version, as registered")
    created: Name = Field(description="UTC time of the first measurement in this file (ISO 8601)")
    updated: Name = Field(description="UTC time of the last merge (ISO 8601)")


class Entry(_Strict):
    """One candidate's time for one layer signature at one token count M."""

    layer_key: LayerKey = Field(description="canonical JSON of the layer's fields (everything but its name)")
    layer: Name = Field("", description="a layer name it was measured for (for people; not part of the key)")
    kernel: Name
    backend: Name
    mode: Name
    activation_format: Name
    m: int = Field(gt=0, le=MAX_M, description="tokens per call")
    status: Literal["ok", "failed"]
    median_ms: Millis | None = Field(None, description="median of the timed repeats (finite, > 0)")
    min_ms: Millis | None = None
    max_ms: Millis | None = None
    iqr_ms: Spread | None = Field(None, description="interquartile range of the repeats (the spread)")
    repeats: int = Field(0, ge=0)
    method: Method | None = Field(None, description="graph: CUDA-graph replay; eager: direct calls")
    testing_only: bool = Field(False, description="the kernel is meant for testing (emulation)")
    error: Text | None = Field(None, description="why the candidate failed, when status is failed")

    @model_validator(mode="after")
    def _consistent(self) -> "Entry":
        if self.status == "ok" and self.median_ms is None:
            raise ValueError("status ok needs median_ms (a finite time > 0)")
        if self.status == "failed" and not self.error:
            raise ValueError("status failed needs error (why the candidate failed)")
        if self.min_ms is not None and self.max_ms is not None and self.min_ms > self.max_ms:
            raise ValueError(f"min_ms {self.min_ms} is greater than max_ms {self.max_ms}")
        return self

    @property
    def key(self) -> tuple[str, str, str, str, int]:
        return (self.layer_key, self.kernel, self.mode, self.activation_format, self.m)


class Reference(_Strict):
    """A reference figure beside the candidates (BF16 x @ w.T; HBM time of the weights)."""

    layer_key: LayerKey
    m: int = Field(gt=0, le=MAX_M)
    bf16_ms: Millis | None = Field(None, description="BF16 matmul (linear layers), same timing method")
    hbm_ms: Millis | None = Field(None, description="bytes of the checkpoint weights / HBM bandwidth")


class TuningFile(_Strict):
    """A tuning file as written by `oracle tune`."""

    schema_version: Literal[1] = Field(SCHEMA_VERSION, description="tuning file schema version")
    metadata: Metadata
    entries: list[Entry] = Field(default_factory=list)
    references: list[Reference] = Field(default_factory=list)

    @field_validator("entries")
    @classmethod
    def _bounded(cls, entries: list[Entry]) -> list[Entry]:
        ms: dict[tuple, set[int]] = {}
        for e in entries:
            got = ms.setdefault((e.layer_key, e.kernel, e.mode, e.activation_format), set())
            got.add(e.m)
            if len(got) > MAX_MS:
                raise ValueError(f"more than {MAX_MS} token counts for kernel {e.kernel} [{e.mode}] on one layer; "
                                 f"a tuning file holds at most {MAX_MS} per candidate")
        return entries

    def merged_with(self, newer: "TuningFile") -> "TuningFile":
        """Entries of both, `newer` winning per (layer, candidate, M); metadata of `newer`, first creation kept."""
        entries = {e.key: e for e in self.entries}
        entries.update({e.key: e for e in newer.entries})
        refs = {(r.layer_key, r.m): r for r in self.references}
        refs.update({(r.layer_key, r.m): r for r in newer.references})
        meta = newer.metadata.model_copy(update={"created": min(self.metadata.created, newer.metadata.created)})
        return TuningFile(metadata=meta, entries=sorted(entries.values(), key=lambda e: e.key),
                          references=sorted(refs.values(), key=lambda r: (r.layer_key, r.m)))


def layer_key(layer: Any) -> str:
    """The key a layer's figures are filed under: its decision-relevant fields, as canonical JSON."""
    data: dict[str, Any] = {"type": type(layer).__name__}
    data.update(layer.model_dump(mode="json", exclude={"name"}))
    return json.dumps(data, sort_keys=True, separators=(",", ":"))


def tuning_schema() -> dict:
    return TuningFile.model_json_schema()
