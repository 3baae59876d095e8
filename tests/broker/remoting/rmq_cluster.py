"""Three ``dledger broker`` processes serving RocketMQ's remoting protocol, and a ``dledger
namesrv``, on loopback, for the real-client tests (small segments: no gigabyte files; another
``config``, a TOML text of DLedgerConfig keys, for a test that needs other settings)."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import struct
import subprocess
import sys
import time

from dledger.broker import decode
from dledger.broker.remoting import codes
from dledger.transport.loopback import free_ports

from broker.remoting.remoting_client import RemotingClient

ROOT = pathlib.Path(__file__).resolve().parents[3]
CONFIG = """mapped_file_size_for_entry_data = 4194304
mapped_file_size_for_entry_index = 2097152
heart_beat_time_interval_ms = 500
bootstrap = true
"""
IDS = ("n0", "n1", "n2")


class Cluster:
    def __init__(self, base: pathlib.Path, config: str = CONFIG) -> None:
        self.base = base
        ports = free_ports(10)
        self.namesrv = f"127.0.0.1:{ports[0]}"
        self.peers = ";".join(f"{i}-127.0.0.1:{p}" for i, p in zip(IDS, ports[1:4]))
        self.brokers = ";".join(f"{i}-127.0.0.1:{p}" for i, p in zip(IDS, ports[4:7]))
        self.remoting = {i: f"127.0.0.1:{p}" for i, p in zip(IDS, ports[7:10])}
        self.procs: dict[str, subprocess.Popen] = {}
        self.env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
        (base / "broker.toml").write_text(config)

    def _spawn(self, name: str, argv: list[str]) -> None:
        with open(self.base / f"{name}.log", "ab") as log:
            self.procs[name] = subprocess.Popen([sys.executable, "-m", "dledger.cli", *argv], env=self.env,
                                                stdout=log, stderr=subprocess.STDOUT)

    def start(self) -> "Cluster":
        self._spawn("namesrv", ["namesrv", "--port", self.namesrv.rpartition(":")[2]])
        for node in IDS:
            self.start_broker(node)
        return self

    def start_broker(self, node: str, *, register: bool = True) -> None:
        self._spawn(node, ["broker", "--config", str(self.base / "broker.toml"), "--group", "broker-a",
                           "--id", node, "--peers", self.peers, "--brokers", self.brokers,
                           "--store-dir", str(self.base), "--remoting-port", self.remoting[node].rpartition(":")[2],
                           *(["--namesrv", self.namesrv] if register else []), "--log-level", "WARNING"])

    def route(self, address: str, topic: str = "TBW102") -> dict | None:
        try:
            with RemotingClient(address, timeout=5) as c:
                answer = c.call(codes.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
        except OSError:
            return None
        return json.loads(answer.body) if answer.code == codes.SUCCESS else None

    def master(self, via: str | None = None, timeout: float = 60.0) -> str:
        """The node whose broker the name server (or ``via``) names as master, once it does."""
        deadline = time.monotonic() + timeout
        while True:
            route = self.route(via or self.namesrv)
            addr = route and route["brokerDatas"][0]["brokerAddrs"].get("0")
            if addr:
                return next(n for n, a in self.remoting.items() if a == addr)
            assert time.monotonic() < deadline, "no master registered in time"
            time.sleep(0.1)

    def wait_dispatched(self, node: str, counts: dict[str, int], timeout: float = 30.0) -> None:
        """Until ``node``'s queues of each topic hold ``counts[topic]`` messages in all (a put is
        answered once committed; dispatch to the consume queues follows a moment later)."""
        deadline = time.monotonic() + timeout
        with RemotingClient(self.remoting[node]) as c:
            while True:
                held = {t: sum(int(c.call(codes.GET_MAX_OFFSET, {"topic": t, "queueId": q}).ext["offset"])
                               for q in range(4)) for t in counts}
                if held == counts:
                    return
                assert time.monotonic() < deadline, f"{node} dispatched {held}, not {counts}"
                time.sleep(0.05)

    def queue_ends(self, node: str, topic: str, queues: int = 4) -> list[int]:
        """``node``'s GET_MAX_OFFSET of each queue of ``topic``."""
        with RemotingClient(self.remoting[node]) as c:
            return [int(c.call(codes.GET_MAX_OFFSET, {"topic": topic, "queueId": q}).ext["offset"])
                    for q in range(queues)]

    def wait_caught_up(self, node: str, topic: str, ends: list[int], timeout: float) -> None:
        """Until ``node`` (restarted) answers GET_MAX_OFFSET with ``ends`` for every queue."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                held = self.queue_ends(node, topic, len(ends))
            except OSError:                 # not serving yet
                held = None
            if held == ends:
                return
            assert time.monotonic() < deadline, f"{node} holds {held}, not {ends}"
            time.sleep(0.2)

    def pull_bodies(self, node: str, topic: str, ends: list[int]) -> list[bytes]:
        """Every message body of ``topic``'s queues, pulled from ``node`` itself (PULL_MESSAGE)."""
        bodies = []
        with RemotingClient(self.remoting[node]) as c:
            for q, end in enumerate(ends):
                offset = 0
                while offset < end:
                    r = c.call(codes.PULL_MESSAGE, {"consumerGroup": "catch-up", "topic": topic, "queueId": q,
                                                    "queueOffset": offset, "maxMsgNums": 32, "sysFlag": 0})
                    assert r.code == codes.SUCCESS, (node, q, offset, r.code, r.remark)
                    bodies += [decode(m).body for m in split_messages(r.body)]
                    offset = int(r.ext["nextBeginOffset"])
        return bodies

    def stop(self) -> dict[str, int | None]:
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        codes_ = {}
        for name, p in self.procs.items():
            try:
                codes_[name] = p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                codes_[name] = p.wait(10)
        return codes_


def split_messages(body: bytes) -> list[bytes]:
    """A PULL_MESSAGE body cut into its stored messages (each begins with its size)."""
    out, off = [], 0
    while off < len(body):
        size = struct.unpack_from(">i", body, off)[0]
        out.append(body[off:off + size])
        off += size
    return out


def run_client(python: str, env: dict, *args, timeout: float = 300) -> list[dict]:
    """Run ``rmq_client.py`` to its end; its JSON lines."""
    script = pathlib.Path(__file__).with_name("rmq_client.py")
    r = subprocess.run([python, str(script), *map(str, args)], env=env, capture_output=True, timeout=timeout)
    assert r.returncode == 0, (args, r.stdout.decode()[-2000:], r.stderr.decode()[-2000:])
    return [json.loads(line) for line in r.stdout.decode().splitlines() if line.startswith("{")]
