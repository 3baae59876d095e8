"""``dledger bench`` end to end: three real node processes on loopback, the JSON it prints,
and no process left behind. Bounded: the command runs a short fixed-rate load."""

import json
import os
import subprocess
import sys

import pytest

from dledger.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENV = {**os.environ, "PYTHONPATH": os.path.join(ROOT, "src") + os.pathsep + os.environ.get("PYTHONPATH", "")}


def bench_children() -> list[str]:
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True, timeout=10).stdout
    return [line for line in out.splitlines() if "dledger.bench.node" in line and "--store-dir" in line]


def test_dledger_bench_prints_one_json_object_per_configuration_and_leaves_no_process(tmp_path):
    before = bench_children()
    proc = subprocess.run([sys.executable, "-m", "dledger.cli", "bench", "--payload", "128", "--mode", "page_cache",
                           "--load", "rate,saturation", "--rate", "200", "--rate-seconds", "0.5", "--seconds", "0.5",
                           "--json"],
                          capture_output=True, text=True, timeout=120, env=ENV, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [(r["payload"], r["mode"], r["load"]) for r in rows] == [(128, "page_cache", "rate"),
                                                                     (128, "page_cache", "saturation")]
    for r in rows:
        assert r["committed_per_s"] > 0 and 0 < r["p50_ms"] <= r["p99_ms"] and r["failures"] == 0
    assert "committed" in proc.stderr                   # progress went to stderr
    assert bench_children() == before


def test_dledger_bench_has_help_with_an_example(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["bench", "--help"])
    out = capsys.readouterr().out
    assert exc.value.code == 0 and "example:" in out and "dledger bench" in out


@pytest.mark.parametrize("argv, words", [
    (["bench", "--payload", "abc"], "byte counts"),
    (["bench", "--mode", "disk"], "page_cache"),
    (["bench", "--seconds", "0"], "positive"),
])
def test_bad_bench_flags_are_one_clear_error(argv, words, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and words in err and "Traceback" not in err


def test_bench_against_a_bad_peers_string_is_one_line_and_exit_2(capsys):
    assert main(["bench", "--peers", "n0-127.0.0.1:1,n1-127.0.0.1:2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "peers" in err and "Traceback" not in err
