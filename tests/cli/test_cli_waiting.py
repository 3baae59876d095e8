"""Two of three members of a new group, started without ``--bootstrap``, as OS processes: they
elect no one (an empty member waits to hear from every other one), and everything an operator
looks at says why: each node's WARNING line, ``dledger status`` (table and JSON) and the
client's error. Every wait on a child is bounded by a timeout."""

import json
import os
import pathlib
import subprocess
import sys
import time

import pytest

from transport.tcp_helpers import free_ports

SRC = pathlib.Path(__file__).resolve().parents[2] / "src"
TIMEOUT = 60


def dledger(*args, env, timeout=TIMEOUT):
    return subprocess.run([sys.executable, "-m", "dledger.cli", *args], capture_output=True, env=env,
                          timeout=timeout)


@pytest.fixture
def two_of_three(tmp_path):
    ports = free_ports(3)
    peers = ";".join(f"n{k}-127.0.0.1:{p}" for k, p in enumerate(ports))
    small = tmp_path / "small.toml"
    small.write_text("mapped_file_size_for_entry_data = 4194304\nmapped_file_size_for_entry_index = 2097152\n")
    env = dict(os.environ, PYTHONPATH=str(SRC))
    nodes, logs = {}, {}
    for k in range(2):                                   # n2 is never started
        logs[f"n{k}"] = log = tmp_path / f"n{k}.log"
        with open(log, "wb") as err:
            nodes[f"n{k}"] = subprocess.Popen(
                [sys.executable, "-m", "dledger.cli", "node", "--group", "g", "--id", f"n{k}", "--peers", peers,
                 "--store-dir", str(tmp_path / "stores"), "--log-level", "WARNING", "--config", str(small)],
                env=env, stdout=subprocess.DEVNULL, stderr=err)
    try:
        yield peers, ports, env, logs
    finally:
        for p in nodes.values():
            p.kill()
            p.wait(TIMEOUT)


def test_status_the_warning_and_the_client_say_why_a_new_group_missing_a_member_elects_no_one(two_of_three):
    peers, ports, env, logs = two_of_three
    client = ["--peers", peers, "--group", "g", "--timeout", "3"]
    deadline = time.monotonic() + 40
    missing = f"not from n2 (127.0.0.1:{ports[2]})"
    while True:                     # both nodes up, and each has heard from the other (the start takes a while)
        r = dledger("status", "--json", *client, env=env)
        status = json.loads(r.stdout) if r.stdout else {}
        if all(missing in (status.get(n, {}).get("waiting") or "") for n in ("n0", "n1")) \
                or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    for node in ("n0", "n1"):
        s = status[node]
        assert s["leader_id"] is None and s["role"] == "CANDIDATE" and s["term"] == 0
        assert s["waiting"].startswith("its store is new or wiped (FRESH)"), s
        assert f"not from n2 (127.0.0.1:{ports[2]})" in s["waiting"]
        assert "--bootstrap on every member" in s["waiting"]
    assert "error" in status["n2"]
    table = dledger("status", "-w", "table", *client, env=env).stdout.decode()
    assert "n0: no leader: its store is new or wiped (FRESH)" in table
    # the client's error quotes the nodes' reasons
    r = dledger("append", *client, "x", env=env)
    assert r.returncode != 0
    err = r.stderr.decode()
    assert "no node named a leader; n" in err and "not from n2" in err and "--bootstrap" in err
    assert len(err.strip().splitlines()) == 1, err
    # each node's log: one WARNING naming the missing member and the remedy, after 5 s
    while time.monotonic() < deadline and not all("no leader for" in logs[n].read_text() for n in ("n0", "n1")):
        time.sleep(0.5)
    for node in ("n0", "n1"):
        lines = [ln for ln in logs[node].read_text().splitlines() if "no leader for" in ln]
        assert lines, logs[node].read_text()
        assert "WARNING" in lines[0] and f"{node}: no leader for" in lines[0]
        assert f"not from n2 (127.0.0.1:{ports[2]})" in lines[0] and "--bootstrap on every member" in lines[0]
