"""``dledger node`` processes on loopback for the multi-process fault tests.

``NodeProcesses(tmp_path)`` writes one TOML file per node (every group of ``groups``, a 1.5 s
election timeout as docs/operations.md advises for a loaded machine, small segments) and a
secret file; ``start``/``kill`` (SIGKILL)/``stop`` (SIGTERM) run and end a node's process, on
the same port every time. With ``proxied=True`` every directed link between two nodes goes
through its own ``helpers.tcp_proxy.TcpProxy`` (``proxy(src, dst)``): each node's peers string
names its own real address and the proxies towards the others, so a test can cut one link.

Clients and ``metadata`` talk to the nodes' real ports directly. Every wait polls a condition
with a deadline (``wait_for``); nothing sleeps a fixed time to synchronise.
"""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import time

from dledger import DLedgerClient
from dledger.errors import DLedgerError

from helpers.tcp_proxy import TcpProxy
from transport.tcp_helpers import free_ports

SRC = pathlib.Path(__file__).resolve().parents[2] / "src"
SECRET = "a-process-test-secret-0123456789"
#: every wait on a child or a condition is bounded by this many seconds
TIMEOUT = 60
TIMING = ("heart_beat_time_interval_ms = 500\nmapped_file_size_for_entry_data = 4194304\n"
          "mapped_file_size_for_entry_index = 2097152\n")


def wait_for(predicate, what: str, timeout: float = 30.0, poll: float = 0.05):
    """Poll ``predicate`` until it returns a true value (returned) or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(poll)


class NodeProcesses:
    def __init__(self, tmp_path: pathlib.Path, n: int = 3, groups=("g",), proxied: bool = False) -> None:
        self.dir = tmp_path
        self.ids = [f"n{k}" for k in range(n)]
        self.groups = list(groups)
        self.ports = dict(zip(self.ids, free_ports(n)))
        self.addr = {i: f"127.0.0.1:{p}" for i, p in self.ports.items()}
        self.peers = ";".join(f"{i}-{a}" for i, a in self.addr.items())
        self.proxies: dict[tuple[str, str], TcpProxy] = {}
        if proxied:
            for a in self.ids:
                for b in self.ids:
                    if a != b:
                        self.proxies[(a, b)] = TcpProxy(self.ports[b])
        self.secret_file = tmp_path / "secret"
        self.secret_file.write_text(SECRET + "\n")
        self.env = {k: v for k, v in os.environ.items() if k != "DLEDGER_SECRET"}
        self.env["PYTHONPATH"] = str(SRC)
        self.procs: dict[str, subprocess.Popen] = {}
        self.starts = {i: 0 for i in self.ids}

    def peers_of(self, node_id: str) -> str:
        """The peers string ``node_id`` runs with (through the proxies when proxied)."""
        if not self.proxies:
            return self.peers
        return ";".join(f"{i}-{self.addr[i]}" if i == node_id else f"{i}-127.0.0.1:{self.proxies[(node_id, i)].port}"
                        for i in self.ids)

    def store_dir(self, group: str) -> pathlib.Path:
        """The group's stores: ``<it>/dledger-<id>`` for each node."""
        return self.dir / "stores" / group

    def proxy(self, src: str, dst: str) -> TcpProxy:
        return self.proxies[(src, dst)]

    # -- processes ------------------------------------------------------------------------
    def start(self, node_id: str, secret_file: pathlib.Path | None = None) -> None:
        conf = self.dir / f"{node_id}.toml"
        groups = "".join(f'[[groups]]\ngroup = "{g}"\nstore_dir = "{self.store_dir(g)}"\n' for g in self.groups)
        conf.write_text(f'{TIMING}id = "{node_id}"\npeers = "{self.peers_of(node_id)}"\n{groups}')
        self.starts[node_id] += 1
        log = open(self.dir / f"{node_id}.{self.starts[node_id]}.log", "wb")
        self.procs[node_id] = subprocess.Popen(
            [sys.executable, "-m", "dledger.cli", "node", "--config", str(conf), "--log-level", "WARNING",
             "--secret-file", str(secret_file or self.secret_file)],
            env=self.env, stdout=subprocess.DEVNULL, stderr=log)
        log.close()

    def start_all(self) -> "NodeProcesses":
        for i in self.ids:
            self.start(i)
        return self

    def kill(self, node_id: str) -> None:
        p = self.procs[node_id]
        p.send_signal(signal.SIGKILL)
        p.wait(TIMEOUT)

    def stop(self, node_id: str) -> int:
        p = self.procs[node_id]
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
        return p.wait(TIMEOUT)

    def log(self, node_id: str) -> str:
        return (self.dir / f"{node_id}.{self.starts[node_id]}.log").read_text(errors="replace")

    def close(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.kill()
                p.wait(TIMEOUT)
        for proxy in self.proxies.values():
            proxy.close()

    # -- clients ---------------------------------------------------------------------------
    def client(self, nodes=None, group: str = "g", timeout: float = 10.0, secret_file=None) -> DLedgerClient:
        peers = ";".join(f"{i}-{self.addr[i]}" for i in (nodes or self.ids))
        return DLedgerClient(peers, group, timeout_s=timeout, secret_file=str(secret_file or self.secret_file))

    def metadata(self, node_id: str, group: str = "g", secret_file=None) -> dict | None:
        """What ``node_id`` says about itself (role, term, ledger end, commit index), or None
        when it does not answer within a second."""
        try:
            with self.client([node_id], group, timeout=1.0, secret_file=secret_file) as c:
                return c.node_metadata(node_id)
        except (DLedgerError, OSError):
            return None

    def leader(self, nodes=None, group: str = "g", timeout: float = 30.0) -> str:
        """The node that says it leads (among ``nodes``), once one does."""
        def find():
            for i in nodes or self.ids:
                m = self.metadata(i, group)
                if m is not None and m["role"] == "LEADER":
                    return i
            return None
        return wait_for(find, f"a leader among {nodes or self.ids} of group {group}", timeout)


__all__ = ["NodeProcesses", "SECRET", "TIMEOUT", "wait_for"]
