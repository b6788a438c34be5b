"""Where a kernel's warps wait, from Nsight Compute's SASS page (`ncu -i R --page source --print-source sass --csv`):
the warp-stall samples summed by region (a run of instructions with one execution count: in a warp-specialized
kernel each partition's loop, its prologue, the MMA warps' epilogue), each with its top stall reasons, and the
instructions with the most samples.

Why: the w4_ws launches (R98b, R101c) are bound by how their partitions hand K tiles to each other, which the
details page's averages hide; which region waits, and on what (a global load's scoreboard, an mbarrier try-wait,
the program's closing barrier), says what to change. R101c found the decode warps of the 4096-token MoE launches
waiting at the program's end about a fifth of their time, which the persistent grid (w4_ws's PT) addresses.

    python bench/ncu_stalls.py ncu-sass.csv [--top 20] [--regions 8]
"""
from __future__ import annotations

import argparse
import collections
import csv
import sys

ALL = "Warp Stall Sampling (All Samples)"
RUNS = "Instructions Executed"


def kernels(path: str) -> list[dict]:
    """The CSV's kernels: {"name", "header", "rows"} per "Kernel Name" block (one per profiled launch)."""
    out: list[dict] = []
    with open(path, newline="") as f:
        for row in csv.reader(f):
            if row and row[0] == "Kernel Name":
                out.append({"name": row[1] if len(row) > 1 else "?", "header": [], "rows": []})
            elif row and row[0] == "Address" and out:
                out[-1]["header"] = row
            elif out and out[-1]["header"] and len(row) > 5:
                out[-1]["rows"].append(row)
    return out


def _num(value: str) -> float:
    try:
        return float(value.replace(",", "")) if value else 0.0
    except ValueError:
        return 0.0


def summarize(kernel: dict, top: int, regions: int) -> list[str]:
    """Lines: each region's share of the samples and its top stall reasons, then the top instructions."""
    head = {name: i for i, name in enumerate(kernel["header"])}
    stalls = [n for n in kernel["header"] if n.startswith("stall_") and "Not Issued" not in n]
    rows = kernel["rows"]
    total = sum(_num(r[head[ALL]]) for r in rows) or 1.0
    groups: dict[str, dict] = collections.defaultdict(lambda: {"samples": 0.0, "why": collections.Counter(),
                                                              "n": 0, "spans": []})
    start = 0
    for i in range(1, len(rows) + 1):
        if i == len(rows) or rows[i][head[RUNS]] != rows[start][head[RUNS]]:
            g = groups[rows[start][head[RUNS]]]
            g["spans"].append((start, i - 1))
            for r in rows[start:i]:
                g["samples"] += _num(r[head[ALL]])
                g["n"] += 1
                for s in stalls:
                    g["why"][s[6:]] += _num(r[head[s]])
            start = i
    lines = [f"{kernel['name']}: {len(rows)} instructions, {total:.0f} samples"]
    for runs, g in sorted(groups.items(), key=lambda kv: -kv[1]["samples"])[:regions]:
        why = ", ".join(f"{k} {100 * v / max(g['samples'], 1):.0f}%" for k, v in g["why"].most_common(4))
        lines.append(f"  region executed {runs} times, {g['n']} instructions (spans {g['spans'][:4]}): "
                     f"{100 * g['samples'] / total:.1f}% of samples; {why}")
    lines.append("  top instructions:")
    order = sorted(range(len(rows)), key=lambda i: -_num(rows[i][head[ALL]]))
    for i in order[:top]:
        r = rows[i]
        why = ", ".join(f"{s[6:]} {_num(r[head[s]]):.0f}" for s in sorted(stalls, key=lambda s: -_num(r[head[s]]))[:3])
        lines.append(f"    {i:5d} {100 * _num(r[head[ALL]]) / total:5.2f}% x{r[head[RUNS]]:<8} {r[head['Source']][:64]:64} {why}")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=20)
    ap.add_argument("--regions", type=int, default=8)
    args = ap.parse_args(argv)
    found = kernels(args.csv)
    if not found:
        print(f"{args.csv}: no 'Kernel Name' block (not ncu's SASS page as CSV)", file=sys.stderr)
        return 2
    for kernel in found:
        print("\n".join(summarize(kernel, args.top, args.regions)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
