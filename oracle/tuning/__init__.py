"""Measured selection's data: the tuning file, its store, the measurement sets the engine
reads, and the runner `oracle tune` (oracle/cli/tune.py) times candidates with.

The ranking itself is pure and sits beside the engine (`oracle.objective`, `oracle.ranking`);
this package sits below the engine and imports nothing above it.

Modules, each with one job (none imports torch at import time):
  schema        the tuning file's pydantic models and the layer key entries are filed under
  metadata      what the live platform is (device, versions) and how a file's metadata differs
  store         reading (clear errors), merging and atomically writing tuning files, under a lock
  measurements  loaded, platform-checked measurement sets the engine consults (cached; oracle.reload())
  runner        enumerating candidates and timing them (torch, lazily)
  timing        CUDA-graph / eager / CPU timing of one call
  synthetic     checkpoint tensors and inputs for timing (torch; quantized by a plugin's hook)
"""
from __future__ import annotations

from ..objective import Objective, parse_objective, rank
from .schema import SCHEMA_VERSION, TuningFile, layer_key

__all__ = ["Objective", "SCHEMA_VERSION", "TuningFile", "layer_key", "parse_objective", "rank"]
