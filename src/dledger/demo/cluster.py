"""The demo's cluster: three ``dledger node`` OS processes on loopback.

``NodeProcesses(out_dir)`` picks three free ports on 127.0.0.1, writes a generated secret
(``secret``, mode 0600) and a node configuration (``nodes.toml``: segment sizes and
heartbeat) into ``out_dir``, and runs each node as ``python -m dledger.cli node``, its store in
``out_dir/dledger-<id>`` and its stderr appended to ``out_dir/<id>.log``. It can SIGKILL a
node, start it again from its store, wait until every node's log reaches an index (through
each node's metadata answer), and stop them all with SIGTERM, returning their exit codes.

Every wait on a child is bounded. ``close()`` (also on ``with`` exit, whatever the error,
Ctrl-C included) SIGKILLs any node still running and reaps it, so no child outlives the demo.
On Linux each node also asks the kernel for a SIGTERM when the demo's process dies (the parent
death signal), which covers a demo killed with SIGKILL. Each node runs in a session of its own,
so a Ctrl-C in the terminal reaches the demo only, which then stops the nodes. The demo watches the nodes through
their metadata answers (leader, term, log end), on connections of its own.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import secrets
import signal
import subprocess
import sys
import time

from dledger.client.connection import AnswerLost, NodeConnection, NotSent
from dledger.protocol import DLedgerResponseCode as Code, MetadataRequest
from dledger.transport.loopback import free_ports

GROUP = "demo"
IDS = ("n0", "n1", "n2")
DATA_FILE_SIZE = 64 * 1024 * 1024
INDEX_FILE_SIZE = 16 * 1024 * 1024
WAIT_S = 15.0


PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Ask for SIGTERM when the parent dies (Linux; elsewhere nothing)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


class ClusterError(RuntimeError):
    """A node process could not be started, died on its own, or did not stop in time."""




class NodeProcesses:
    def __init__(self, out_dir: str, *, heartbeat_ms: int = 100) -> None:
        self.out_dir = out_dir
        ports = free_ports(len(IDS))
        self.peers = ";".join(f"{i}-127.0.0.1:{p}" for i, p in zip(IDS, ports))
        self.secret = secrets.token_hex(24)
        self.secret_file = os.path.join(out_dir, "secret")
        fd = os.open(self.secret_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(self.secret + "\n")
        self.config_file = os.path.join(out_dir, "nodes.toml")
        with open(self.config_file, "w") as f:
            f.write("# written by `dledger demo`: every node of the demo reads it\n"
                    f"mapped_file_size_for_entry_data = {DATA_FILE_SIZE}\n"
                    f"mapped_file_size_for_entry_index = {INDEX_FILE_SIZE}\n"
                    f"heart_beat_time_interval_ms = {heartbeat_ms}\n")
        self.procs: dict[str, subprocess.Popen] = {}
        self._logs: dict[str, object] = {}

    # -- where things are ------------------------------------------------------------------
    def store_dir(self, node_id: str) -> str:
        return os.path.join(self.out_dir, f"dledger-{node_id}")

    def log_file(self, node_id: str) -> str:
        return os.path.join(self.out_dir, f"{node_id}.log")

    @property
    def store_dirs(self) -> list[str]:
        return [self.store_dir(i) for i in IDS]

    def log_tail(self, node_id: str, lines: int = 5) -> str:
        try:
            with open(self.log_file(node_id), errors="replace") as f:
                return "".join(f.readlines()[-lines:]).rstrip()
        except OSError:
            return ""

    # -- lifetime --------------------------------------------------------------------------
    def start(self, node_id: str) -> None:
        """Start (or start again, from its store) node ``node_id``."""
        old = self.procs.get(node_id)
        if old is not None and old.poll() is None:
            raise ClusterError(f"{node_id} is already running (pid {old.pid})")
        env = {k: v for k, v in os.environ.items() if k != "DLEDGER_SECRET"}
        src = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "") if env.get("PYTHONPATH") else src
        log = open(self.log_file(node_id), "ab")
        log.write(f"--- {time.strftime('%H:%M:%S')} dledger demo starts {node_id}\n".encode())
        log.flush()
        self._logs[node_id] = log
        self.procs[node_id] = subprocess.Popen(
            [sys.executable, "-m", "dledger.cli", "node", "--group", GROUP, "--id", node_id, "--peers", self.peers,
             "--store-dir", self.out_dir, "--secret-file", self.secret_file, "--config", self.config_file,
             "--log-level", "INFO"],
            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log,
            # a session of its own: a Ctrl-C in the terminal interrupts the demo, which stops
            # the nodes itself, rather than the nodes too (which it would report as failures)
            start_new_session=True, preexec_fn=_die_with_parent if sys.platform == "linux" else None)

    def start_all(self) -> None:
        for node_id in IDS:
            self.start(node_id)

    def kill(self, node_id: str) -> None:
        """SIGKILL ``node_id`` (no chance to flush or say goodbye) and reap it."""
        proc = self.procs[node_id]
        proc.send_signal(signal.SIGKILL)
        try:
            proc.wait(WAIT_S)
        except subprocess.TimeoutExpired:
            raise ClusterError(f"{node_id} (pid {proc.pid}) survived SIGKILL for {WAIT_S:g} s") from None

    def check_alive(self, except_id: str | None = None) -> None:
        """Raise ``ClusterError`` if a node that should be running has exited."""
        for node_id, proc in self.procs.items():
            if node_id != except_id and proc.poll() is not None:
                raise ClusterError(f"node {node_id} exited with code {proc.returncode}: "
                                   f"{self.log_tail(node_id) or 'no output'} (log: {self.log_file(node_id)})")

    def terminate_all(self) -> dict[str, int | None]:
        """SIGTERM every node and wait (bounded) for it; the exit codes (None: did not stop)."""
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        codes: dict[str, int | None] = {}
        deadline = time.monotonic() + WAIT_S * 2
        for node_id, proc in self.procs.items():
            try:
                codes[node_id] = proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                codes[node_id] = None
        return codes

    def close(self) -> None:
        """Kill and reap whatever still runs; close the log files."""
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
        for proc in self.procs.values():
            try:
                proc.wait(WAIT_S)
            except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL is not refused
                pass
        for log in self._logs.values():
            log.close()

    def __enter__(self) -> "NodeProcesses":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- state, through each node's metadata answer ---------------------------------------
    async def views(self, timeout: float = 2.0) -> dict[str, tuple[str | None, int, int] | None]:
        """Each node's (leader it names, term, last log index) from its metadata answer (None:
        it did not answer)."""
        from dledger.config import parse_peers

        out: dict[str, tuple[str | None, int, int] | None] = {}
        for node_id, addr in parse_peers(self.peers).items():
            conn = NodeConnection(GROUP, "demo-watch", node_id, addr, (self.secret.encode(),))
            try:
                resp = await conn.request(MetadataRequest(group=GROUP, local_id="demo-watch", remote_id=node_id),
                                          timeout)
                ok = resp.code == Code.SUCCESS
                out[node_id] = (resp.leader_id, resp.term, resp.ledger_end_index) if ok else None
            except (NotSent, AnswerLost):
                out[node_id] = None
            finally:
                await conn.close()
        return out

    async def ledger_ends(self, timeout: float = 2.0) -> dict[str, int | None]:
        """Each node's last log index (None: it did not answer)."""
        return {n: (v[2] if v else None) for n, v in (await self.views(timeout)).items()}

    async def wait_formed(self, timeout: float = 30.0) -> str:
        """Poll until all three nodes name the same leader in the same term; that leader."""
        deadline = time.monotonic() + timeout
        while True:
            self.check_alive()
            views = await self.views()
            named = {(v[0], v[1]) for v in views.values() if v is not None}
            if all(v is not None for v in views.values()) and len(named) == 1:
                leader = named.pop()[0]
                if leader is not None:
                    return leader
            if time.monotonic() > deadline:
                raise ClusterError(f"the nodes did not agree on a leader within {timeout:g} s "
                                   f"(leader, term, log end of each: {views})")
            await asyncio.sleep(0.05)

    async def wait_caught_up(self, index: int, timeout: float = 60.0) -> dict[str, int | None]:
        """Poll until every node's log reaches ``index`` or ``timeout`` passes; the last ends seen."""
        deadline = time.monotonic() + timeout
        while True:
            ends = await self.ledger_ends()
            if all(e is not None and e >= index for e in ends.values()) or time.monotonic() >= deadline:
                return ends
            self.check_alive()
            await asyncio.sleep(0.1)
