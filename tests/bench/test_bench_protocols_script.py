"""``benchmarks/bench_broker_protocols.py`` as a user meets it: ``--help`` names the protocols
and gives an example; a bad flag is one clear error, before any process starts."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "benchmarks", "bench_broker_protocols.py")


def run(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, timeout=60)


def test_help_names_every_protocol_and_gives_an_example():
    r = run("--help")
    assert r.returncode == 0, r.stderr
    assert "--protocol {own,remoting,grpc,all}" in r.stdout
    assert "examples:" in r.stdout and "bench_broker_protocols.py --protocol all" in r.stdout


def test_a_bad_flag_is_one_clear_error():
    r = run("--protocol", "kafka")
    assert r.returncode == 2 and "invalid choice: 'kafka'" in r.stderr and "Traceback" not in r.stderr
    r = run("--messages", "0")
    assert r.returncode == 2 and "'0' must be positive" in r.stderr and "Traceback" not in r.stderr
