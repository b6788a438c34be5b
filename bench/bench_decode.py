#!/usr/bin/env python3
"""Whole-model decode, as users run it: oracle.hf against plain BF16 transformers; eager, CUDA graphs, compiled layers + graphs.

Each engine is measured in a process of its own (no engine inherits another's compiled kernels,
attention plans or allocator state), on a model built from a real config.json with random weights
made on the GPU (bench/synthetic.py: no checkpoint written; `--layers N` cuts the depth). Per
batch size and decode mode: a 128-token prompt is prefilled into a static KV cache, 16 tokens are
decoded as warm-up (kernels compile, the graph is captured), then the prompt is prefilled again
and `--steps` decode steps are timed (tokens/s = batch x steps / seconds; the static cache keeps
every step's shapes, so no step meets a sequence length the warm-up did not). Also: build time,
weights and peak GPU memory (torch.cuda.max_memory_allocated while decoding: weights, KV caches, graph
pools, activations; the build's own peak apart, as it holds the random weights being made), and the
greedy tokens of batch row 0 and each layer's hidden state, compared with an emulation run of the
same weights (oracle-emulation kernels: dequantized weights, the same activation rounding) and with
that emulation under a perturbation far below BF16 rounding (bench/token_check.py says why). Engines:

  oracle        oracle.hf, the kernels oracle selects for this GPU
  bf16          transformers, BF16 weights, its default experts implementation (grouped_mm)
  transformers  transformers' own quantized path (fine-grained FP8 / MXFP4), where it can run here
  emulation     oracle.hf with the emulation kernels (batch 1 eager, for the token check only, not timed)

    python bench/bench_decode.py --config examples/qwen3-30b-a3b-fp8/config.json
    python bench/bench_decode.py --config examples/deepseek-r1/config.json --layers 5 --batch 1
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ENGINES = ("oracle", "bf16", "transformers", "emulation")


# ---------------------------------------------------------------- one engine, in its own process
def _gib(n: float) -> float:
    return n / 2 ** 30


def build(engine: str, args) -> tuple:
    """(model, kernel lines) of `engine` on args.device."""
    import synthetic as syn

    kind = syn.kind_of(args.config)
    if engine == "bf16":
        return syn.bf16_model(args.config, kind, args.layers, args.device, args.seed), []
    config = None
    if engine == "emulation":
        from oracle.config import KernelConfig
        acts = json.loads(args.emulate_activations) if args.emulate_activations else {}
        config = KernelConfig(linear_backend="emulation", moe_backend="emulation",
                              linear_activation=acts.get("linear") or None, moe_activation=acts.get("moe") or None)
    model = syn.oracle_model(args.config, kind, args.layers, args.device, args.seed, config=config)
    return model, model.oracle.summary_lines()


def activations_of(model) -> dict[str, dict[str, str]]:
    """{op: {weight format: activation format}} of the kernels oracle selected (quantized layers only).

    Why: the emulation run of the token check must round activations as the oracle kernels do. Left to
    itself, oracle-emulation takes each format's default scheme (MXFP4 experts: W4A8 with MXFP8
    activations), while the H200's Triton MoE kernel runs W4A16 (BF16 activations)."""
    out: dict[str, dict[str, str]] = {}
    for g in model.oracle.report.groups:
        d = g.decision
        if d.status == "selected" and d.activation_format:
            out.setdefault(g.first.layer.op, {})[g.first.layer.weight_format] = d.activation_format
    return out


def transformers_engine(args) -> dict:
    """The transformers engine's result: its quantized entry points tried on this device
    (bench/transformers_paths.py). Every one failing is why the row is not measured, with the
    transformers source line that raised."""
    import transformers_paths

    rows = transformers_paths.probe(args.device)
    ran = [r["path"] for r in rows[1:] if r["runs"] == "yes"]
    why = (f"these transformers quantized paths run here but no engine is built from them: {', '.join(ran)}" if ran
           else "every transformers quantized path fails here (no `kernels` package and no hub: its FP8 and MXFP4 "
                "kernels are downloaded from the Hugging Face hub; without them only dequantize-to-BF16 loads, "
                "which is the bf16 row): " + "; ".join(f"{r['path']}: {r['why'][:90]} at {r['where']}"
                                                      for r in rows[1:]))
    return {"engine": "transformers", "skipped": why, "paths": rows, "runs": []}


def child(engine: str, args) -> dict:
    import torch

    from oracle.hf.decode import measure

    if engine == "transformers":
        result = transformers_engine(args)
        Path(args.result).write_text(json.dumps(result))
        print(result["skipped"], flush=True)
        return result
    cuda = args.device.startswith("cuda")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    result: dict = {"engine": engine, "runs": []}
    probes = result.setdefault("host_probe", []) if args.host_probe else None
    if probes is not None:               # the same op sequence timed at each stage of each engine's process
        import host_state
        probes.append(host_state.probe("start", args.device))
        gc_clock = host_state.GcClock()
    start = time.perf_counter()
    model, kernels = build(engine, args)
    sync()
    if probes is not None:
        probes.append(host_state.probe("built", args.device))
    result.update(build_s=time.perf_counter() - start, weights_gib=_gib(torch.cuda.memory_allocated() if cuda else 0),
                  build_peak_gib=_gib(torch.cuda.max_memory_allocated() if cuda else 0), kernels=kernels)
    if cuda:    # the build's peak holds the random weights being made (no real load has them): decode apart
        torch.cuda.reset_peak_memory_stats()
    gen = torch.Generator().manual_seed(args.seed + 1)
    vocab = model.config.get_text_config(decoder=True).vocab_size
    prompts = torch.randint(0, vocab, (max(args.batch), args.prompt), generator=gen).to(args.device)
    save = lambda: Path(args.result).write_text(json.dumps(result))   # noqa: E731 - after every step
    t0 = time.perf_counter()
    save()
    made = getattr(model, "_synthetic_make_s", None)     # oracle builds: the random tensors' share (host time)
    if made is not None:
        result["build_make_s"] = made
    if engine in ("oracle", "emulation"):
        result["activations"] = activations_of(model)
    phases = getattr(getattr(model, "oracle", None), "phase_seconds", None) or {}
    result["load_phase_s"] = phases                       # the loader's host seconds per phase
    print(f"built in {result['build_s']:.1f} s" + (f" ({made:.1f} s of it making the random tensors)" if made else "")
          + (" loader " + ", ".join(f"{k} {v:.1f} s" for k, v in phases.items()) if phases else "")
          + f"; weights {result['weights_gib']:.2f} GiB; host load average {os.getloadavg()[0]:.1f}", flush=True)
    # in --decode's order (graph modes first by default): a run cut short keeps the figures that matter most
    plan = [] if engine == "emulation" else [(b, m) for m in args.decode for b in args.batch]
    for batch, mode in plan:
        if cuda:           # each run's own peak too: which mode holds what (the table's peak is the max)
            result["peak_gib"] = max(result.get("peak_gib", 0.0), _gib(torch.cuda.max_memory_allocated()))
            torch.cuda.reset_peak_memory_stats()
        if probes is not None:
            gc_clock.start()
        try:
            m = measure(model, prompts[:batch], args.steps, mode, repeats=args.repeat)
        except Exception as exc:  # noqa: BLE001 - one mode failing (a compile error) must not lose the others
            result.setdefault("failed", []).append(f"b{batch} {mode}: {type(exc).__name__}: {str(exc)[:300]}")
            print(f"b{batch} {mode} failed: {result['failed'][-1]}", flush=True)
            save()
            continue
        result["runs"].append({"batch": batch, "mode": mode, "ran": m.mode, "tok_s": m.tok_s, "ms_step": m.ms_step,
                               "prefill_ms": m.prefill_ms, "warmup_s": m.warmup_s,
                               "tokens": m.tokens[0, :args.check].tolist(), "block_ms": m.block_ms,
                               "peak_gib": _gib(torch.cuda.max_memory_allocated()) if cuda else 0.0})
        if probes is not None:
            result["runs"][-1].update(gc_clock.read())
            probes.append(host_state.probe(f"after b{batch} {mode}", args.device))
        result["peak_gib"] = max(result.get("peak_gib", 0.0), result["runs"][-1]["peak_gib"])   # while decoding
        save()
        spread = (f" (median of {len(m.block_ms)} blocks: " + ", ".join(f"{v:.2f}" for v in m.block_ms) + " ms)"
                  if len(m.block_ms) > 1 else "")
        gcs = (f"; gc {result['runs'][-1]['gc_ms']:.0f} ms, collections {result['runs'][-1]['gc_collections']}"
               if probes is not None else "")
        print(f"{time.perf_counter() - t0:6.1f} s  b{batch} {mode}: {m.tok_s:.1f} tok/s, {m.ms_step:.2f} ms/step"
              f"{spread}, warm-up {m.warmup_s:.1f} s{gcs}", flush=True)
        del m
        if cuda and mode in args.profile_kernels and batch == min(args.batch):
            result.setdefault("kernel_profile", {})[f"b{batch} {mode}"] = profile_kernels(model, prompts[:batch], mode)
            save()
            print(result["kernel_profile"][f"b{batch} {mode}"], flush=True)
        if cuda:
            torch.cuda.empty_cache()
    result.setdefault("peak_gib", 0.0)
    try:
        served = eager_graph_calls(model)
    except Exception as exc:  # noqa: BLE001 - a count, never worth losing the runs after it
        served = {f"not counted ({type(exc).__name__})": 0}
    if served:
        result["eager_graph_calls"] = served
        print("eager graph calls over all runs: " + ", ".join(f"{k} {v}" for k, v in served.items()), flush=True)
    if args.profile and engine != "emulation":
        result["profile"] = profile_eager(model, prompts[:1])
        save()
    if args.ab_direct and engine == "oracle" and cuda:
        result["direct_ab"] = ab_direct(model, prompts[:1], args.steps)
        save()
        print(result["direct_ab"]["line"], flush=True)
    if args.profile_host and engine != "emulation":
        result["host_profile"] = profile_host(model, prompts[:1])
        save()
        print(result["host_profile"], flush=True)
    if engine in ("oracle", "emulation") and args.check:     # after the timed runs: kept out of the peak
        import token_check
        for name, rel in [("check", 0.0)] + ([("perturbed", token_check.NOISE)] if engine == "emulation" else []):
            check = token_check.run(model, prompts, args.check, rel)
            path = Path(args.result).with_suffix(f".{name}.pt")
            torch.save(check.pop("states"), path)
            result[name] = {**check, "states": str(path)}
            save()
            print(f"{time.perf_counter() - t0:6.1f} s  token check {name} done", flush=True)
    return result


def eager_graph_calls(model) -> dict[str, int]:
    """How the oracle kernels' eager calls were served (oracle.integration.eager_graphs), summed over kernels."""
    from oracle.integration.eager_graphs import served_counts

    return served_counts((getattr(getattr(model, "oracle", None), "kernels", None) or {}).values())


def _ranked_table(title: str, columns: tuple[str, ...], spent: dict, limit: int, cells) -> str:
    """A markdown table of `spent` ({name: [time, calls]}), the costliest `limit` first, under `title`."""
    lines = [title, "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for name, (time, calls) in sorted(spent.items(), key=lambda kv: -kv[1][0])[:limit]:
        lines.append("| " + " | ".join(cells(name, time, calls)) + " |")
    return "\n".join(lines)


def profile_kernels(model, ids, mode: str, steps: int = 4) -> str:
    """Where a decode step's GPU time goes: torch.profiler's CUDA kernels over `steps` steps of `mode`
    (graph replays included: CUPTI traces the kernels of a replayed graph), summed by kernel name,
    per step and per decoder layer, largest first."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from oracle.hf.compiled import decoder_layers
    from oracle.hf.decode import Decoder

    layers = len(decoder_layers(model))
    dec = Decoder(model, ids.shape[0], ids.shape[1] + 16 + steps, mode)
    cuda = dec.device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    dec.generate(ids, 8)                      # compiles and the capture happen here
    sync()
    with profile(activities=[ProfilerActivity.CUDA if cuda else ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            dec.step()
        sync()
    by_name: dict[str, list[float]] = {}
    for e in prof.events():
        if e.device_type.name != ("CUDA" if cuda else "CPU"):     # the CPU: a dry run of this code
            continue
        slot = by_name.setdefault(e.name, [0.0, 0])
        slot[0] += e.time_range.elapsed_us()
        slot[1] += 1
    total = sum(v[0] for v in by_name.values()) / steps
    title = (f"b{ids.shape[0]} {dec.mode}: GPU kernel time {total:.0f} us per step ({total / layers:.1f} us per "
             f"layer over {layers} layers), {sum(v[1] for v in by_name.values()) / steps:.0f} kernels per step")
    return _ranked_table(title, ("kernel", "us per step", "per layer", "calls per step"), by_name, 60,
                         lambda name, us, n: (name[:110], f"{us / steps:.1f}", f"{us / steps / layers:.2f}",
                                              f"{n / steps:.1f}"))


def profile_eager(model, ids, steps: int = 4) -> str:
    """Where an eager batch-1 decode step's host time goes: torch.profiler's operators by self CPU time,
    and kernel launches per step."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from oracle.hf.decode import Decoder

    dec = Decoder(model, 1, ids.shape[1] + 16 + steps, "eager")
    dec.generate(ids, 8)                      # first calls and private-graph captures happen here
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dec.device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        for _ in range(steps):
            dec.step()
        if dec.device.type == "cuda":
            torch.cuda.synchronize()
    events = prof.key_averages()
    launches = sum(e.count for e in events if e.key in ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC",
                                                          "cuLaunchKernelEx", "cudaGraphLaunch"))
    return (f"per step: {launches / steps:.0f} kernel/graph launches; operators by self CPU time over {steps} steps\n"
            + events.table(sort_by="self_cpu_time_total", row_limit=30, max_name_column_width=60))


def ab_direct(model, ids, steps: int, blocks: int = 4) -> dict:
    """Eager batch-1 decode with the callers' direct replays of in-place graphs
    (oracle.integration.eager_graphs.PlacedCalls) on and off, in alternating blocks of one decoder (the
    same cache, addresses and graphs; host drift hits both alike): ms per step of each."""
    import torch

    from oracle.hf.decode import Decoder
    from oracle.integration import eager_graphs

    per = max(1, steps // blocks)
    dec = Decoder(model, 1, ids.shape[1] + 16 + 2 * blocks * per + 8, "eager")
    dec.generate(ids, 16)
    spent = {True: 0.0, False: 0.0}
    try:
        for i in range(2 * blocks):
            eager_graphs.DIRECT = on = i % 2 == 0
            torch.cuda.synchronize()
            t = time.perf_counter()
            for _ in range(per):
                dec.step()
            torch.cuda.synchronize()
            spent[on] += time.perf_counter() - t
    finally:
        eager_graphs.DIRECT = True
    on, off = (1e3 * spent[k] / (blocks * per) for k in (True, False))
    return {"direct_ms": on, "no_direct_ms": off, "steps_each": blocks * per,
            "line": f"eager b1, direct replays on / off in alternating blocks of {per} steps: {on:.2f} / {off:.2f} "
                    f"ms per step ({blocks * per} steps each)"}


def profile_host(model, ids, steps: int = 16) -> str:
    """Where an eager batch-1 decode step's host time goes, by module role: perf_counter around every
    module's forward (pre and post hooks; no synchronisation, so this is the host's time to issue the
    work), summed by the last part of the module's name (kv_b_proj, experts, self_attn, ...; nested
    roles include their children), per step. The hooks cost the same on both engines."""
    import torch

    from oracle.hf.decode import Decoder

    dec = Decoder(model, 1, ids.shape[1] + 16 + steps, "eager")
    dec.generate(ids, 8)                      # first calls and private-graph captures happen here
    spent: dict[str, list[float]] = {}
    started: dict[int, list[float]] = {}
    clock = time.perf_counter

    def pre(module, args):
        started.setdefault(id(module), []).append(clock())

    def post(module, args, out):
        t = clock() - started[id(module)].pop()
        slot = spent.setdefault(module._oracle_role, [0.0, 0])
        slot[0] += t
        slot[1] += 1

    handles = []
    for name, module in model.named_modules():
        module._oracle_role = name.rsplit(".", 1)[-1] if name else "model (whole step)"
        if module._oracle_role.isdigit():
            module._oracle_role = "decoder layer"
        handles += [module.register_forward_pre_hook(pre), module.register_forward_hook(post)]
    sync = torch.cuda.synchronize if dec.device.type == "cuda" else (lambda: None)
    try:
        sync()
        t0 = clock()
        for _ in range(steps):
            dec.step()
        host = clock() - t0
        sync()
        wall = clock() - t0
    finally:
        for h in handles:
            h.remove()
    title = (f"host time of an eager b1 step with hooks: {1e3 * host / steps:.2f} ms issued, "
             f"{1e3 * wall / steps:.2f} ms until the GPU finished ({steps} steps)")
    return _ranked_table(title, ("module role", "us per step", "calls per step", "us per call"), spent, 30,
                         lambda role, sec, n: (role, f"{1e6 * sec / steps:.0f}", f"{n / steps:.0f}",
                                               f"{1e6 * sec / n:.1f}"))


# ---------------------------------------------------------------- the table
def table(results: dict[str, dict], args) -> str:
    import token_check
    import torch

    base = results.get("bf16", {})
    lines = [f"model {args.config}" + (f" cut to {args.layers} layers" if args.layers else " (full depth)")
             + f"; prompt {args.prompt} tokens, {args.steps} timed decode steps, static KV cache", ""]
    lines.append("| engine | build s | build peak GiB | weights GiB | decode peak GiB | vs BF16 | "
                 + " | ".join(f"b{b} {m} tok/s (vs BF16)" for b in args.batch for m in args.decode) + " |")
    lines.append("|" + "---|" * (6 + len(args.batch) * len(args.decode)))
    for engine in ("oracle", "bf16", "transformers"):
        r = results.get(engine)
        if r is None:
            continue
        if "skipped" in r or "build_s" not in r:
            lines.append(f"| {engine} | not measured: {r.get('skipped') or r.get('error')} |")
            continue
        cells = []
        for b in args.batch:
            for m in args.decode:
                run = _run(r, b, m)
                ref = _run(base, b, m) if base else None
                ratio = f" ({run['tok_s'] / ref['tok_s']:.2f}x)" if run and ref and engine != "bf16" else ""
                cells.append(f"{run['tok_s']:.1f}{ratio}" if run else "-")
        peak = r.get("peak_gib", 0.0)
        mem = f"{peak / base['peak_gib']:.2f}x" if base.get("peak_gib") and peak and engine != "bf16" else ""
        lines.append(f"| {engine} | {r['build_s']:.1f} | {r.get('build_peak_gib', 0):.2f} | {r['weights_gib']:.2f} | "
                     f"{peak:.2f} | {mem} | "
                     + " | ".join(cells) + " |")
    cut = [f"{e}: {r['error']}" for e, r in results.items() if r.get("error") and "build_s" in r]
    cut += [f"{e} {why}" for e, r in results.items() for why in r.get("failed", [])]
    if cut:
        lines += ["", "cut short (the runs it finished are above; '-' was not reached): " + "; ".join(cut)]
    lines.append("")
    lines.append("ms per decode step: " + "; ".join(
        f"{e} " + ", ".join(f"b{run['batch']} {run['mode']} {run['ms_step']:.2f}" for run in r["runs"])
        for e, r in results.items() if r.get("runs") and e != "emulation"))
    spreads = [f"{e} b{run['batch']} {run['mode']} " + "/".join(f"{v:.2f}" for v in run["block_ms"])
               for e, r in results.items() for run in r.get("runs", []) if len(run.get("block_ms", [])) > 1]
    if spreads:
        lines.append("ms per step of each timed block (the table: the median block): " + "; ".join(spreads))
    lines.append("decode peak GiB per run: " + "; ".join(
        f"{e} " + ", ".join(f"b{run['batch']} {run['mode']} {run.get('peak_gib', 0):.2f}" for run in r["runs"])
        for e, r in results.items() if r.get("runs") and e != "emulation"))
    lines.append("warm-up s (16 tokens: first calls, Triton and torch.compile compiles, graph capture): " + "; ".join(
        f"{e} " + ", ".join(f"b{run['batch']} {run['mode']} {run.get('warmup_s', 0):.1f}" for run in r["runs"])
        for e, r in results.items() if r.get("runs") and e != "emulation"))
    fell = [f"{e} b{run['batch']} {run['mode']} ran as {run['ran']}" for e, r in results.items()
            for run in r.get("runs", []) if run.get("ran", run["mode"]) != run["mode"]]
    if fell:
        lines.append("graph capture failed, measured without a graph: " + "; ".join(fell))
    if results.get("transformers", {}).get("paths"):
        import transformers_paths
        lines += ["", "transformers' own quantized paths, each called once on this device "
                  "(bench/transformers_paths.py):", "", *transformers_paths.lines(results["transformers"]["paths"])]
    emu, ora = results.get("emulation", {}), results.get("oracle", {})
    if "check" in ora and "perturbed" in emu:
        load = (lambda c: {**c, "states": torch.load(c["states"])})
        same = emu.get("activations") == ora.get("activations")
        lines += ["", f"activation formats: oracle {ora.get('activations')}, emulation {emu.get('activations')}"
                  + ("" if same else " (NOT the same: the comparison mixes rounding schemes)")]
        lines += [""] + token_check.report(load(ora["check"]), load(emu["check"]), load(emu["perturbed"])) + [""]
    for name, r in results.items():
        for b in args.batch:
            eager = _run(r, b, "eager")
            for mode in ("graphs", "compiled"):
                other = _run(r, b, mode)
                if eager and other:
                    same = token_check.agree(eager["tokens"], other["tokens"])
                    lines.append(f"{name} batch {b}: {mode} greedy tokens equal to eager for the first {same} "
                                 f"of {len(eager['tokens'])}")
    for name, r in results.items():
        if r.get("profile") and args.profile:
            lines += ["", f"{name} eager batch-1 step profile ({r['profile'].splitlines()[0]}):", "",
                      *("    " + line for line in r["profile"].splitlines()[1:])]
    probed = [(e, r) for e, r in results.items() if r.get("host_probe")]
    if probed:
        lines += ["", "host probe (bench/host_state.py: host us per call of an RMSNorm's ops and of an in-place add "
                  "on one row, and the process-wide state, at each stage of each process):", "",
                  "| engine | stage | rmsnorm us | add us | graph replay us | replay + rmsnorm us | OS threads | "
                  "torch-function modes | dispatch modes | gc objects | TLS include |", "|---|---|---|---|---|---|---|---|---|---|---|"]
        for e, r in probed:
            for p in r["host_probe"]:
                if "error" in p:
                    lines.append(f"| {e} | {p['stage']} | failed: {p['error']} |")
                    continue
                st = p["state"]
                lines.append(f"| {e} | {p['stage']} | {p['rmsnorm_us']:.1f} | {p['add_us']:.1f} | "
                             f"{p.get('replay_us', 0):.1f} | {p.get('replay_rmsnorm_us', 0):.1f} | {st['os_threads']} | "
                             f"{st['torch_function_modes']} | {st.get('dispatch_modes')} | {st['gc_objects']} | "
                             f"{st.get('dispatch_include')} |")
        gcs = [f"{e} b{run['batch']} {run['mode']} {run['gc_ms']:.0f} ms {run['gc_collections']}"
               for e, r in probed for run in r.get("runs", []) if "gc_ms" in run]
        if gcs:
            lines.append("garbage collection during each run (warm-up and timed blocks; collections per generation): "
                         + "; ".join(gcs))
    for name, r in results.items():
        if r.get("direct_ab"):
            lines += ["", f"{name} {r['direct_ab']['line']}"]
    for name, r in results.items():
        if r.get("host_profile"):
            lines += ["", f"{name} eager batch-1 host time by module:", "", *r["host_profile"].splitlines()]
    for name, r in results.items():
        for key, text in r.get("kernel_profile", {}).items():
            lines += ["", f"{name} {key} kernel profile:", "", *text.splitlines()]
    if ora and ora.get("kernels"):
        lines.append("")
        lines.append("oracle kernels per layer kind:")
        lines.extend(f"  {line}" for line in ora["kernels"])
    return "\n".join(lines)


def _run(result: dict, batch: int, mode: str) -> dict | None:
    return next((r for r in result.get("runs", []) if r["batch"] == batch and r["mode"] == mode), None)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", required=True, help="a real model's config.json (quant_method fp8 or mxfp4)")
    ap.add_argument("--layers", type=int, help="keep this many decoder layers (default: full depth)")
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--decode", nargs="*", choices=("eager", "graphs", "compiled"),
                    default=["graphs", "compiled", "eager"],
                    help="eager; graphs (whole step replayed from one CUDA graph); compiled (decoder layers "
                         "compiled by torch.compile, and the whole step replayed from one CUDA graph); none: the "
                         "token check only")
    ap.add_argument("--engines", nargs="+", choices=ENGINES, default=list(ENGINES))
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--steps", type=int, default=128)
    ap.add_argument("--check", type=int, default=32,
                    help="greedy tokens compared with the emulation run (0: no check); see bench/token_check.py")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--profile", action="store_true", help="add a torch.profiler table of an eager batch-1 step")
    ap.add_argument("--profile-host", action="store_true",
                    help="add the host time of an eager batch-1 step by module role (kv_b_proj, experts, ...)")
    ap.add_argument("--profile-kernels", nargs="*", default=[], choices=("eager", "graphs", "compiled"),
                    help="after the smallest batch's run of these modes: GPU time per kernel name over 4 steps")
    ap.add_argument("--repeat", type=int, default=1,
                    help="time this many blocks of --steps steps per run (the figure: the median block's)")
    ap.add_argument("--host-probe", action="store_true",
                    help="time a fixed op sequence and list the process-wide state (modes, threads, gc) at each "
                         "stage of each engine's process (bench/host_state.py)")
    ap.add_argument("--ab-direct", action="store_true",
                    help="oracle: eager b1 steps with the direct replays of in-place graphs on and off, alternating")
    ap.add_argument("--device", default="cuda", help="cuda (measurements) or cpu (a dry run of the code path)")
    ap.add_argument("--out", type=Path, help="write the table (markdown) and the raw results (json) here")
    ap.add_argument("--timeout", nargs="+", default=["900"], metavar="[ENGINE=]SECONDS",
                    help="seconds per engine process, for all or per engine (oracle=90 bf16=70)")
    ap.add_argument("--emulate-activations", help=argparse.SUPPRESS)   # the oracle run's, for the emulation run
    ap.add_argument("--interleave", action="store_true",
                    help="oracle and bf16 built in ONE process, each with the same warm-up, then --steps-step blocks "
                         "alternating between them for --repeat rounds (bench/interleave.py: host drift hits both "
                         "alike); the --timeout default applies to that process")
    ap.add_argument("--child", choices=ENGINES + ("pair",), help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    args = ap.parse_args()
    sys.path.insert(0, str(HERE))
    if args.child == "pair":
        import interleave
        interleave.run(args, build, lambda r: Path(args.result).write_text(json.dumps(r)))
    elif args.child:
        child(args.child, args)
    if args.child:
        # its results are written: leave at once. R14's oracle process finished its work at ~54 s and was
        # killed at its 62-s limit in interpreter teardown (torch.compile's worker pool, CUDA graphs)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    import torch
    if args.device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise SystemExit("bench_decode.py: needs a CUDA device (torch.cuda.is_available() is False); "
                             "--device cpu --decode eager runs the code path on the CPU")
        print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}", flush=True)
    results: dict[str, dict] = {}
    timeouts = _timeouts(args.timeout)
    tmp = Path(tempfile.mkdtemp(prefix="bench-decode-"))
    if args.interleave:
        import interleave
        pair = _spawn("pair", [], timeouts.get("", 900), tmp)
        text = interleave.table(pair, args)
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
            stem = Path(args.config).parent.name + (f"-{args.layers}l" if args.layers else "") + "-interleaved"
            (args.out / f"{stem}.md").write_text(f"    python bench/bench_decode.py {' '.join(sys.argv[1:])}\n\n{text}\n")
            (args.out / f"{stem}.json").write_text(json.dumps(pair, indent=1))
        print(text)
        return
    for engine in args.engines:
        extra = ["--emulate-activations", json.dumps(results["oracle"]["activations"])] \
            if engine == "emulation" and results.get("oracle", {}).get("activations") else []
        t = time.perf_counter()
        results[engine] = _spawn(engine, extra, timeouts.get(engine, timeouts.get("", 900)), tmp)
        print(f"{engine}: {time.perf_counter() - t:.0f} s", flush=True)
        _write(results, args)                 # after every engine: a later failure keeps what was measured
        if engine != args.engines[-1]:
            print(table(results, args), flush=True)
    print(table(results, args))


def _spawn(engine: str, extra: list[str], limit: float, tmp: Path) -> dict:
    """Run `--child engine` in a process of its own, relaying its progress lines, stopped after `limit` s;
    its results file (what it measured before a failure too), with "error" set if it failed."""
    out = tmp / f"{engine}.json"
    cmd = [sys.executable, __file__, "--child", engine, "--result", str(out)] + _forward(sys.argv[1:]) + extra
    log = tmp / f"{engine}.log"
    with log.open("w") as sink:           # the child's progress lines go to our stdout as they come
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=sink, text=True,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})
        why = _relay(proc, limit, engine)
    partial = json.loads(out.read_text()) if out.is_file() else {"engine": engine, "runs": []}
    if why is not None:                   # what the child measured before it failed is kept
        print(f"{engine}: {why}\n{log.read_text()[-3000:]}", flush=True)
        partial["error"] = why
    return partial


def _timeouts(items: list[str]) -> dict[str, int]:
    """--timeout 900 or --timeout oracle=90 bf16=70 (seconds per engine process; "" is the default)."""
    out = {}
    for item in items:
        engine, _, value = item.rpartition("=")
        if engine not in ("", *ENGINES) or not value.isdigit():
            raise SystemExit(f"bench_decode.py: --timeout: expected SECONDS or ENGINE=SECONDS, got {item!r}")
        out[engine] = int(value)
    return out


def _relay(proc: subprocess.Popen, limit: float, engine: str) -> str | None:
    """Print the child's stdout lines until it ends; kill it after `limit` s. None if it succeeded."""
    import threading

    timer = threading.Timer(limit, proc.kill)
    timer.start()
    try:
        for line in proc.stdout:
            print(f"  [{engine}] {line.rstrip()}", flush=True)
        proc.wait()
    finally:
        timer.cancel()
    if proc.returncode == 0:
        return None
    return f"timed out after {limit:.0f} s" if proc.returncode in (-9, 137) else f"failed (exit {proc.returncode})"


def _write(results: dict[str, dict], args) -> None:
    if not args.out:
        return
    args.out.mkdir(parents=True, exist_ok=True)
    stem = Path(args.config).parent.name + (f"-{args.layers}l" if args.layers else "")
    text = table(results, args)
    (args.out / f"{stem}.md").write_text(f"    python bench/bench_decode.py {' '.join(sys.argv[1:])}\n\n{text}\n")
    (args.out / f"{stem}.json").write_text(json.dumps(results, indent=1))


def _forward(argv: list[str]) -> list[str]:
    """The parent's options minus --engines/--out (each child runs one engine and writes one file)."""
    out, skip = [], False
    for a in argv:
        if a in ("--engines", "--out"):
            skip = True
            continue
        if skip and not a.startswith("--"):
            continue
        skip = False
        out.append(a)
    return out


if __name__ == "__main__":
    main()
