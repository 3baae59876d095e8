"""The commands as a person at a terminal uses them: ``append`` appends each stdin line as it
arrives and Ctrl-C keeps what was acknowledged and says how many; Ctrl-C on ``append``,
``demo`` and ``audit`` is one line and exit 130, with no Python traceback; ``status`` is a
table on a terminal and JSON with ``--json`` (or when piped, as before); ``transfer-leader``
to the leader says it already leads; ``node`` takes the client's TLS flags and
``--store-segment-size``. Every wait on a child is bounded."""

import argparse
import json
import os
import pathlib
import queue
import signal
import subprocess
import sys
import threading
import time

import pytest

from dledger.cli import main
from dledger.cli import node as cli_node
from dledger.cli.client import status_table

from transport.tcp_helpers import TcpGroup

SRC = pathlib.Path(__file__).resolve().parents[2] / "src"
TIMEOUT = 60


def env() -> dict:
    e = {k: v for k, v in os.environ.items() if k != "DLEDGER_SECRET"}
    e["PYTHONPATH"] = str(SRC)
    return e


def start(*args, **kw) -> subprocess.Popen:
    """``dledger ARGS`` in a session of its own, SIGINT handled as at a terminal."""
    return subprocess.Popen([sys.executable, "-m", "dledger.cli", *args], env=env(), start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL), **kw)


def ctrl_c(proc: subprocess.Popen) -> None:
    """What Ctrl-C does at a terminal: SIGINT to the foreground process group."""
    os.killpg(proc.pid, signal.SIGINT)


def lines_of(stream) -> queue.Queue:
    """The lines of ``stream`` as they come, read by a thread; ``None`` after the last."""
    q: queue.Queue = queue.Queue()

    def read() -> None:
        for line in iter(stream.readline, b""):
            q.put(line)
        q.put(None)

    threading.Thread(target=read, daemon=True).start()
    return q


@pytest.fixture
def group(tmp_path):
    # a loaded test machine: a 1.5 s election timeout (docs/operations.md)
    g = TcpGroup(tmp_path, store_type="memory", heart_beat_time_interval_ms=500).start_all()
    yield g
    g.stop_all()


def test_append_appends_each_line_as_it_arrives_and_ctrl_c_says_how_many_were_acknowledged(group):
    group.leader()
    proc = start("append", "--peers", group.peers, "--group", "t", "--timeout", "20",
                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        out = lines_of(proc.stdout)
        indexes = []
        for body in (b"first\n", b"second\n"):     # stdin stays open: each line is appended as it comes
            proc.stdin.write(body)
            proc.stdin.flush()
            index, term, pos = out.get(timeout=TIMEOUT).split()
            indexes.append(int(index))
        assert indexes[1] == indexes[0] + 1
        ctrl_c(proc)
        assert proc.wait(TIMEOUT) == 130
        err = proc.stderr.read().decode()
        assert err == "dledger append: interrupted: 2 entries appended and acknowledged (printed above)\n", err
        lead = group.leader()
        assert [lead.get(i).body for i in indexes] == [b"first", b"second"]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(TIMEOUT)


def test_status_is_a_table_on_a_terminal_and_json_with_json_or_when_piped(group, capsys, monkeypatch):
    lead = group.leader()
    client = ["status", "--peers", group.peers, "--group", "t", "--timeout", "5"]
    assert main([*client, "--json"]) == 0
    as_json = json.loads(capsys.readouterr().out)
    assert set(as_json) == {"n0", "n1", "n2"}
    assert set(as_json["n0"]) == {"address", "committed_index", "group", "leader_id", "ledger_end_index",
                                  "ledger_end_term", "node_id", "peers", "role", "term", "waiting",
                                  # the configuration in force, and the leader's view of each member
                                  "voters", "learners", "config_index", "match_index", "member", "match", "lag"}
    assert as_json[lead.config.self_id]["waiting"] == ""        # the leader waits for nothing
    assert main([*client, "-w", "json"]) == 0 and json.loads(capsys.readouterr().out).keys() == as_json.keys()
    assert main(client) == 0                        # not a terminal here: JSON, as before
    assert json.loads(capsys.readouterr().out).keys() == as_json.keys()
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    assert main(client) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split() == ["NODE", "ADDRESS", "ROLE", "TERM", "LEADER", "LOG", "END", "COMMITTED", "MEMBER",
                                "MATCH", "LAG"]
    # (a node that knows no leader yet, just after the election, adds a line "n0: no leader: ...")
    rows = {line.split()[0]: line.split() for line in table[1:]
            if not line.split()[0].endswith(":") and not line.startswith("configuration")}
    lid = lead.config.self_id
    assert set(rows) == {"n0", "n1", "n2"} and rows[lid][2] == "LEADER" and rows[lid][4] == lid
    assert all(row[1] == f"127.0.0.1:{port}" for row, port in zip((rows[n] for n in group.ids), group.ports))
    assert main([*client, "-w", "table"]) == 0 and capsys.readouterr().out.splitlines()[0] == table[0]


def test_the_status_table_marks_a_node_that_did_not_answer():
    text = status_table({
        "n0": {"node_id": "n0", "address": "127.0.0.1:1", "role": "LEADER", "term": 12, "leader_id": "n0",
               "ledger_end_index": 1500, "committed_index": 1499},
        "n1": {"node_id": "n1", "address": "127.0.0.1:2", "error": "cannot reach n1 at 127.0.0.1:2: refused"}})
    assert text.splitlines() == [
        "NODE  ADDRESS      ROLE    TERM  LEADER  LOG END  COMMITTED  MEMBER  MATCH  LAG",
        "n0    127.0.0.1:1  LEADER    12  n0         1500       1499  -           -    -",
        "n1    127.0.0.1:2  -          -  -             -          -  -           -    -",
        "n1: cannot reach n1 at 127.0.0.1:2: refused"]


def test_transfer_leader_to_the_leader_says_it_already_leads(group, capsys):
    lead = group.leader()
    lid = lead.config.self_id
    assert main(["transfer-leader", "--peers", group.peers, "--group", "t", "--timeout", "10", "--to", lid]) == 0
    assert capsys.readouterr().out == f"{lid} already leads (term {lead.node.term}); nothing to do\n"


def test_a_refused_transfer_names_the_code_and_its_number(group, capsys):
    lead = group.leader()
    target = next(i for i in group.ids if i != lead.config.self_id)
    group.servers[target].shutdown()                # the leader's forward to it gets no answer
    assert main(["transfer-leader", "--peers", group.peers, "--group", "t", "--timeout", "10", "--to", target]) == 1
    assert capsys.readouterr().err == "dledger transfer-leader: refused: NETWORK_ERROR (code 302)\n"


def test_node_takes_the_clients_tls_flags_and_a_segment_size(tmp_path):
    parser = argparse.ArgumentParser()
    cli_node.add_parser(parser.add_subparsers(dest="cmd"))
    base = ["node", "--group", "g", "--id", "n0", "--peers", "n0-127.0.0.1:1", "--store-dir", str(tmp_path)]
    (c,) = cli_node.load_configs(parser.parse_args(
        [*base, "--tls-cert", "n.pem", "--tls-key", "n.key", "--tls-ca", "ca.pem", "--store-segment-size", "64MiB"]))
    assert (c.tls_cert_file, c.tls_key_file, c.tls_ca_file) == ("n.pem", "n.key", "ca.pem")
    assert (c.mapped_file_size_for_entry_data, c.mapped_file_size_for_entry_index) == (64 << 20, 10 << 20)
    (c,) = cli_node.load_configs(parser.parse_args(base))
    assert (c.mapped_file_size_for_entry_data, c.mapped_file_size_for_entry_index) == (1 << 30, 160 << 20)
    for text, size in (("4096", 4096), ("8k", 8192), ("2 GiB", 2 << 30), ("1m", 1 << 20)):
        assert cli_node.parse_size(text, "--x") == size
    conf = tmp_path / "node.toml"                   # an index size the file sets is kept
    conf.write_text('group = "g"\nid = "n0"\npeers = "n0-127.0.0.1:1"\nmapped_file_size_for_entry_index = 65536\n')
    (c,) = cli_node.load_configs(parser.parse_args(["node", "--config", str(conf), "--store-segment-size", "8MiB"]))
    assert (c.mapped_file_size_for_entry_data, c.mapped_file_size_for_entry_index) == (8 << 20, 65536)


@pytest.mark.parametrize("size, words", [("64 megs", "'64 megs' is not a size"), ("1k", "must be at least 4096")])
def test_a_bad_segment_size_is_one_line_and_exit_2(tmp_path, size, words, capsys):
    assert main(["node", "--group", "g", "--id", "n0", "--peers", "n0-127.0.0.1:1", "--store-dir", str(tmp_path),
                 "--store-segment-size", size]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and words in err, err


def wait_for(predicate, what: str):
    deadline = time.monotonic() + TIMEOUT
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def processes_naming(text: str) -> list[int]:
    """Processes whose command line holds ``text``."""
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                    if text.encode() in f.read():
                        found.append(int(entry.name))
            except OSError:
                continue
    return found


def test_ctrl_c_stops_the_demo_with_one_line_and_exit_130_and_no_node_outlives_it(tmp_path):
    out = tmp_path / "demo"
    proc = start("demo", "--entries", "5000000", "--dir", str(out), "--no-audit",
                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        # once the nodes serve and the load runs (every node logged its role), press Ctrl-C
        wait_for(lambda: all("in term" in (out / f"n{k}.log").read_text(errors="replace")
                             if (out / f"n{k}.log").exists() else False for k in range(3)), "the demo's nodes")
        ctrl_c(proc)
        stdout, stderr = proc.communicate(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(TIMEOUT)
    assert proc.returncode == 130, (stdout.decode()[-2000:], stderr.decode()[-2000:])
    assert stderr.decode().endswith("dledger demo: interrupted\n") and b"Traceback" not in stderr, stderr
    assert b"FAILED" not in stdout                   # the nodes it stops are not reported as failures
    wait_for(lambda: not processes_naming(str(out)), "the demo's nodes to be gone")


def test_ctrl_c_stops_the_audit_with_one_line_and_exit_130(tmp_path):
    from dledger.store import DLedgerMmapFileStore

    paths = []
    for k in range(2):
        path = str(tmp_path / f"dledger-n{k}")
        store = DLedgerMmapFileStore.open(path, data_file_size=1 << 20, index_file_size=32 * 4096)
        store.batch_append_as_leader([b"x" * 100] * 5000)
        store.close()
        paths.append(path)
    proc = start("audit", *paths, "--out", str(tmp_path / "audit"), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        err = lines_of(proc.stderr)
        seen = []
        deadline = time.monotonic() + TIMEOUT
        while not any(line and b"log level" in line for line in seen):   # Spark's session is up
            seen.append(err.get(timeout=max(0.1, deadline - time.monotonic())))
            assert seen[-1] is not None, b"".join(seen[:-1])
        ctrl_c(proc)
        proc.wait(TIMEOUT)
        # the audit's Spark JVM ends too (PySpark leaves it running when Ctrl-C comes while it
        # starts): nothing of the audit's process group is left, and stderr reaches its end
        wait_for(lambda: not group_alive(proc.pid), "the audit's JVM to end")
        while seen[-1] is not None:
            seen.append(err.get(timeout=TIMEOUT))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(TIMEOUT)
        if group_alive(proc.pid):
            os.killpg(proc.pid, signal.SIGKILL)
    text = b"".join(seen[:-1]).decode(errors="replace")
    if proc.returncode == 0:
        pytest.fail("the audit ended before Ctrl-C reached it; " + text[-500:])
    assert proc.returncode == 130, text[-3000:]
    assert text.endswith("dledger audit: interrupted\n") and "Traceback" not in text, text[-3000:]


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True
