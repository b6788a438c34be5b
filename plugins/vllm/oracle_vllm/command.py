"""`oracle vllm-report FILE`: the per-layer table of a vLLM run with kernel-oracle in shadow or enforce.

FILE is the plugin's JSON-lines log (`"log": PATH` in the settings) or vLLM's own output
captured to a file; `--rejected` lists every rejected candidate with its reason and rule,
`--json` prints the records as a JSON array (for scripts).
"""
from __future__ import annotations

import json
import sys
from typing import Any

NAME = "vllm-report"


def add_parser(sub: Any) -> Any:
    p = sub.add_parser(NAME, help="per-layer table of a vLLM run's kernel-oracle records",
                       description=__doc__.split("\n\n")[0])
    p.add_argument("file", help="the plugin's log (JSON lines) or vLLM's captured output")
    p.add_argument("--rejected", action="store_true", help="list every rejected candidate under its layer")
    p.add_argument("--json", action="store_true", help="print the records as one JSON array")
    return p


def run(args: Any) -> int:
    from oracle.integration.records import read_records, render_table

    found = read_records(args.file)
    if args.json:
        json.dump(found, sys.stdout, indent=1, sort_keys=True)
        sys.stdout.write("\n")
    else:
        print(render_table(found, rejected=args.rejected))
    return 0
