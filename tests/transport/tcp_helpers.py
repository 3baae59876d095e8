"""Helpers for real-socket tests on 127.0.0.1: free ports, a group of TCP servers, events that
fire when a server's state reaches a condition (checked after every step of its driver, on
the loop's thread), a raw client that speaks the handshake by hand, and a connection on a
socket pair whose small send buffer takes large frames only in part."""

from __future__ import annotations

import asyncio
import socket
import threading

from dledger import DLedgerConfig, DLedgerServer
from dledger.core import Role
from dledger.protocol import Envelope
from dledger.runtime.asyncio_runtime import AsyncioRuntime
from dledger.transport.auth import ClientHandshake, HandshakeError, Peer
from dledger.transport.frames import FrameDecoder, encode_frame, frame_payload
from dledger.transport.loopback import free_ports
from dledger.transport.tcp_connection import Connection, SendQueue, TcpOptions
from helpers.polling import wait_for_followed_leader

WAIT = 10.0




def when(server: DLedgerServer, predicate) -> threading.Event:
    """An event set once ``predicate(server)`` holds (checked now and after every Ready)."""
    event = threading.Event()

    def check(_ready=None) -> None:
        if not event.is_set() and server.node is not None and predicate(server):
            event.set()

    def install() -> None:
        server.driver.ready_listeners.append(check)
        check()

    server.runtime.run_sync(install)
    return event


class TcpGroup:
    """``n`` DLedgerServers of one group over TCP on 127.0.0.1, sharing one event loop thread."""

    def __init__(self, base_dir, n: int = 3, *, group: str = "t", ports=None, runtime=None, **cfg) -> None:
        self.runtime = runtime or AsyncioRuntime()
        self.ports = ports or free_ports(n)
        self.ids = [f"n{k}" for k in range(n)]
        self.peers = ";".join(f"{i}-127.0.0.1:{p}" for i, p in zip(self.ids, self.ports))
        self.group = group
        self.base_dir = str(base_dir)
        self.cfg = cfg
        self.servers: dict[str, DLedgerServer] = {}
        self.leader_elected = threading.Event()
        #: node id -> config fields of that node only
        self.overrides: dict[str, dict] = {}

    def config(self, node_id: str) -> DLedgerConfig:
        opts = dict(store_type="file", mapped_file_size_for_entry_data=1 << 22,
                    mapped_file_size_for_entry_index=32 * 65536)
        opts.update(self.cfg)
        opts.update(self.overrides.get(node_id, {}))
        return DLedgerConfig(group=self.group, self_id=node_id, peers=self.peers,
                             store_base_dir=f"{self.base_dir}/{self.group}", **opts)

    def start(self, node_id: str) -> DLedgerServer:
        s = DLedgerServer(self.config(node_id), runtime=self.runtime)
        s.add_role_change_handler(lambda ch: ch.role is Role.LEADER and self.leader_elected.set())
        self.servers[node_id] = s
        return s.startup()

    def start_all(self) -> "TcpGroup":
        for node_id in self.ids:
            self.start(node_id)
        return self

    def leader(self, timeout: float = WAIT) -> DLedgerServer:
        assert self.leader_elected.wait(timeout), "no leader elected"
        leaders = [s for s in self.servers.values() if s.started and s.is_leader]
        assert leaders, "the leader stepped down"
        return max(leaders, key=lambda s: s.node.term)

    def followed_leader(self, timeout: float = WAIT) -> DLedgerServer:
        """The leader once every started member follows it: a node that recovers just after the
        first election may still stand in the next term and depose it (a test that then stops
        the others must hold the leader that stays)."""
        self.leader(timeout)
        return wait_for_followed_leader([s for s in self.servers.values() if s.started], timeout)

    def stop_all(self, close_runtime: bool = True) -> None:
        for s in self.servers.values():
            s.shutdown()
        if close_runtime:
            self.runtime.close()


# -- a raw client: the handshake by hand, then whatever bytes a test wants to send ---------------
async def raw_connect(port: int, peer: Peer, keys=(), *, hello: bytes | None = None,
                      proof: bytes | None = None):
    """Open a connection and run the client side of the handshake (or send a recorded
    ``hello``/``proof``). Returns ``(reader, writer, hello, proof)``; the handshake may still be
    refused by the server after the proof (it closes the connection)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    hs = ClientHandshake(peer, keys)
    hello = hello if hello is not None else hs.hello()
    writer.write(frame_payload(hello))
    decoder = FrameDecoder()
    challenge = None
    while challenge is None:
        data = await asyncio.wait_for(reader.read(4096), WAIT)
        if not data:
            raise ConnectionError("closed before the challenge")
        got = decoder.feed_payloads(data, limit=1)
        challenge = got[0] if got else None
    if proof is None:
        try:
            proof = hs.on_challenge(challenge)
        except HandshakeError:
            proof = b"\x92\xa5proof\xc4\x20" + bytes(32)     # a forged proof: ["proof", 32 zero bytes]
    writer.write(frame_payload(proof))
    await writer.drain()
    return reader, writer, hello, proof


async def closed_by_peer(reader: asyncio.StreamReader, timeout: float = WAIT) -> bool:
    """Whether the server closes the connection (EOF or reset) within ``timeout``; bytes it sends
    first (keepalives) are read and ignored."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    try:
        while True:
            data = await asyncio.wait_for(reader.read(4096), max(0.0, deadline - loop.time()))
            if not data:
                return True
    except asyncio.TimeoutError:          # (a subclass of OSError: caught first)
        return False
    except (ConnectionError, OSError):
        return True


def envelope_frame(env: Envelope) -> bytes:
    return encode_frame(env)


async def small_buffer_connection(**kwargs) -> tuple[Connection, asyncio.StreamReader, asyncio.StreamWriter]:
    """A ``Connection`` on one end of a socket pair whose send buffer holds 16 KiB (a large frame
    is taken in part), and the stream reader and writer of the other end. ``kwargs`` go to the
    ``Connection`` (``batch=``)."""
    a, b = socket.socketpair()
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16 * 1024)
    reader, writer = await asyncio.open_connection(sock=a)
    peer_reader, peer_writer = await asyncio.open_connection(sock=b)
    conn = Connection(reader, writer, FrameDecoder(), SendQueue(64, 1 << 26), TcpOptions(), "t", lambda e: None,
                      **kwargs)
    return conn, peer_reader, peer_writer


async def read_envelopes(reader: asyncio.StreamReader, n: int) -> list[Envelope]:
    """The next ``n`` envelopes read from ``reader`` (each read bounded by ``WAIT``)."""
    decoder, got = FrameDecoder(), []
    while len(got) < n:
        data = await asyncio.wait_for(reader.read(1 << 20), WAIT)
        assert data, "the connection closed"
        got.extend(decoder.feed(data))
    return got
