"""``benchmarks/bench_snapshot.py`` as a user meets it: ``--help`` gives examples, a bad flag
is one clear error, and a small run of every part prints figures (a state saved, installed
and loaded; a follower far behind served again by a snapshot, and by pushes)."""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "benchmarks", "bench_snapshot.py")


def run(*args, timeout=120):
    env = {**os.environ, "PYTHONPATH": os.path.join(ROOT, "src")}
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, timeout=timeout, env=env)


def test_help_gives_examples():
    r = run("--help")
    assert r.returncode == 0, r.stderr
    assert "examples:" in r.stdout and "bench_snapshot.py --size 256M --skip-e2e" in r.stdout


def test_a_bad_flag_is_one_clear_error():
    r = run("--engine", "threads")
    assert r.returncode == 2 and "unknown engine 'threads'" in r.stderr and "Traceback" not in r.stderr
    r = run("--entries", "10")
    assert r.returncode == 2 and "--entries must be at least 1000" in r.stderr and "Traceback" not in r.stderr


def test_a_small_run_of_every_part_prints_its_figures(tmp_path):
    r = run("--size", "4M", "--e2e-size", "2M", "--entries", "5000", "--push-body", "64K", "--engine", "inproc",
            "--json", "--quiet", "--dir", str(tmp_path), timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout)
    assert out["save"]["bytes"] == 4 * 2**20 + 56 and out["save"]["mb_per_s"] > 0
    assert out["install"]["chunks"] == 5 and out["install"]["mb_per_s"] > 0
    (install,) = out["e2e_install"]
    assert install["snapshot_bytes"] == 2 * 2**20 and install["behind_begin"] > 0 and install["serving_s"] > 0
    assert [p["peer_push_quota"] for p in out["e2e_push"]] == [20 * 2**20, 2**40]
    assert all(p["bytes"] == 2 * 2**20 for p in out["e2e_push"])
    assert os.listdir(tmp_path) == [], "the work directory is removed"
