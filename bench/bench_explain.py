"""Wall time of `oracle explain` on each shipped model, as a user runs it (a fresh process).

Target (issue 4): under 1 s on the largest shipped model (the one with the most layers
per rank). The ratio to a process that only imports the engine's dependencies
(`python -c "import pydantic, yaml, pluggy, structlog"`) shows what explain adds on
top of the unavoidable start-up. Run: `python bench/bench_explain.py [--repeats N]`.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BASELINE = [sys.executable, "-c", "import pydantic, yaml, pluggy, structlog"]
TARGET_S = 1.0


def wall(cmd: list[str], repeats: int) -> float:
    """Median wall seconds of `cmd` over `repeats` runs (after one warm-up run)."""
    subprocess.run(cmd, cwd=REPO, capture_output=True, check=False)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        done = subprocess.run(cmd, cwd=REPO, capture_output=True, check=False)
        times.append(time.perf_counter() - start)
        if done.returncode not in (0, 2):
            raise SystemExit(f"{' '.join(cmd)} failed ({done.returncode}): {done.stderr.decode()[-500:]}")
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", default="rtx-pro-6000")
    args = parser.parse_args()

    sys.path.insert(0, str(REPO))
    from oracle.models import example_names, load_model

    sizes = {name: len(load_model(name).layers) for name in example_names()}
    largest = max(sizes, key=lambda n: sizes[n])
    base = wall(BASELINE, args.repeats)
    print(f"baseline  import pydantic, yaml, pluggy, structlog: {base:.3f} s (median of {args.repeats})")
    print(f"{'model':46} {'layers':>6} {'wall s':>7} {'x base':>7}")
    result = None
    for name in sorted(sizes, key=lambda n: sizes[n]):
        cmd = [sys.executable, "-m", "oracle.cli", "explain", "--model", name, "--device", args.device]
        t = wall(cmd, args.repeats)
        mark = "  <- largest" if name == largest else ""
        print(f"{name:46} {sizes[name]:>6} {t:>7.3f} {t / base:>7.2f}{mark}")
        if name == largest:
            result = t
    for fmt in ("json", "markdown"):
        cmd = [sys.executable, "-m", "oracle.cli", "explain", "--model", largest, "--device", args.device,
               "--format", fmt]
        t = wall(cmd, args.repeats)
        print(f"{largest + ' --format ' + fmt:46} {sizes[largest]:>6} {t:>7.3f} {t / base:>7.2f}")
    assert result is not None
    verdict = "meets" if result < TARGET_S else "MISSES"
    print(f"largest model {largest}: {result:.3f} s, {result / base:.2f}x the baseline; "
          f"{verdict} the {TARGET_S:.0f} s target")
    return 0 if result < TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
