"""Three OS processes, each one ``DLedgerServer(config)`` on its own port, form a group over
TCP with a shared secret from the environment, elect a leader, and commit an append on every
replica. Every read of a child's answer is bounded by a timeout."""

import json
import os
import pathlib
import queue
import subprocess
import sys
import threading

import pytest

from transport.tcp_helpers import free_ports

SCRIPT = pathlib.Path(__file__).with_name("node_process.py")
SRC = pathlib.Path(__file__).resolve().parents[2] / "src"
TIMEOUT = 60


class Child:
    def __init__(self, args, env) -> None:
        self.proc = subprocess.Popen([sys.executable, str(SCRIPT), *args], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
        self.lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line.strip())
        self.lines.put(None)

    def read(self):
        line = self.lines.get(timeout=TIMEOUT)
        assert line is not None, f"the child exited with {self.proc.wait(5)}"
        return line

    def ask(self, command: str):
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return json.loads(self.read())

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                self.ask("quit")
                self.proc.wait(TIMEOUT)
            except Exception:
                self.proc.kill()
                self.proc.wait(TIMEOUT)


@pytest.fixture
def processes(tmp_path):
    ports = free_ports(3)
    peers = ";".join(f"n{k}-127.0.0.1:{p}" for k, p in enumerate(ports))
    env = dict(os.environ, PYTHONPATH=str(SRC), DLEDGER_SECRET="a-secret-from-the-environment-123")
    children = {}
    try:
        for k in range(3):
            children[f"n{k}"] = Child(["procs", f"n{k}", peers, str(tmp_path)], env)
        for child in children.values():
            assert child.read() == "ready"
        yield children
    finally:
        for child in children.values():
            child.stop()


def test_three_processes_form_a_group_over_tcp_and_commit_on_every_replica(processes):
    leaders = {node: child.ask("leader 30") for node, child in processes.items()}
    assert len(set(leaders.values())) == 1 and None not in leaders.values(), leaders
    leader = processes[leaders["n0"]]
    r = leader.ask("append across processes")
    assert r["code"] == 200 and r["index"] >= 0
    for node, child in processes.items():
        assert child.ask(f"committed {r['index']} 30") is True, node
        assert child.ask(f"get {r['index']}") == "across processes"
