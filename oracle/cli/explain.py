"""`oracle explain`: which kernel serves each layer of a model, and why not the others.

Exit codes: 0 every quantized layer has a kernel, 2 some has none (all is still printed), 1 bad input or
a checkpoint that declares quantization but has no quantized layer (the report is still printed),
64 usage error (oracle.exitcodes.TABLE).
"""
from __future__ import annotations

import argparse
import sys
from typing import Any

from ..config import KernelConfig
from ..errors import InputError
from ..explain import FORMATS, RENDERERS, Report
from ..models import load_model
from ..session import get_engine, get_registry
from ..tuning.measurements import load_measurements
from .options import (add_choice_options, add_platform_options, env_from_args, platform_from_args,
                      policy_from_args, positive_int)

NAME = "explain"


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add `explain` (with every option) to the `oracle` command's subparsers."""
    p = subparsers.add_parser(
        NAME, help="which kernel serves each layer of a model, and why not the others",
        description="List every layer of a Hugging Face model (folder, config.json or shipped example name), "
                    "the kernel that would serve it on the chosen GPU, and why every other candidate was "
                    "rejected. Exit 0: every quantized layer has a kernel; 2: some has none; 1: bad input; "
                    "64: usage error.")
    p.add_argument("--model", required=True, metavar="PATH|NAME",
                   help="a model folder, its config.json, or a shipped example name (e.g. gpt-oss-20b)")
    add_platform_options(p)
    p.add_argument("--tp", default="1", metavar="N", help="tensor-parallel size (per-rank shapes)")
    p.add_argument("--ep", default="1", metavar="N", help="expert-parallel size for routed experts")
    add_choice_options(p)
    p.add_argument("--measurements", action="append", default=[], metavar="FILE",
                   help="tuning files (oracle tune): rank viable kernels by measured time (repeatable; "
                        "replaces ORACLE_MEASUREMENTS and the policy's measurements.files)")
    p.add_argument("--objective", default=None, metavar="decode|prefill|balanced|M:W,...",
                   help="objective for measured ranking (default: the policy's measurements.objective)")
    p.add_argument("--accept-partial-coverage", action="store_true",
                   help="a config group or quantized_layers entry that matches no module of the model is a warning "
                        "instead of an error (exit 1); the report then shows those weights unquantized")
    p.add_argument("--format", choices=FORMATS, default="text")
    p.add_argument("--checkpoint", action="store_true",
                   help="also make every check `oracle run` makes on the checkpoint's tensors (names, dtypes, "
                        "shapes, fused parts, experts, tensors nobody claims) without loading the model; "
                        "needs the hf extra; exit 1 naming file and tensor on the first problem")
    return p


def run(args: argparse.Namespace) -> int:
    """Print the report; 0 all served, 2 some layer has no kernel, 1 bad input."""
    report = report_from_args(args)
    print(RENDERERS[args.format](report))
    if getattr(args, "checkpoint", False) and report.exit_code == 0:
        return _check_checkpoint(args)
    return report.exit_code


def _check_checkpoint(args: argparse.Namespace) -> int:
    """`--checkpoint`: oracle.hf.check_checkpoint with the same choices the report used."""
    if positive_int(args.tp, "--tp") != 1 or positive_int(args.ep, "--ep") != 1:
        raise InputError("checks the checkpoint as `oracle run` loads it, on one rank; expected --tp 1 --ep 1",
                         field="--checkpoint")
    from ..hf.requirements import require_transformers
    require_transformers(field="--checkpoint")
    from ..hf import check_checkpoint
    loaded = check_checkpoint(args.model, platform=platform_from_args(args), config=config_from_args(args),
                              policy=policy_from_args(args), env=env_from_args(args))
    quantized = sum(1 for d in loaded.report.decisions if d.status == "selected")
    print(f"checkpoint: every tensor checked as `oracle run` loads it ({quantized} quantized layers converted, "
          f"{loaded.load_seconds:.1f} s)", file=sys.stderr)
    for note in loaded.notes:
        print(f"checkpoint: {note}", file=sys.stderr)
    return 0


def report_from_args(args: argparse.Namespace) -> Report:
    tp = positive_int(args.tp, "--tp")
    ep = positive_int(args.ep, "--ep")
    model = load_model(args.model, tp=tp, ep=ep,
                       accept_partial=getattr(args, "accept_partial_coverage", False))
    config = config_from_args(args)
    platform = platform_from_args(args)
    engine = get_engine(policy_from_args(args))
    measurements = None
    if args.measurements:
        conf = engine.policy.measurements
        measurements = load_measurements(args.measurements, args.objective or conf.objective,
                                         allow_testing_only=conf.allow_testing_only)
    elif args.objective:
        raise InputError("needs --measurements FILE (the policy's objective applies to its own files)",
                         field="--objective")
    import warnings
    with warnings.catch_warnings(record=True) as caught:  # stale tuning files: say so, every run
        warnings.simplefilter("always")
        report = Report.build(model, engine, platform, config, env_from_args(args), measurements)
    for w in caught:
        print(f"warning: {w.message}", file=sys.stderr)
    return report


def config_from_args(args: argparse.Namespace) -> Any:
    from pydantic import ValidationError

    values = {f"{op}_backend": getattr(args, f"{op}_backend") for op in ("linear", "moe", "embedding")}
    try:
        config = KernelConfig(**values)
    except ValidationError as exc:
        err = exc.errors()[0]
        name = str(err["loc"][0]) if err["loc"] else "backend"
        message = str(err.get("ctx", {}).get("error", err["msg"]))
        raise InputError(message.split(": ", 1)[-1], field="--" + name.replace("_", "-")) from None
    _check_backend_names(config)
    return config


def _check_backend_names(config: Any) -> None:
    """Every backend named on the command line must exist, even one no layer of this model asks for."""
    registry = get_registry()
    for op in ("linear", "moe", "embedding"):
        choice = getattr(config, f"{op}_backend")
        names = choice.values() if isinstance(choice, dict) else [choice]
        for name in names:
            registry.require_backend(name, field=f"--{op}-backend")
