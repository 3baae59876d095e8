"""``benchmarks/bench_broker_encode.py`` as a user meets it: its help has examples, bad values
are refused naming them, and a small run prints both loops' CPU per message and that they
gave the same bytes."""

import re

from helpers.bench_scripts import run_benchmark


def _run(*args):
    return run_benchmark("bench_broker_encode.py", *args)


def test_help_gives_examples():
    r = _run("--help")
    assert r.returncode == 0 and "examples:" in r.stdout and "--payload 1024 --batch 1" in r.stdout


def test_bad_values_are_refused_naming_them():
    r = _run("--batch", "0")
    assert r.returncode == 2 and "--batch" in r.stderr


def test_a_small_run_prints_both_loops_and_that_they_agree():
    r = _run("--messages", "500", "--batch", "7", "--repeat", "1")
    assert r.returncode == 0, r.stderr
    assert re.search(r"compiled\s+[\d.]+ µs CPU per message", r.stdout), r.stdout
    assert re.search(r"python\s+[\d.]+ µs CPU per message", r.stdout), r.stdout
    assert "same bytes both ways: True" in r.stdout
