"""``examples/mini_broker.py`` end to end: three ``dledger broker`` processes, the master SIGKILLed
mid-stream, production through the failover, every queue pulled to its end: nothing
acknowledged lost, every acknowledged message consumed exactly once unless one of its sends was
unclear. And ``dledger broker``'s flags: ``--help`` with an example, bad flags one line, exit 2."""

import os
import pathlib
import re
import subprocess
import sys

import pytest

from dledger.cli import main

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_the_mini_broker_example_loses_no_acknowledged_message_through_a_master_kill(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    r = subprocess.run([sys.executable, str(ROOT / "examples" / "mini_broker.py"), "--messages", "150",
                        "--topics", "3", "--queues", "2", "--dir", str(tmp_path)],
                       capture_output=True, env=env, timeout=180)
    out = r.stdout.decode()
    assert r.returncode == 0, (out, r.stderr.decode()[-2000:])
    assert re.search(r"master n\d killed \(SIGKILL\)", out) and "master after the failover: n" in out
    sent, acked, refused, unclear = map(int, re.search(
        r"sent (\d+), acknowledged (\d+), refused (\d+), unclear sends (\d+)", out).groups())
    consumed, distinct, dups, bad_dups, gaps = map(int, re.search(
        r"consumed (\d+) \((\d+) distinct\), duplicated (\d+) \(of messages with no unclear send: (\d+)\), "
        r"queue-offset gaps (\d+)", out).groups())
    assert sent == 150 and acked + refused <= sent and acked >= sent - unclear - refused
    assert "lost 0\n" in out and out.rstrip().endswith("OK")
    assert bad_dups == 0 and gaps == 0 and dups <= unclear * 4
    assert distinct >= acked and consumed == distinct + dups
    assert sorted(os.listdir(tmp_path)) == ["broker.toml", "dledger-n0", "dledger-n1", "dledger-n2",
                                            "n0.log", "n1.log", "n2.log"]


def test_the_broker_command_has_help_with_an_example(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["broker", "--help"])
    out = capsys.readouterr().out
    assert exc.value.code == 0 and "example:" in out and "dledger broker" in out and "--broker-port" in out


@pytest.mark.parametrize("argv, words", [
    (["--group", "g", "--id", "n0", "--peers", "n0-127.0.0.1:20911"], "--broker-port, or --brokers"),
    (["--group", "g", "--id", "n0", "--peers", "n0-127.0.0.1:20911", "--broker-port", "70000"], "70000"),
    (["--group", "g", "--id", "n0", "--peers", "n0-127.0.0.1:20911", "--brokers", "n0:1"], "--brokers"),
    (["--group", "g", "--id", "n0", "--peers", "n0-127.0.0.1:20911", "--brokers", "n1-127.0.0.1:1"],
     "entry for n0"),
    (["--id", "n0", "--peers", "n0-127.0.0.1:20911", "--broker-port", "1"], "group is missing"),
    (["--config", "/nonexistent/broker.toml", "--broker-port", "1"], "/nonexistent/broker.toml"),
    (["--group", "g", "--id", "n0", "--peers", "n0-127.0.0.1:20911", "--broker-port", "1", "--metrics-port", "x"],
     "--metrics-port"),
])
def test_bad_broker_flags_are_one_line_and_exit_2(argv, words, capsys):
    assert main(["broker", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and words in err, err


def test_a_broker_with_a_metrics_port_serves_the_nodes_and_the_brokers_metrics(tmp_path):
    import time
    import urllib.request

    from dledger.broker.client import BrokerClient
    from dledger.transport.loopback import free_ports

    raft, broker, metrics = free_ports(3)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.Popen([sys.executable, "-m", "dledger.cli", "broker", "--group", "m", "--id", "n0",
                             "--peers", f"n0-127.0.0.1:{raft}", "--broker-port", str(broker), "--bootstrap",
                             "--store-dir", str(tmp_path), "--metrics-port", str(metrics), "--metrics-host",
                             "127.0.0.1", "--log-level", "WARNING"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        with BrokerClient(f"n0-127.0.0.1:{broker}", timeout=5, send_deadline=30) as client:
            rs = client.send_batch([{"topic": "M", "queue_id": 0, "body": b"x%d" % i} for i in range(5)])
            assert [r.status for r in rs] == ["PUT_OK"] * 5
            deadline = time.monotonic() + 20
            while client.stats("n0")["dispatched"] < 5:
                assert time.monotonic() < deadline
                time.sleep(0.05)
        text = urllib.request.urlopen(f"http://127.0.0.1:{metrics}/metrics", timeout=10).read().decode()
        assert 'dledger_broker_dispatch_lag_seconds_count{group="m",node="n0"} 5.0' in text
        assert 'dledger_broker_writable{group="m",node="n0"} 1.0' in text
        assert 'dledger_broker_dispatch_behind_entries{group="m",node="n0"} 0.0' in text
        dispatched = re.search(r'dledger_broker_dispatched_index\{group="m",node="n0"\} (\S+)', text)
        committed = re.search(r'dledger_committed_index\{group="m",node="n0"\} (\S+)', text)
        assert dispatched and committed and float(dispatched.group(1)) == float(committed.group(1)) >= 4
    finally:
        proc.terminate()
        assert proc.wait(30) == 0, proc.stderr.read().decode()[-2000:]


def test_the_broker_logs_as_dledger_node_does_its_nodes_lines_naming_group_node_and_term(tmp_path):
    import queue
    import threading

    from dledger.transport.loopback import free_ports

    raft, broker = free_ports(2)
    (tmp_path / "b.toml").write_text("mapped_file_size_for_entry_data = 1048576\n"
                                     "mapped_file_size_for_entry_index = 65536\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.Popen([sys.executable, "-m", "dledger.cli", "broker", "--group", "m", "--id", "n0",
                             "--peers", f"n0-127.0.0.1:{raft}", "--broker-port", str(broker), "--bootstrap",
                             "--store-dir", str(tmp_path), "--config", str(tmp_path / "b.toml")],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x.rstrip("\n")) for x in proc.stderr] + [lines.put(None)],
                     daemon=True).start()
    # e.g. "2026-11-27 10:28:21,437 INFO dledger.core.member_state [m/n0 term 0] n0: CANDIDATE -> LEADER ..."
    leader = re.compile(r"^\S+ \S+ INFO dledger\.core\.member_state \[m/n0 term (\d+)\] "
                        r"n0: CANDIDATE -> LEADER in term \1 \(vote won\)")
    # the broker's own line, naming the implementation of its hot loops (compiled in this build)
    own = re.compile(r"^\S+ \S+ INFO dledger\.broker node n0 of group m on 127\.0\.0\.1:\d+, store .+; "
                     r"the broker's hot loops: C$")
    seen: list[str] = []

    def until(done) -> None:
        while not done():
            try:
                line = lines.get(timeout=60)
            except queue.Empty:
                raise AssertionError("\n".join(seen)) from None
            if line is None:
                return
            seen.append(line)

    try:
        until(lambda: any(map(leader.match, seen)) and any(map(own.match, seen)))
        assert any(map(leader.match, seen)) and any(map(own.match, seen)), "\n".join(seen)
    finally:
        proc.terminate()
        assert proc.wait(30) == 0, "\n".join(seen)
    until(lambda: False)                                    # to the end of its stderr
    assert re.match(r"^\S+ \S+ INFO dledger\.broker stopped; store flushed$", seen[-1]), "\n".join(seen)
