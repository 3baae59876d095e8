"""``benchmarks/bench_one_append.py`` as a user meets it, and what its table shows: appends
made one at a time cost each follower one push (its commit index rides the next push; before,
a COMMIT push and its answer followed every append: two turns of each follower per append)."""

import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "benchmarks", "bench_one_append.py")


def _run(*args, timeout=120):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, timeout=timeout)


def test_help_gives_examples():
    r = _run("--help")
    assert r.returncode == 0 and "examples:" in r.stdout and "bench_one_append.py --appends 10000" in r.stdout


def test_a_small_run_prints_the_cpu_per_append_and_one_push_per_follower_per_append():
    r = _run("--appends", "300", "--rounds", "1")
    assert r.returncode == 0, r.stderr
    assert re.search(r"round 1: [\d.]+ µs of event-loop CPU per append", r.stdout), r.stdout
    pushes = [float(m) for m in re.findall(r"\|\s+n\d \|\s+on_envelope \|\s+PushEntryRequest \|\s+([\d.]+) \|", r.stdout)]
    assert len(pushes) == 2, r.stdout                  # both followers, none of them the leader
    assert all(0.9 <= p <= 1.1 for p in pushes), r.stdout
