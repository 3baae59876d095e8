"""The benchmark scripts as a user runs them: ``run_benchmark("bench_x.py", *args)`` runs
``benchmarks/bench_x.py`` with this interpreter and returns the finished process (text output)."""

from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_benchmark(script: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", script), *args],
                          capture_output=True, text=True, timeout=timeout)
