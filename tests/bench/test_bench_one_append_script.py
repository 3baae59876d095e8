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


def _turns_per_append(stdout: str, kind: str) -> dict[str, float]:
    """Follower -> turns per append of ``PushEntryRequest <kind>`` (rows under 0.5 µs per append
    are left out of the table: a follower without a row had next to none)."""
    return {node: float(turns) for node, turns in
            re.findall(r"\|\s+(n\d) \|\s+on_envelope \|\s+PushEntryRequest " + kind + r" \|\s+([\d.]+) \|", stdout)}


def test_a_small_run_prints_the_cpu_per_append_and_one_push_per_follower_per_append():
    r = _run("--appends", "300", "--rounds", "1")
    assert r.returncode == 0, r.stderr
    assert re.search(r"round 1: [\d.]+ µs of event-loop CPU per append", r.stdout), r.stdout
    appends = _turns_per_append(r.stdout, "APPEND")
    assert len(appends) == 2, r.stdout                  # both followers, none of them the leader
    assert all(0.9 <= p <= 1.1 for p in appends.values()), r.stdout
    # the commit index rides the next push: an idle COMMIT push goes only to a follower whose
    # answer or next append came late (a slow machine); a COMMIT push after every append, as
    # before, would show about one per append for both followers
    commits = _turns_per_append(r.stdout, "COMMIT")
    assert min(commits.get(node, 0.0) for node in appends) < 0.5, r.stdout
