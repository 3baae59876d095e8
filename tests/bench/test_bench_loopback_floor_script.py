"""``benchmarks/bench_loopback_floor.py`` as a user meets it: its help has examples, bad values
are refused naming them, and a small run prints a row of round-trip times per server."""

import re

from helpers.bench_scripts import run_benchmark


def _run(*args):
    return run_benchmark("bench_loopback_floor.py", *args)


def test_help_gives_examples():
    r = _run("--help")
    assert r.returncode == 0 and "examples:" in r.stdout and "--server asyncio" in r.stdout


def test_bad_values_are_refused_naming_them():
    r = _run("--server", "blocking,epoll")
    assert r.returncode == 2 and "--server: unknown epoll" in r.stderr
    r = _run("--rate", "0")
    assert r.returncode == 2 and "--rate must be above 0" in r.stderr


def test_a_small_run_prints_each_servers_round_trips():
    r = _run("--count", "50", "--rate", "2000", "--server", "blocking,asyncio")
    assert r.returncode == 0, r.stderr
    for kind in ("blocking", "asyncio"):
        row = re.search(rf"\|\s*{kind} \|\s+50 \|\s+([\d.]+) \|\s+([\d.]+) \|\s+([\d.]+) \|", r.stdout)
        assert row, r.stdout
        p50, p90, p99 = map(float, row.groups())
        assert 0 < p50 <= p90 <= p99
