"""The oracle side of oracle-vllm: the `oracle vllm-report` command (reads logs; imports no vLLM)."""
from __future__ import annotations

from oracle import hookimpl

from . import command


@hookimpl
def register_commands(register):
    register(command)
