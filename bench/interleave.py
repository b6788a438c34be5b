"""Two engines in one process, timed in alternating blocks: bench_decode.py --interleave.

Why: R19 and R20 (eighth pass) timed the same op sequence at 63-117 us per call on the H200
machine's host, drifting by up to 40% within one process's minute and differing by 30% between two
processes at the same stage. Eager decode is host bound on both sides, so a ratio of two processes
timed a minute apart carries that drift (DeepSeek's eager margin was 4%). #24 allows one process per
model "or equal warm-up over every sequence length it will meet": with the static cache every step
has the same shapes, so both engines are built in one process, each gets its own Decoder and the same
16 warm-up tokens, and then blocks of `--steps` timed steps alternate between them, the order
flipped every round (ABBA...), for `--repeat` rounds. Host drift hits both alike; each round's
ratio is reported, and the median and the worst.

Peak memory is not separated here (both models live in the process); the one-process-per-engine
runs give it. What the oracle side pays for sharing the process: the BF16 blocks in between may move
its step's tensors to other addresses, so some calls copy their input into a graph instead of
reading it in place (counted and printed); the comparison is conservative for the oracle.
"""
from __future__ import annotations

import statistics
import time
from typing import Any, Callable

PAIR = ("oracle", "bf16")


def run(args: Any, build: Callable[[str, Any], tuple], save: Callable[[dict], None]) -> dict:
    """Build `args.engines` (oracle and bf16) in this process and time their decode in alternating blocks."""
    import torch

    from oracle.hf.decode import Decoder
    from oracle.integration.eager_graphs import served_counts

    engines = [e for e in args.engines if e in PAIR]
    if len(engines) != 2:
        raise SystemExit(f"bench_decode.py --interleave: --engines must name both of {', '.join(PAIR)}, "
                         f"got {' '.join(args.engines)}")
    cuda = args.device.startswith("cuda")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    result: dict = {"engines": {}, "runs": []}
    models = {}
    for engine in engines:
        before = torch.cuda.memory_allocated() if cuda else 0
        t = time.perf_counter()
        models[engine], kernels = build(engine, args)
        sync()
        result["engines"][engine] = {"build_s": time.perf_counter() - t, "kernels": kernels,
                                     "weights_gib": ((torch.cuda.memory_allocated() if cuda else 0) - before) / 2**30}
        print(f"[{engine}] built in {result['engines'][engine]['build_s']:.1f} s", flush=True)
        save(result)
    gen = torch.Generator().manual_seed(args.seed + 1)
    vocab = models[engines[0]].config.get_text_config(decoder=True).vocab_size
    prompts = torch.randint(0, vocab, (max(args.batch), args.prompt), generator=gen).to(args.device)
    rounds = max(2, args.repeat)
    for batch in args.batch:
        for mode in args.decode:
            ids = prompts[:batch]
            decs = {e: Decoder(models[e], batch, ids.shape[1] + max(args.steps, 16) + 8, mode) for e in engines}
            warm = {}
            for e in engines:                     # the same 16 warm-up tokens each: compiles, captures, plans
                t = time.perf_counter()
                decs[e].generate(ids, 16)
                sync()
                warm[e] = time.perf_counter() - t
            blocks: dict[str, list[float]] = {e: [] for e in engines}
            tokens: dict[str, list[list[int]]] = {e: [] for e in engines}
            run_: dict = {"batch": batch, "mode": mode, "ran": {e: decs[e].mode for e in engines}, "warmup_s": warm,
                          "block_ms": blocks, "tokens": tokens}
            result["runs"].append(run_)
            for r in range(rounds):
                for e in (engines if r % 2 == 0 else engines[::-1]):
                    dec = decs[e]
                    out = torch.empty(batch, args.steps + 1, dtype=torch.long, device=dec.device)
                    out[:, :1] = dec.prefill(ids)
                    sync()
                    t = time.perf_counter()
                    for i in range(args.steps):          # as oracle.hf.decode.measure times its steps
                        out[:, i + 1:i + 2] = dec.step()
                    sync()
                    blocks[e].append(1e3 * (time.perf_counter() - t) / args.steps)
                    tokens[e].append(out[0].tolist())
                ratios = [b / o for b, o in zip(blocks["bf16"], blocks["oracle"])]   # tokens/s, oracle over BF16
                run_.update(ratios=ratios, ratio_median=statistics.median(ratios), ratio_min=min(ratios),
                            ratio_max=max(ratios), ms_median={e: statistics.median(v) for e, v in blocks.items()})
                save(result)                      # after every round: a process stopped later keeps these
            print(line(run_), flush=True)
            del decs
            if cuda:
                torch.cuda.empty_cache()
    served = served_counts((getattr(getattr(models["oracle"], "oracle", None), "kernels", None) or {}).values())
    if served:
        result["eager_graph_calls"] = served
    save(result)
    return result


def line(run: dict) -> str:
    """One run's figures: each engine's median ms per step with its spread, and the per-round ratios."""
    parts = [f"{e} {run['ms_median'][e]:.2f} ms/step (blocks " + "/".join(f"{v:.2f}" for v in blocks) + ")"
             for e, blocks in run["block_ms"].items()]
    return (f"b{run['batch']} {run['mode']}, {len(run['ratios'])} rounds of alternating blocks: " + "; ".join(parts)
            + "; oracle tokens/s over BF16 per round " + ", ".join(f"{r:.3f}" for r in run["ratios"])
            + f": median {run['ratio_median']:.3f}x, worst {run['ratio_min']:.3f}x")


def table(result: dict, args: Any) -> str:
    """Markdown of an interleaved run (bench_decode.py prints and writes it)."""
    lines = [f"model {args.config}" + (f" cut to {args.layers} layers" if args.layers else " (full depth)")
             + f"; both engines in one process, {args.steps}-step blocks alternating (order flipped every round); "
               f"prompt {args.prompt} tokens, static KV cache", "",
             "| engine | build s | weights GiB |", "|---|---|---|"]
    for e, r in result.get("engines", {}).items():
        lines.append(f"| {e} | {r['build_s']:.1f} | {r['weights_gib']:.2f} |")
    lines.append("")
    lines += [line(run) for run in result.get("runs", []) if run.get("ratios")]
    if result.get("eager_graph_calls"):
        lines.append("oracle eager graph calls: " + ", ".join(f"{k} {v}" for k, v in result["eager_graph_calls"].items()))
    if result.get("error"):
        lines.append(f"cut short: {result['error']}")
    return "\n".join(lines)
