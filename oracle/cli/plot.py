"""`oracle tune --plot FILE.png`: per distinct layer, each candidate's time against M on log
axes, BF16 matmul and the HBM limit as reference lines, the objective's winner drawn bold."""
from __future__ import annotations

import math
from typing import Any

from ..explain.describe import describe_layer
from ..tuning.runner import ranking


def plot(result: Any, objective: Any, path: str, title: str, allow_testing_only: bool = False) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt


    groups = result.groups
    cols = min(3, max(1, len(groups)))
    rows = max(1, math.ceil(len(groups) / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 3.8 * rows), squeeze=False)
    for ax, g in zip(axes.flat, groups):
        ranked = ranking(result, g, objective, allow_testing_only)
        best = ranked[0].key if ranked and ranked[0].score is not None else None
        for r in ranked:
            if not r.points:
                continue
            xs, ys = [p[0] for p in r.points], [p[1] for p in r.points]
            chosen = r.key == best
            label = f"{r.key[0]} [{r.key[2]}]" + (" (selected)" if chosen else "") + \
                (" (testing only)" if r.testing_only else "")
            ax.plot(xs, ys, marker="*" if chosen else "o", linewidth=2.6 if chosen else 1.2, label=label)
        refs = sorted((r for r in result.references if r.layer_key == g.key), key=lambda r: r.m)
        bf16 = [(r.m, r.bf16_ms) for r in refs if r.bf16_ms]
        if bf16:
            ax.plot(*zip(*bf16), linestyle="--", color="gray", label="BF16 x @ w.T")
        hbm = [(r.m, r.hbm_ms) for r in refs if r.hbm_ms]
        if hbm:
            ax.plot(*zip(*hbm), linestyle=":", color="black", label="HBM limit (weights)")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("M (tokens)")
        ax.set_ylabel("ms")
        shape = describe_layer(g.layer).split(",")[0] if hasattr(g.row, "layer") else ""
        ax.set_title(f"{g.row.role} x{g.count}  {shape}", fontsize=8)
        ax.legend(fontsize=6)
    for ax in list(axes.flat)[len(groups):]:
        ax.axis("off")
    fig.suptitle(f"{title} (objective {objective})", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
