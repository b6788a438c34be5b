"""`oracle verify`: validate policy and kernel files and the installed plugins, and find plugin code
that hangs.

Selection calls plugin code inline, as pluggy, pytest and vLLM do: nothing on the hot path
bounds it. This command is where a hang is found instead. It loads the plugins on a watched
thread before anything else (`oracle.cli.main` asks it to), and after the file checks it runs every
piece of plugin code selection can reach -- each implementation's import, each kernel's
requirement checks (environment and runtime included) on the detected device and every preset,
each declared `can_implement` on a representative layer per mode -- on one watched thread, and
a step that does not return within `--timeout` seconds is reported with the line it is stuck at.
"""
from __future__ import annotations

import argparse
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Iterator

from ..catalog import KernelSpec, Mode, check_implementation, load_kernel_file
from ..errors import OracleError
from ..layer import EmbeddingLayer, LinearLayer, MoELayer
from ..platform import Platform, preset_names
from ..policy import load_policy
from ..registry import Registry, describe
from ..requirements import check_requirements
from ..session import get_registry
from ..sources import display_path, load_yaml_file

NAME = "verify"
DEFAULT_TIMEOUT_S = 20.0

Step = tuple[str, Callable[[], "str | None"]]   # what it is, and the call (a problem, or None)


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = subparsers.add_parser(NAME, help="validate policy/kernel files and the installed plugins; find plugin hangs")
    p.add_argument("files", nargs="*", metavar="FILE")
    p.add_argument("--timeout", type=_seconds, default=DEFAULT_TIMEOUT_S, metavar="S",
                   help=f"a plugin call running longer is reported as a hang (default {DEFAULT_TIMEOUT_S:g})")
    return p


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < 86400:
        raise argparse.ArgumentTypeError(f"expected seconds > 0, got {text!r}")
    return value


def run(args: argparse.Namespace) -> int:
    """Validate policy and kernel files (and the installed plugins); non-zero on any problem."""
    problems: list[str] = []

    def fail(problem: str) -> None:
        problems.append(problem)
        print(f"FAIL {problem}")

    for file in args.files:
        try:
            data = load_yaml_file(file)
            if isinstance(data, dict) and "kernels" in data:
                specs = load_kernel_file(data, plugin="verify", what=display_path(Path(file)))
                broken = [p for p in map(check_implementation, specs) if p]
                if broken:
                    raise OracleError("; ".join(broken))
                print(f"ok   {file}: {len(specs)} kernel(s)")
            else:
                load_policy([file], registry=get_registry())  # names checked against the installed plugins
                print(f"ok   {file}: policy")
        except OracleError as exc:
            fail(str(exc))
    registry = get_registry()
    try:
        load_policy(registry=registry)  # plugin policy files: a bad one is recorded as a plugin failure
    except OracleError as exc:
        fail(str(exc))
    for failure in registry.failures:
        fail(f"plugin {failure}")
    for problem in watch(plugin_steps(registry), args.timeout):
        fail(problem)
    print(f"{len(registry.kernels)} kernel(s) from {len(registry.plugins)} plugin(s); "
          f"{len(problems)} problem(s)")
    return 1 if problems else 0


def load_plugins_watched(argv: list[str]) -> bool:
    """Load the process's plugins on the watched thread, before anything else touches them: True
    (and the hang printed) when importing or registering one does not return within `--timeout`."""
    pre = argparse.ArgumentParser(add_help=False, exit_on_error=False)
    pre.add_argument("--timeout", type=_seconds, default=DEFAULT_TIMEOUT_S)
    try:
        timeout = pre.parse_known_args(argv)[0].timeout
    except argparse.ArgumentError:   # a bad --timeout: the real parser says so
        timeout = DEFAULT_TIMEOUT_S
    loading = ("loading the plugins (oracle.kernels entry points)", lambda: get_registry() and None)
    hang = watch(iter([loading]), timeout)
    for problem in hang:
        print(f"FAIL {problem}")
    if hang:
        print("the plugins could not be loaded; 1 problem(s)")
    return bool(hang)


def plugin_steps(registry: Registry) -> Iterator[Step]:
    """Every piece of plugin code selection reaches, one step each."""
    for spec in registry.kernels:  # selection never imports implementations; verify does
        yield f"import of {spec.implementation}", lambda spec=spec: check_implementation(spec)
    platforms = [Platform.detect()] + [Platform.preset(name) for name in preset_names()]
    for spec in registry.kernels:
        for platform in platforms:
            yield (f"requirement checks of {spec.name} on {platform.describe()}",
                   lambda spec=spec, platform=platform: _requirements(spec, platform))
    for spec in registry.kernels:
        hook = registry.can_implement_caller(spec.name)
        if hook is None:
            continue
        for mode in spec.modes:
            layer = _sample_layer(spec, mode)
            if layer is None:
                continue
            for platform in platforms:
                yield (f"plugin {spec.plugin} can_implement for {spec.name} [{mode.name}] on {platform.describe()}",
                       lambda hook=hook, spec=spec, mode=mode, layer=layer, platform=platform:
                       _can_implement(hook, spec, mode, layer, platform))


def _requirements(spec: KernelSpec, platform: Platform) -> None:
    check_requirements(spec, platform)  # a check that raises is a failed verdict there, never an error
    return None


def _can_implement(hook: Any, spec: KernelSpec, mode: Mode, layer: Any, platform: Platform) -> None:
    hook(kernel=spec, layer=layer, mode=mode, platform=platform)   # what it raises: reported by watch()


def _sample_layer(spec: KernelSpec, mode: Mode) -> Any | None:
    """A common shape of the kernel's op in the mode's formats (its verdict does not matter, only that
    the hook returns)."""
    group = 128 if mode.weight == "int4" else None
    act = mode.activation if mode.activation != "bf16" else None
    try:
        if spec.op == "linear":
            return LinearLayer(name="verify", in_features=4096, out_features=4096, weight_format=mode.weight,
                               activation_format=act, group_size=group)
        if spec.op == "moe":
            return MoELayer(name="verify", num_experts=128, top_k=8, hidden_size=4096, intermediate_size=1536,
                            weight_format=mode.weight, activation_format=act, group_size=group)
        return EmbeddingLayer(name="verify", num_embeddings=32768, embedding_dim=4096, weight_format=mode.weight)
    except ValueError:   # a format whose layers need more than a shape (pydantic's error is a ValueError)
        return None


def watch(steps: Iterator[Step], timeout: float) -> list[str]:
    """Run `steps` in order on one daemon thread; the problems they report, and a hang (a step running
    past `timeout` seconds, with where it is stuck), which ends the run: the stuck thread is left behind
    and the process exits without it."""
    problems: list[str] = []
    current: list[Any] = [None, 0.0]   # the step running, and since when

    def work() -> None:
        for what, call in steps:
            current[:] = [what, time.monotonic()]
            try:
                problem = call()
            except BaseException as exc:  # noqa: BLE001 - on this thread even KeyboardInterrupt is plugin code's
                problem = f"{what} raised {describe(exc)}"
            if problem:
                problems.append(problem)
        current[:] = [None, 0.0]

    thread = threading.Thread(target=work, name="oracle-verify", daemon=True)
    thread.start()
    while thread.is_alive():
        thread.join(0.02)
        what, since = current
        if what is not None and thread.is_alive() and time.monotonic() - since > timeout:
            frame = sys._current_frames().get(thread.ident or -1)
            where = traceback.format_stack(frame)[-1].strip().replace("\n", " | ") if frame is not None else "?"
            return problems + [f"{what} did not return within {timeout:g} s (a hang?); stuck at {where}"]
    return problems
