"""How fast is select_backend? Prints figures and ratios; see oracle/benchmark.py for targets.

Run: .venv/bin/python bench/bench_select.py
"""
from oracle.benchmark import print_selection_benchmark

if __name__ == "__main__":
    print_selection_benchmark()
