"""Three node processes on loopback, driven through their stdin and stdout.

``ProcessCluster(argv_for, ...)`` starts one child per node id with ``argv_for(node_id, peers,
store_dir)`` (``dledger.bench.node`` for dledger; the benchmark script passes PySyncObj's
runner the same way), each with free loopback ports and a store directory under one temporary
directory that ``close()`` removes. Children speak JSON lines (``node`` says which); their
stderr goes to ``<dir>/<id>.log``. Every wait is bounded; ``close()`` asks each child to quit,
SIGKILLs the ones that do not within the grace period, and reaps them all, so no process
outlives the cluster (also on an exception: use it as a context manager).
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Callable, Sequence
from dledger.transport.loopback import free_ports




class NodeFailed(RuntimeError):
    """A node process exited, or did not answer in time."""


class _Child:
    def __init__(self, node_id: str, proc: subprocess.Popen, log_path: str) -> None:
        self.id, self.proc, self.log_path = node_id, proc, log_path
        self.lines: "queue.Queue[dict | None]" = queue.Queue()
        self.thread = threading.Thread(target=self._read, name=f"bench-{node_id}", daemon=True)
        self.thread.start()

    def _read(self) -> None:
        for raw in self.proc.stdout:
            try:
                self.lines.put(json.loads(raw))
            except ValueError:
                continue
        self.lines.put(None)

    def tail(self, n: int = 5) -> str:
        try:
            with open(self.log_path, errors="replace") as f:
                return "".join(f.readlines()[-n:]).strip()
        except OSError:
            return ""


class ProcessCluster:
    def __init__(self, argv_for: Callable[[str, str, str], Sequence[str]], ids: Sequence[str] = ("n0", "n1", "n2"),
                 *, base_dir: str | None = None, env: dict | None = None, ready_timeout_s: float = 30.0) -> None:
        self.ids = list(ids)
        ports = free_ports(len(self.ids))
        self.addresses = {i: f"127.0.0.1:{p}" for i, p in zip(self.ids, ports)}
        self.peers = ";".join(f"{i}-{a}" for i, a in self.addresses.items())
        self.dir = tempfile.mkdtemp(prefix="dledger-bench-", dir=base_dir)
        self.children: dict[str, _Child] = {}
        env = {**os.environ, **(env or {})}
        try:
            for i in self.ids:
                store = os.path.join(self.dir, i)
                os.makedirs(store, exist_ok=True)
                log_path = os.path.join(self.dir, f"{i}.log")
                with open(log_path, "wb") as log:
                    proc = subprocess.Popen(list(argv_for(i, self.peers, store)), stdin=subprocess.PIPE,
                                            stdout=subprocess.PIPE, stderr=log, env=env, text=True, bufsize=1)
                self.children[i] = _Child(i, proc, log_path)
            for i in self.ids:
                self.expect(i, "ready", ready_timeout_s)
        except BaseException:
            self.close()
            raise

    # -- talking to a child ----------------------------------------------------------------
    def send(self, node_id: str, cmd: dict) -> None:
        child = self.children[node_id]
        try:
            child.proc.stdin.write(json.dumps(cmd) + "\n")
            child.proc.stdin.flush()
        except (OSError, ValueError) as exc:
            raise NodeFailed(f"{node_id} is gone ({exc}); its log: {child.tail()}") from None

    def expect(self, node_id: str, op: str, timeout_s: float, on_progress: Callable[[dict], None] | None = None
               ) -> dict:
        """The next line of ``node_id`` whose ``op`` is ``op`` (progress lines go to
        ``on_progress``); ``NodeFailed`` when the child exits or ``timeout_s`` passes."""
        child = self.children[node_id]
        deadline = time.monotonic() + timeout_s
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise NodeFailed(f"{node_id} did not answer {op!r} within {timeout_s:g} s; its log: {child.tail()}")
            try:
                msg = child.lines.get(timeout=remaining)
            except queue.Empty:
                continue
            if msg is None:
                child.lines.put(None)
                raise NodeFailed(f"{node_id} exited (code {child.proc.poll()}); its log: {child.tail()}")
            if msg.get("op") == op:
                return msg
            if msg.get("op") == "progress" and on_progress is not None:
                on_progress(msg)

    def ask(self, node_id: str, cmd: dict, timeout_s: float = 10.0, on_progress=None) -> dict:
        self.send(node_id, cmd)
        return self.expect(node_id, cmd["op"], timeout_s, on_progress)

    def cpu_seconds(self) -> dict[str, float]:
        """CPU time (user + system, all threads) each live child has used so far; empty where
        ``/proc`` is not there."""
        out = {}
        for i, child in self.children.items():
            try:
                with open(f"/proc/{child.proc.pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                out[i] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
            except (OSError, ValueError, IndexError):
                continue
        return out

    def alive(self) -> list[str]:
        return [i for i, c in self.children.items() if c.proc.poll() is None]

    def roles(self, timeout_s: float = 5.0) -> dict[str, dict]:
        out = {}
        for i in self.alive():
            try:
                out[i] = self.ask(i, {"op": "role"}, timeout_s)
            except NodeFailed:
                continue
        return out

    def wait_leader(self, timeout_s: float = 20.0, exclude: Sequence[str] = ()) -> str:
        """The id of a live node that says it leads (polling every 20 ms)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for i, r in self.roles().items():
                if i not in exclude and r.get("role") == "LEADER":
                    return i
            time.sleep(0.02)
        raise NodeFailed(f"no leader within {timeout_s:g} s")

    def kill(self, node_id: str) -> None:
        """SIGKILL one node and reap it."""
        proc = self.children[node_id].proc
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        proc.wait(10)

    # -- the end -----------------------------------------------------------------------------
    def close(self, grace_s: float = 10.0) -> None:
        for child in self.children.values():
            if child.proc.poll() is None:
                try:
                    child.proc.stdin.write(json.dumps({"op": "quit"}) + "\n")
                    child.proc.stdin.close()
                except (OSError, ValueError):
                    pass
        deadline = time.monotonic() + grace_s
        for child in self.children.values():
            try:
                child.proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.proc.kill()
                child.proc.wait(10)
            for stream in (child.proc.stdin, child.proc.stdout):
                try:
                    if stream is not None:
                        stream.close()
                except (OSError, ValueError):
                    pass
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> "ProcessCluster":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def dledger_node_argv(durability: str, heart_beat_leak: int = 3, python: str = sys.executable,
                      extra: Sequence[str] = ()) -> Callable[[str, str, str], list[str]]:
    """``argv_for`` of a dledger benchmark node in ``durability`` mode, standing for election
    after ``heart_beat_leak`` missed 100 ms heartbeats."""
    def argv(node_id: str, peers: str, store_dir: str) -> list[str]:
        return [python, "-m", "dledger.bench.node", "--id", node_id, "--peers", peers, "--store-dir", store_dir,
                "--durability", durability, "--heart-beat-leak", str(heart_beat_leak), *extra]
    return argv


__all__ = ["NodeFailed", "ProcessCluster", "dledger_node_argv"]
