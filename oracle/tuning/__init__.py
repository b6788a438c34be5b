"""Measured selection: `oracle tune` times every viable kernel on the live device and
keeps the figures in a versioned tuning file; the engine ranks candidates by them.

Modules, each with one job (none imports torch at import time):
  schema        the tuning file's pydantic models and the layer key entries are filed under
  metadata      what the live platform is (device, versions) and how a file's metadata differs
  store         reading (clear errors), merging and atomically writing tuning files, under a lock
  objective     `decode | prefill | balanced | M:weight,...` and the pure ranking function
  measurements  loaded, platform-checked measurement sets the engine consults (cached; oracle.reload())
  runner        enumerating candidates and timing them (torch, lazily)
  command       the `oracle tune` subcommand
"""
from __future__ import annotations

from .objective import Objective, parse_objective, rank
from .schema import SCHEMA_VERSION, TuningFile, layer_key

__all__ = ["Objective", "SCHEMA_VERSION", "TuningFile", "layer_key", "parse_objective", "rank"]
