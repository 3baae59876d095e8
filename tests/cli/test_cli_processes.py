"""``dledger node`` as three OS processes, driven by ``dledger append``, ``get``, ``status`` and
``transfer-leader`` (each its own process); SIGTERM stops the nodes with exit code 0 and the data
is on disk when the stores are reopened. Every wait on a child is bounded by a timeout."""

import json
import os
import pathlib
import signal
import subprocess
import sys

import pytest

from dledger.store import open_store

from transport.tcp_helpers import free_ports

SRC = pathlib.Path(__file__).resolve().parents[2] / "src"
TIMEOUT = 60
SECRET = "a-cli-secret-0123456789abcdef"


def dledger(*args, env, stdin=None, timeout=TIMEOUT):
    return subprocess.run([sys.executable, "-m", "dledger.cli", *args], input=stdin, capture_output=True,
                          env=env, timeout=timeout)


@pytest.fixture
def cluster(tmp_path):
    ports = free_ports(3)
    peers = ";".join(f"n{k}-127.0.0.1:{p}" for k, p in enumerate(ports))
    secret = tmp_path / "secret"
    secret.write_text(SECRET + "\n")
    # The suite shares two cores with these three processes: a node starved of CPU for the
    # default election timeout (300 ms) would lose its leadership mid-test and the client would
    # rightly report an append's outcome as unknown. Timing for a loaded machine, as an operator
    # would set it (docs/operations.md): a 1.5 s election timeout.
    timing = tmp_path / "timing.toml"
    timing.write_text("heart_beat_time_interval_ms = 500\n")
    env = {k: v for k, v in os.environ.items() if k != "DLEDGER_SECRET"}
    env["PYTHONPATH"] = str(SRC)
    nodes = {}
    for k in range(3):
        nodes[f"n{k}"] = subprocess.Popen(
            [sys.executable, "-m", "dledger.cli", "node", "--group", "g", "--id", f"n{k}", "--peers", peers,
             "--store-dir", str(tmp_path / "stores"), "--secret-file", str(secret), "--log-level", "WARNING",
             "--config", str(timing)],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    client = ["--peers", peers, "--group", "g", "--secret-file", str(secret), "--timeout", "20"]
    try:
        yield nodes, client, env, tmp_path
    finally:
        for p in nodes.values():
            if p.poll() is None:
                p.kill()
                p.wait(TIMEOUT)


def test_three_node_processes_serve_the_client_commands_and_stop_cleanly_on_sigterm(cluster):
    nodes, client, env, tmp_path = cluster
    r = dledger("append", *client, "hello", "world", env=env)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.decode().split("\n")[:-1]
    assert [line.split()[0] for line in lines] == ["0", "1"] and all(len(line.split()) == 3 for line in lines)
    r = dledger("append", *client, env=env, stdin=b"a\nb\nc\n")
    assert r.returncode == 0, r.stderr
    assert [line.split()[0] for line in r.stdout.decode().splitlines()] == ["2", "3", "4"]
    r = dledger("get", *client, "1", env=env)
    assert r.returncode == 0 and r.stdout == b"world\n", r.stderr
    r = dledger("status", *client, env=env)
    assert r.returncode == 0, r.stderr
    status = json.loads(r.stdout)
    leaders = {s["leader_id"] for s in status.values()}
    assert set(status) == {"n0", "n1", "n2"} and len(leaders) == 1
    target = next(n for n in status if n not in leaders)
    r = dledger("transfer-leader", *client, "--to", target, env=env)
    assert r.returncode == 0 and r.stdout.decode().startswith(f"{target} leads"), r.stderr
    assert json.loads(dledger("status", *client, env=env).stdout)[target]["leader_id"] == target
    r = dledger("append", *client, "after-transfer", env=env)
    assert r.returncode == 0 and r.stdout.split()[0] == b"5", r.stderr
    for p in nodes.values():
        p.send_signal(signal.SIGTERM)
    for name, p in nodes.items():
        assert p.wait(TIMEOUT) == 0, (name, p.stderr.read().decode()[-2000:])
        assert b"Traceback" not in p.stderr.read()
    bodies = [b"hello", b"world", b"a", b"b", b"c", b"after-transfer"]
    for k in range(3):
        with open_store(str(tmp_path / "stores" / f"dledger-n{k}")) as store:
            assert store.ledger_end_index == 5
            assert [store.get(i).body for i in range(6)] == bodies


def test_a_get_beyond_the_log_and_a_wrong_secret_are_one_line_errors(cluster):
    nodes, client, env, tmp_path = cluster
    assert dledger("append", *client, "x", env=env).returncode == 0
    r = dledger("get", *client, "7", env=env)
    assert r.returncode == 1 and r.stderr.decode().count("\n") == 1 and "beyond" in r.stderr.decode()
    bad = tmp_path / "bad"
    bad.write_text("another-secret-0123456789\n")
    args = list(client)
    args[args.index("--secret-file") + 1] = str(bad)
    args[args.index("--timeout") + 1] = "1"
    r = dledger("append", *args, "y", env=env)
    assert r.returncode == 1 and r.stderr.decode().count("\n") == 1 and b"Traceback" not in r.stderr
    for p in nodes.values():
        p.send_signal(signal.SIGINT)
    assert [p.wait(TIMEOUT) for p in nodes.values()] == [0, 0, 0]
