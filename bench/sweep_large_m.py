"""Sweep: oracle-triton's launch configurations at large M, each timed beside the BF16 baseline.

For M in (256, 4096) and each shape (the four MoE models of bench_triton.py; dense 8192x8192 and
DeepSeek gate_up in W8A8 block FP8 and W4A16 MXFP4), every candidate configuration below runs
under CUDA-graph replay (gpu_timing.graph_ms) through the config overrides the kernels take
(TritonMoE.config, DenseGemm(config=)). The first candidate is the shipped default
(moe_config / dense_config); each other candidate's output is compared with the default's
(relative Frobenius error) and one that differs by more than 1e-2, or fails to compile or
launch, is flagged and never chosen. Prints one row per candidate and the best per shape.

    cd bench && python3 sweep_large_m.py [--m 256 4096] [--only dense|moe] [--shapes NAME ...] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import torch
from bench_triton import DENSE, MOE, _bf16_moe, _quant, _reps
from gpu_timing import graph_ms, rel, start

from oracle import LinearLayer, MoELayer
from oracle.catalog import Mode

AGREE = 1e-2
WIN = 0.02           # a candidate enters the tuned table only when it beats the default by more than this
DENSE_SHAPES = ("square-8192", "deepseek-r1.gate_up_proj")
DENSE_MODES = [("fp8_block", "w8a8_block", "fp8", {"activation_granularity": "group"}),
               ("mxfp4", "w4a16_mx", "bf16", {})]


def _c(bm, bn, bk, warps, stages, **more) -> dict[str, int]:
    return {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "num_warps": warps, "num_stages": stages, **more}


def moe_candidates(m: int, pack: int) -> dict[str, dict[str, int]]:
    """Named MoE candidates besides the default; pack > 1: 4-bit weights (FULL_TILE matters)."""
    full = int(pack > 1)
    if m <= 256:
        return {"16x64 w4 s4": _c(16, 64, 128, 4, 4, FULL_TILE=0),
                "32x64 w4 s3": _c(32, 64, 128, 4, 3, FULL_TILE=full, FUSE_GU=full),
                "64x64 w4 s3": _c(64, 64, 128, 4, 3, FULL_TILE=full, FUSE_GU=full),
                "16x128 n1=64 w8 s3": _c(16, 128, 128, 8, 3, BLOCK_N1=64, FULL_TILE=0)}
    if pack == 1:
        return {"128x128 n1=64 w8 s3": _c(128, 128, 128, 8, 3, BLOCK_N1=64),
                "128x128 n1=64 fused-gu w8 s3": _c(128, 128, 128, 8, 3, BLOCK_N1=64, FUSE_GU=1),
                "64x128 n1=64 w4 s4": _c(64, 128, 128, 4, 4, BLOCK_N1=64),
                "128x128 n1=128 w8 s3": _c(128, 128, 128, 8, 3)}
    return {"256x128 n1=64 k64 w8 s3 two-acc": _c(256, 128, 64, 8, 3, BLOCK_N1=64, FULL_TILE=1, FUSE_GU=0),
            "128x128 n1=64 fused-gu w8 s3": _c(128, 128, 128, 8, 3, BLOCK_N1=64, FULL_TILE=1, FUSE_GU=1),
            "128x128 n1=64 k64 w8 s4": _c(128, 128, 64, 8, 4, BLOCK_N1=64, FULL_TILE=1, FUSE_GU=1),
            "per-nibble 128x128 w8 s2 (old)": _c(128, 128, 128, 8, 2, FULL_TILE=0)}


def dense_candidates(m: int, pack: int) -> dict[str, dict[str, int]]:
    full = int(pack > 1)
    if m <= 256:
        return {"64x128 w4 s4": _c(64, 128, 128, 4, 4, SPLIT_K=1, GROUP_M=1, FULL_TILE=full),
                "128x128 split1 w8": _c(128, 128, 128, 8, 3, SPLIT_K=1, GROUP_M=8, FULL_TILE=full),
                "64x64 w4 s3": _c(64, 64, 128, 4, 3, SPLIT_K=1, GROUP_M=1, FULL_TILE=full)}
    wide = "128x128 w8 s3 g8" if pack > 1 else "128x256x64 w8 s3 g8"
    return {wide: _c(128, 128, 128, 8, 3, SPLIT_K=1, GROUP_M=8, FULL_TILE=full) if pack > 1 else
            _c(128, 256, 64, 8, 3, SPLIT_K=1, GROUP_M=8, FULL_TILE=0),
            "128x128 w8 s3 g1": _c(128, 128, 128, 8, 3, SPLIT_K=1, GROUP_M=1, FULL_TILE=full),
            "64x128 w4 s4 g8": _c(64, 128, 128, 4, 4, SPLIT_K=1, GROUP_M=8, FULL_TILE=full),
            ("per-nibble 128x128 w8 s2 (old)" if pack > 1 else "128x128 w8 s3 g8"):
                _c(128, 128, 128, 8, 2 if pack > 1 else 3, SPLIT_K=1, GROUP_M=8, FULL_TILE=0)}


def _sweep(label: str, m: int, run, default: dict, candidates: dict, bf16_us: float, rows: list,
           entry: dict | None = None, table: list | None = None) -> None:
    """run(cfg or None) -> output; times the default (cfg None) first, then each candidate. With
    `table`, a candidate that beats the default by more than WIN is appended as a tuned-table entry
    (`entry` holds its key: kind, mode, weight, n, k, experts; oracle_triton/tuned.py)."""
    ref = None
    results = []
    for name, cfg in [("default " + _short(default), None)] + list(candidates.items()):
        t0 = time.perf_counter()
        try:
            y = run(cfg)
            torch.cuda.synchronize()
            err = 0.0 if ref is None else rel(y, ref)
            if ref is None:
                ref = y.clone()
            us = graph_ms(lambda: run(cfg), _reps(m)) * 1e3
            status = "ok" if err <= AGREE else f"DISAGREES ({err:.2e} > {AGREE})"
        except Exception as exc:  # noqa: BLE001 - a candidate that fails is reported, never chosen
            first = str(exc).splitlines()[0][:80] if str(exc) else ""
            us, err, status = float("nan"), float("nan"), f"FAILED {type(exc).__name__}: {first}"
            if ref is None:
                print(f"{label:44} {m:5d} default failed: {status}", flush=True)
                return
        results.append((name, us, status))
        rows.append(dict(shape=label, m=m, candidate=name, config=cfg or default, triton_us=us, bf16_us=bf16_us,
                         speedup_bf16=bf16_us / us if us == us else None, rel_to_default=err, status=status))
        print(f"{label:44} {m:5d} {name:32} {us:9.1f} {bf16_us:9.1f} {bf16_us / us:6.2f} {err:9.1e}  {status}"
              f"  ({time.perf_counter() - t0:.1f}s)", flush=True)
    good = [r for r in results if r[2] == "ok" and r[1] == r[1]]
    if good:
        best = min(good, key=lambda r: r[1])
        print(f"  -> best for {label} M={m}: {best[0]}  {best[1]:.1f} us  ({bf16_us / best[1]:.2f}x BF16; "
              f"default {results[0][1]:.1f} us)", flush=True)
        if table is not None and entry is not None and best[0] in candidates and best[1] < results[0][1] * (1 - WIN):
            table.append(dict(entry, m=m, config=candidates[best[0]], us=round(best[1], 2),
                              default_us=round(results[0][1], 2)))


def _short(cfg: dict) -> str:
    keys = ("BLOCK_M", "BLOCK_N", "BLOCK_N1", "BLOCK_K", "num_warps", "num_stages", "SPLIT_K", "GROUP_M", "FULL_TILE",
            "FUSE_GU")
    return "/".join(str(cfg[k]) for k in keys if k in cfg)


def sweep_moe(ms_list, only, rows, table=None):
    from oracle_emulation.moe_activations import apply_activation
    from oracle.tensors import moe_activation_params
    from oracle_triton.moe import TritonMoE, moe_config

    for name, (ne, topk, h, i, fmt, mode_name, act, params, activation) in MOE.items():
        if only and name not in only:
            continue
        layer = MoELayer(name=name, num_experts=ne, top_k=topk, hidden_size=h, intermediate_size=i,
                         weight_format=fmt, activation=activation)
        mode = Mode(weight=fmt, activation=act, name=mode_name, params=params)
        w13 = torch.randn(ne, 2 * i, h, device="cuda", dtype=torch.bfloat16) * 0.05
        w2 = torch.randn(ne, h, i, device="cuda", dtype=torch.bfloat16) * 0.05
        q13, q2 = _quant(fmt, w13), _quant(fmt, w2)
        t = TritonMoE(layer, mode, None)
        t.process_weights(w13=q13["weight"], w2=q2["weight"], w13_scale=q13.get("weight_scale"),
                          w2_scale=q2.get("weight_scale"), w13_global_scale=q13.get("weight_global_scale"),
                          w2_global_scale=q2.get("weight_global_scale"))
        del q13, q2
        pack = t.w13.layout.pack
        pr = moe_activation_params(activation, {})
        act_fn = lambda hh: apply_activation(hh, activation, pr)   # noqa: E731
        for m in ms_list:
            x = torch.randn(m, h, device="cuda", dtype=torch.bfloat16)
            topw, ids = torch.topk(torch.softmax(torch.randn(m, ne, device="cuda"), -1), topk)
            ids = ids.to(torch.int32)
            flat = ids.reshape(-1).long()
            order = torch.argsort(flat, stable=True)
            token = order // topk
            offs = torch.cumsum(torch.bincount(flat, minlength=ne), 0).to(torch.int32)
            bf16_us = graph_ms(lambda: _bf16_moe(x, w13, w2, topw, order, token, offs, act_fn), _reps(m)) * 1e3

            def run(cfg):
                t.config = cfg
                return t.apply(x, topw, ids)
            key = dict(kind="moe", mode=mode_name, weight=fmt, n=t.rows, k=h, experts=ne)
            _sweep(f"moe {name} {mode_name}", m, run, moe_config(m, topk, ne, pack), moe_candidates(m, pack),
                   bf16_us, rows, key, table)
            t.config = None
        del t, w13, w2
        torch.cuda.empty_cache()


def sweep_dense(ms_list, only, rows, table=None):
    from oracle_triton.launch import dense_config
    from oracle_triton.linear import TritonLinear

    for name in DENSE_SHAPES:
        if only and name not in only:
            continue
        n, k = DENSE[name]
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.05
        for fmt, mode_name, act, params in DENSE_MODES:
            layer = LinearLayer(name=name, in_features=k, out_features=n, weight_format=fmt)
            t = TritonLinear(layer, Mode(weight=fmt, activation=act, name=mode_name, params=params), None)
            t.process_weights(**_quant(fmt, w))
            pack = t.packed.layout.pack
            for m in ms_list:
                x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
                bf16_us = graph_ms(lambda: x @ w.t(), _reps(m)) * 1e3

                def run(cfg):
                    if cfg is None:
                        return t.apply(x)
                    return t.gemm(x, t.act, None, t.dtype, config=cfg)
                key = dict(kind="dense", mode=mode_name, weight=fmt, n=n, k=k)
                _sweep(f"dense {name} {mode_name}", m, run, dense_config(m, n, k, t.gemm.facts["sms"], pack),
                       dense_candidates(m, pack), bf16_us, rows, key, table)
            del t
        del w
        torch.cuda.empty_cache()


def write_rows(path: str | None, bw: float, rows: list[dict]) -> None:
    """A sweep's rows (and the copy bandwidth its HBM figures divide by, the device and its traits, so that
    `--from-json --write-table` files them under the device measured) as JSON, if asked for."""
    if path:
        import torch

        where = {"device": torch.cuda.get_device_name(), "traits": this_device_traits()} \
            if torch.cuda.is_available() else {}
        with open(path, "w") as f:
            json.dump({"copy_bandwidth": bw, **where, "rows": rows}, f, indent=1, default=str)


def table_from_json(path: str, table: str, device: str | None, entries_of) -> None:
    """--from-json FILE --write-table TABLE: an earlier run's winners (`entries_of(rows)`) merged into TABLE under
    `device`, else the device the file names (else the H200, which measured the files written before they named
    one), with the traits the file records."""
    with open(path) as f:
        doc = json.load(f)
    write_table(table, device or doc.get("device") or "NVIDIA H200", entries_of(doc["rows"]),
                doc.get("traits") if not device or device == doc.get("device") else None)


def write_table(path: str, device: str, entries: list[dict], traits: dict | None = None) -> None:
    """Merge `entries` into the tuned table at `path` (same key: the new one wins) and the device's traits
    ({"capability": [major, minor], "sms": count}: its siblings there), then check the result with the plugin's
    own loader so a bad table is never written."""
    from pathlib import Path

    from oracle_triton import tuned

    target = Path(path)
    data = json.loads(target.read_text()) if target.exists() else {"schema": 1, "devices": {}}
    keep = lambda e: (e["kind"], e["mode"], e["n"], e["k"], e.get("experts", 0), e["m"],   # noqa: E731
                      str(e.get("zero_point", "")))           # (INT4: with / without zero points, or either)
    merged = {keep(e): e for e in data["devices"].get(device, [])}
    merged.update({keep(e): e for e in entries})
    data["devices"][device] = sorted(merged.values(), key=keep)
    if traits is not None:
        data.setdefault("traits", {})[device] = traits
    tuned.parse(data, target)
    target.write_text(json.dumps(data, indent=1) + "\n")
    print(f"tuned table: {len(entries)} entries for {device} written to {target}")


def this_device_traits() -> dict:
    """The current GPU's traits as the tuned table states them (its siblings there share them)."""
    import torch

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return {"capability": [props.major, props.minor], "sms": props.multi_processor_count}


def write_winners(path: str | None, rows: list[dict], entries_of) -> None:
    """If a tuned table was asked for, merge the winners `entries_of(rows)` picks for this device."""
    if path:
        import torch

        write_table(path, torch.cuda.get_device_name(), entries_of(rows), this_device_traits())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--m", type=int, nargs="+", default=[256, 4096])
    ap.add_argument("--only", choices=["dense", "moe"])
    ap.add_argument("--shapes", nargs="+", choices=list(DENSE_SHAPES) + list(MOE), help="only these shapes / models")
    ap.add_argument("--json", help="also write the rows to this file")
    ap.add_argument("--write-table", metavar="PATH",
                    help="merge the winners into this tuned-config table (e.g. ../plugins/triton/oracle_triton/"
                         "tuned_configs.json) under this device's name")
    args = ap.parse_args(argv)
    if not start("sweep_large_m"):
        return 2
    began = time.perf_counter()
    print(f"{'shape':44} {'M':>5} {'candidate':32} {'us':>9} {'bf16 us':>9} {'xBF16':>6} {'rel/dflt':>9}  status")
    rows: list[dict] = []
    table: list[dict] | None = [] if args.write_table else None
    if args.only != "dense":
        sweep_moe(args.m, args.shapes, rows, table)
    if args.only != "moe":
        sweep_dense(args.m, args.shapes, rows, table)
    print(f"sweep took {time.perf_counter() - began:.0f} s")
    if table is not None:
        write_table(args.write_table, torch.cuda.get_device_name(), table, this_device_traits())
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
