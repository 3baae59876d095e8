"""TCP transport: one listening port per address, many Raft groups on it, asyncio streams.

``TcpNetwork.for_address(host, port, loop, ...)`` is the process's network on one listening
address (one per address, shared by every group whose node listens there: multi-raft, as
DLedger's proxy). ``network.endpoint(group, node_id, peers)`` registers a node and returns its
``TcpTransport``, which implements ``transport.Transport``.

Connections (each one carries one direction of one link, so routing never looks inside):
- a node opens one outgoing connection per peer it sends to, lazily, for its group; the
  handshake (``transport.auth``) names group, sender and receiver and, with a secret, proves
  both sides know it. The listener routes the connection to the endpoint ``(group, receiver)``
  and refuses groups and ids it does not serve, and senders that are not the group's peers;
- every envelope on a connection must come from its sender and be addressed to its receiver,
  else the connection is closed (an authenticated peer cannot speak for another);
- a request of another wire version (``protocol.UnsupportedVersion``) is answered UNSUPPORTED
  (a client's on its own connection, a member's over this node's link to it), then the
  connection closes like one with any bad frame;
- a lost connection is re-opened with jittered exponential backoff (``backoff_min_ms`` doubled
  up to ``backoff_max_ms``, each delay drawn from its upper half), so a peer restarted on the
  same port is reached again within a backoff step; frames wait meanwhile in the link's bounded
  queue (``tcp_connection.SendQueue``, oldest dropped first), and a failed attempt drops what
  waited for it (a peer that comes back gets fresh messages, not a stale backlog);
- the listener keeps at most ``max_connections`` inbound connections (more are closed at
  accept), and an unfinished handshake is closed after ``handshake_timeout_ms``;
- a connection the listener refuses before its challenge (a group, node or sender it does not
  serve, too many connections) is told why in a refusal frame (``transport.auth``) before it
  closes, so the other side can say it. A TLS listener tells TLS connections from plain ones
  by their first byte (``tcp_accept``) and refuses a plain one saying that it accepts TLS
  only. A plain listener answers a TLS ClientHello (whose first byte no frame can start with)
  with a refusal too, which the TLS client reads as a protocol error: not TLS.
An envelope addressed to the node itself is delivered on the loop without a socket.

Client connections (``kind`` ``client`` in the handshake, authenticated with the same secret)
come from applications (``dledger.client``), not from members: the client's id may not be a
member's id, the connection carries both directions (requests in, their answers back on the
same connection, under the client's id), and it may carry only client requests (append, batch
append, get, metadata, and a leadership transfer the receiving node is asked to make). Anything
else closes it: a client cannot vote, push entries or speak for a member. A client that
reconnects under the same id replaces its older connection.

All of it runs on the loop of the runtime that owns the servers; ``send`` must be called
from that loop's thread (the driver always is). Nothing here looks inside a message except
to keep a client connection to client requests.
"""

from __future__ import annotations

import asyncio
import logging
import random
import socket
import ssl
import threading
from typing import Sequence

from dledger.protocol import (AppendEntryRequest, BatchAppendEntryRequest, Envelope, FrameError,
                              GetEntriesRequest, LeadershipTransferRequest, MembershipRequest, MetadataRequest,
                              UnsupportedVersion)
from dledger.transport import EndpointInUseError, Receiver

#: a refused connection is logged once per this many seconds per reason
REFUSAL_LOG_INTERVAL_S = 60.0
from dledger.transport.auth import CLIENT, ClientHandshake, HandshakeError, Peer, ServerHandshake, refusal
from dledger.transport.frames import FrameDecoder, encode_frame, encode_frame_parts, frame_payload
from dledger.transport.tcp_accept import TLS_HANDSHAKE_RECORD, TlsOrPlainAcceptor
from dledger.transport.tcp_connection import (Connection, ProtocolViolation, SendQueue, TcpOptions, WriteBatch,
                                              read_payload)

log = logging.getLogger(__name__)

_HANDSHAKE_ERRORS = (HandshakeError, FrameError, EOFError, ConnectionError, OSError, asyncio.TimeoutError,
                     ssl.SSLError)


#: what a client connection may carry (a membership change too: ``dledger member``, answered by
#: the leader once its configuration entry commits)
CLIENT_REQUESTS = (AppendEntryRequest, BatchAppendEntryRequest, GetEntriesRequest, MetadataRequest,
                   LeadershipTransferRequest, MembershipRequest)
MAX_CLIENT_ID = 128


def client_may_send(env: Envelope) -> str | None:
    """Why a client connection may not carry ``env`` (None when it may): only requests of the
    client kinds, and a leadership transfer only as a request to the receiving node to hand its
    own leadership to another member (the member-to-member leg is for members only)."""
    msg = env.msg
    if env.is_response or not isinstance(msg, CLIENT_REQUESTS):
        return f"a client may not send {'a response' if env.is_response else type(msg).__name__}"
    if isinstance(msg, LeadershipTransferRequest) and (msg.transfer_id != env.dst or msg.transferee_id == env.dst):
        return "a client may only ask the receiving node to hand its leadership to another member"
    return None


def split_host_port(addr: str) -> tuple[str, int]:
    host, _sep, port = addr.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port)


class TcpNetwork:
    """The listener on one address and the endpoints registered on it."""

    _networks: dict[tuple[str, int], "TcpNetwork"] = {}
    _ids: dict[tuple[str, str], "TcpTransport"] = {}
    _registry_lock = threading.Lock()

    def __init__(self, host: str, port: int, loop: asyncio.AbstractEventLoop, *, keys: Sequence[bytes] = (),
                 server_ssl: ssl.SSLContext | None = None, client_ssl: ssl.SSLContext | None = None,
                 options: TcpOptions | None = None, rng: random.Random | None = None) -> None:
        self.host, self.port = host, port
        self.loop = loop
        self.keys = tuple(keys)
        self.server_ssl, self.client_ssl = server_ssl, client_ssl
        self.options = (options or TcpOptions()).validate()
        self.rng = rng or random.Random()
        self.endpoints: dict[tuple[str, str], TcpTransport] = {}
        self.inbound: set[Connection] = set()
        #: frames queued while an input is handled leave together after it (``WriteBatch``)
        self.writes = WriteBatch(loop)
        self._pending: set[asyncio.StreamWriter] = set()      # accepted, handshake not done
        self._server: asyncio.AbstractServer | None = None
        self._acceptor: TlsOrPlainAcceptor | None = None        # a TLS listener's accept loop
        self._sock: socket.socket | None = None
        self._serve_task: asyncio.Task | None = None
        self.closed = False
        #: ``callback(peer, reason)`` for every authenticated inbound connection that ends
        self.on_connection_closed: list = []
        #: what happened on this listener, for operators and tests
        #: when each refusal was last logged (``_serve_connection``)
        self._refusals_logged: dict[str, float] = {}
        self.stats = {"accepted": 0, "refused_cap": 0, "handshake_failed": 0, "bad_frame": 0,
                      "authenticated": 0, "client_refused": 0, "unsupported_version": 0}

    # -- the process-wide registry ---------------------------------------------------------
    @classmethod
    def for_address(cls, host: str, port: int, loop: asyncio.AbstractEventLoop, **kwargs) -> "TcpNetwork":
        """The network listening on ``host:port`` in this process, started on first use. A
        second caller must pass the same loop and the same keys."""
        with cls._registry_lock:
            net = cls._networks.get((host, port))
            if net is not None and not net.closed:
                if net.loop is not loop:
                    raise ValueError(f"{host}:{port} is served by another event loop in this process")
                if tuple(kwargs.get("keys", ())) != net.keys:
                    raise ValueError(f"{host}:{port} is served with another secret in this process")
                return net
            net = cls(host, port, loop, **kwargs)
            net.listen()
            cls._networks[(host, net.port)] = net
            return net

    def listen(self) -> None:
        """Bind now (so an address in use fails here, in the caller), accept on the loop."""
        infos = socket.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, _type, _proto, _canon, sockaddr = infos[0]
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(sockaddr)
            sock.listen(128)
            sock.setblocking(False)
        except OSError:
            sock.close()
            raise
        self._sock = sock
        self.port = sock.getsockname()[1]

        async def serve() -> None:
            if self.closed:
                return
            if self.server_ssl is None:
                self._server = await asyncio.start_server(self._on_accept, sock=sock)
            else:
                self._acceptor = TlsOrPlainAcceptor(
                    sock, self.loop, self.server_ssl, self._on_accept, handshake_s=self._handshake_s,
                    has_room=self._has_room, stats=self.stats, name=f"{self.host}:{self.port}")
                self._acceptor.start()

        self._serve_task = self.loop.create_task(serve()) if self._in_loop() else None
        if self._serve_task is None:
            fut = asyncio.run_coroutine_threadsafe(serve(), self.loop)
            fut.result(timeout=10)

    def _has_room(self) -> bool:
        waiting = len(self._acceptor.waiting) if self._acceptor is not None else 0
        return len(self.inbound) + len(self._pending) + waiting < self.options.max_connections

    def _in_loop(self) -> bool:
        try:
            return asyncio.get_running_loop() is self.loop
        except RuntimeError:
            return False

    @property
    def _handshake_s(self) -> float:
        return self.options.handshake_timeout_ms / 1000

    def endpoint(self, group: str, node_id: str, peers: dict[str, str]) -> "TcpTransport":
        """Register node ``node_id`` of ``group`` (peers: id -> "host:port", itself included)."""
        with self._registry_lock:
            if (group, node_id) in self._ids:
                raise EndpointInUseError(f"node {node_id!r} of group {group!r} is already running in this process")
            ep = TcpTransport(self, group, node_id, peers)    # (its own: members added later are dialled)
            self._ids[(group, node_id)] = ep
            self.endpoints[(group, node_id)] = ep
        return ep

    def _remove(self, ep: "TcpTransport") -> None:
        with self._registry_lock:
            if self._ids.get((ep.group, ep.node_id)) is ep:
                del self._ids[(ep.group, ep.node_id)]
            if self.endpoints.get((ep.group, ep.node_id)) is ep:
                del self.endpoints[(ep.group, ep.node_id)]
        for conn in list(self.inbound):
            if (conn.peer.group, conn.peer.dst) == (ep.group, ep.node_id):
                conn.close("the endpoint closed")
        self._remove_if_unused()

    def _remove_if_unused(self) -> None:
        """Close the network once no endpoint is left on it (the port is free again)."""
        with self._registry_lock:
            if self.endpoints:
                return
            if self._networks.get((self.host, self.port)) is self:
                del self._networks[(self.host, self.port)]
        self.close()

    def close(self) -> None:
        """Stop listening and close every connection (on the loop's thread)."""
        if self.closed:
            return
        self.closed = True
        if self._server is not None:
            self._server.close()
        elif self._serve_task is not None:
            self._serve_task.cancel()
        if self._acceptor is not None:
            self._acceptor.close()
        if self._sock is not None:
            self._sock.close()
        for conn in list(self.inbound):
            conn.close("the listener closed")
        for writer in list(self._pending):
            writer.close()

    # -- inbound ---------------------------------------------------------------------------
    def _accept_peer(self, peer: Peer) -> str | None:
        ep = self.endpoints.get((peer.group, peer.dst))
        if ep is None or ep.closed:
            return f"no node {peer.dst!r} of group {peer.group!r} here"
        if peer.kind == CLIENT:
            if peer.src in ep.peers:
                return f"a client may not use the member id {peer.src!r}"
            if not peer.src or len(peer.src) > MAX_CLIENT_ID or not peer.src.isprintable() or " " in peer.src:
                return f"bad client id {peer.src[:MAX_CLIENT_ID]!r}"
            return None
        if peer.src not in ep.peers or peer.src == peer.dst:
            return f"{peer.src!r} is not a peer of {peer.dst!r} in group {peer.group!r}"
        return None

    async def _on_accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await self._serve_connection(reader, writer)
        except asyncio.CancelledError:       # the loop is shutting down: end quietly
            writer.close()

    async def _serve_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        o = self.options
        if self.closed or len(self.inbound) + len(self._pending) >= o.max_connections:
            self.stats["refused_cap"] += 1
            if not self.closed:
                self._refuse(writer, f"this node has too many connections ({o.max_connections})")
            writer.close()
            return
        self.stats["accepted"] += 1
        self._pending.add(writer)
        decoder = FrameDecoder(o.max_frame_bytes)
        try:
            async with asyncio.timeout(self._handshake_s):
                peer = await self._server_handshake(reader, writer, decoder)
        except _HANDSHAKE_ERRORS as exc:
            self.stats["handshake_failed"] += 1
            why = str(exc) or type(exc).__name__
            now = self.loop.time()
            # the same refusal (a node that joins and is not a member yet, which asks every
            # heartbeat interval) is logged once a minute; ``stats`` counts them all
            if now - self._refusals_logged.get(why, -REFUSAL_LOG_INTERVAL_S) >= REFUSAL_LOG_INTERVAL_S:
                if len(self._refusals_logged) > 256:
                    self._refusals_logged.clear()
                self._refusals_logged[why] = now
                log.warning("%s:%d: refused a connection from %s: %s (said once a minute)", self.host, self.port,
                            writer.get_extra_info("peername"), why)
            writer.close()
            return
        finally:
            self._pending.discard(writer)
        if self.closed or self._accept_peer(peer) is not None:
            writer.close()
            return
        self.stats["authenticated"] += 1
        name = f"{peer.group}/{peer.src}->{peer.dst}"
        ep = self.endpoints[(peer.group, peer.dst)]
        if peer.kind == CLIENT:
            # answers go back on this connection
            queue = SendQueue(o.max_queue_frames, o.max_queue_bytes)
            conn = Connection(reader, writer, decoder, queue, o, name, lambda env: self._deliver_client(peer, env),
                              lambda exc: self._unsupported(conn, peer, exc), self.writes, answers_client=True)
            old = ep.clients.get(peer.src)
            ep.clients[peer.src] = conn
            if old is not None:
                old.close("the client connected again")
        else:
            queue = SendQueue(1, 1 << 10)       # this side sends keepalives only
            conn = Connection(reader, writer, decoder, queue, o, name, lambda env: self._deliver(peer, env),
                              lambda exc: self._unsupported(conn, peer, exc), self.writes)
        conn.peer = peer
        self.inbound.add(conn)
        reason = "cancelled"
        try:
            reason = await conn.run()
            if reason.startswith("bad frame"):
                self.stats["bad_frame"] += 1
        finally:
            self.inbound.discard(conn)
            if ep.clients.get(peer.src) is conn:
                del ep.clients[peer.src]
            for callback in self.on_connection_closed:
                callback(peer, reason)

    async def _server_handshake(self, reader, writer, decoder) -> Peer:
        hs = ServerHandshake(self.keys, accept=self._accept_peer)
        chunk = self.options.read_chunk
        first = await reader.read(1)
        if not first:
            raise EOFError("the peer closed the connection")
        decoder.feed_payloads(first)                 # kept: the first byte of the hello's length
        if first == TLS_HANDSHAKE_RECORD and self.server_ssl is None:
            self._refuse(writer, "this node does not use TLS")
            raise HandshakeError("a TLS handshake: this listener does not use TLS")
        hello = await read_payload(reader, decoder, chunk)
        if self.server_ssl is not None and writer.get_extra_info("ssl_object") is None:
            self._refuse(writer, "this node accepts TLS connections only: connect over TLS with a certificate "
                                 "its cluster's CA signed")
            raise HandshakeError("a plain connection: this listener accepts TLS only")
        try:
            challenge = hs.on_hello(hello)
        except HandshakeError as exc:
            self._refuse(writer, str(exc))
            raise
        writer.write(frame_payload(challenge))
        await writer.drain()
        return hs.on_proof(await read_payload(reader, decoder, chunk))

    @staticmethod
    def _refuse(writer: asyncio.StreamWriter, reason: str) -> None:
        """Tell the connecting side why it is refused (written before the connection closes;
        a peer that is already gone is not told)."""
        try:
            writer.write(frame_payload(refusal(reason)))
        except (ConnectionError, OSError, RuntimeError):
            pass

    def _unsupported(self, conn: Connection, peer: Peer, exc: UnsupportedVersion) -> None:
        """Answer a request of another wire version UNSUPPORTED: a client on its own
        connection (written before it closes), a member over this node's link to it."""
        answer = exc.answer
        self.stats["unsupported_version"] += 1
        if answer.src != peer.dst or answer.dst != peer.src:
            return                              # it spoke for another node: no answer
        if peer.kind == CLIENT:
            try:
                conn.write_last(encode_frame(answer, self.options.max_frame_bytes))
            except (ConnectionError, OSError, RuntimeError):
                pass
            return
        ep = self.endpoints.get((peer.group, peer.dst))
        if ep is not None:
            ep.send(answer)

    def _deliver(self, peer: Peer, env: Envelope) -> None:
        if env.src != peer.src or env.dst != peer.dst:
            raise ProtocolViolation(f"{peer.src}->{peer.dst} carried an envelope {env.src}->{env.dst}")
        ep = self.endpoints.get((peer.group, peer.dst))
        if ep is not None:
            ep._deliver(env)

    def _deliver_client(self, peer: Peer, env: Envelope) -> None:
        if env.src != peer.src or env.dst != peer.dst:
            raise ProtocolViolation(f"client {peer.src}->{peer.dst} carried an envelope {env.src}->{env.dst}")
        refusal = client_may_send(env)
        if refusal is not None:
            self.stats["client_refused"] += 1
            raise ProtocolViolation(f"client {peer.src}: {refusal}")
        self._deliver(peer, env)


class PeerLink:
    """The outgoing side of one link: a bounded queue, and a task that keeps a connection."""

    def __init__(self, ep: "TcpTransport", dst: str, addr: str) -> None:
        self.ep = ep
        self.dst = dst
        self.host, self.port = split_host_port(addr)
        o = ep.network.options
        self.queue = SendQueue(o.max_queue_frames, o.max_queue_bytes)
        self.conn: Connection | None = None
        self.task: asyncio.Task | None = None
        self.connects = 0
        self.failures = 0
        #: ``callback(exc)`` after every failed connection attempt (for operators and tests)
        self.on_failure: list = []
        self.closed = False

    def send(self, frame, size: int | None = None) -> None:
        self.queue.put(frame, size)
        if self.task is None:
            self.task = self.ep.network.loop.create_task(self._run())

    def close(self) -> None:
        self.closed = True
        self.queue.clear()
        if self.conn is not None:
            self.conn.close("the endpoint closed")
        if self.task is not None:
            self.task.cancel()

    async def _run(self) -> None:
        net = self.ep.network
        o = net.options
        attempt = 0
        name = f"{self.ep.group}/{self.ep.node_id}->{self.dst}"
        while not self.closed:
            try:
                conn = await self._connect(name)
            except _HANDSHAKE_ERRORS as exc:
                self.failures += 1
                # the peer is unreachable: what waited for this attempt is dropped (counted), so
                # a peer that comes back gets fresh messages, not a backlog of stale ones
                self.queue.dropped += len(self.queue.frames)
                self.queue.clear()
                log.debug("%s: cannot connect to %s:%d: %r", name, self.host, self.port, exc)
                for callback in self.on_failure:
                    callback(exc)
            else:
                self.connects += 1
                attempt = 0
                self.conn = conn
                reason = await conn.run()
                self.conn = None
                log.info("%s: connection lost (%s); reconnecting", name, reason)
            if self.closed:
                return
            delay = min(o.backoff_max_ms, o.backoff_min_ms << min(attempt, 20))
            attempt += 1
            await asyncio.sleep((delay / 2 + net.rng.random() * delay / 2) / 1000)

    async def _connect(self, name: str) -> Connection:
        net, ep = self.ep.network, self.ep
        o = net.options
        async with asyncio.timeout(o.connect_timeout_ms / 1000):
            reader, writer = await asyncio.open_connection(self.host, self.port, ssl=net.client_ssl,
                                                           limit=o.read_chunk * 2)
        try:
            sock = writer.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            decoder = FrameDecoder(o.max_frame_bytes)
            hs = ClientHandshake(Peer(ep.group, ep.node_id, self.dst), net.keys)

            async def handshake() -> None:
                writer.write(frame_payload(hs.hello()))
                challenge = await read_payload(reader, decoder, o.read_chunk)
                writer.write(frame_payload(hs.on_challenge(challenge)))
                await writer.drain()

            async with asyncio.timeout(o.handshake_timeout_ms / 1000):
                await handshake()
        except BaseException:
            writer.close()
            raise
        return Connection(reader, writer, decoder, self.queue, o, name, self._unexpected, batch=net.writes)

    def _unexpected(self, env: Envelope) -> None:
        raise ProtocolViolation(f"the listener of {self.dst} sent an envelope on an outgoing connection")


class TcpTransport:
    """One node's endpoint on a ``TcpNetwork``; implements ``transport.Transport``."""

    def __init__(self, network: TcpNetwork, group: str, node_id: str, peers: dict[str, str]) -> None:
        self.network = network
        self.group = group
        self.node_id = node_id
        self.peers = peers
        self.receiver: Receiver | None = None
        self.links: dict[str, PeerLink] = {}
        #: client id -> its connection (answers to a client go back on it)
        self.clients: dict[str, Connection] = {}
        self.closed = False
        self.unsendable = 0           # envelopes refused locally: unknown peer or over the frame limit

    def set_receiver(self, receiver: Receiver) -> None:
        self.receiver = receiver

    def send(self, envelope: Envelope) -> None:
        if self.closed:
            return
        dst = envelope.dst
        if dst == self.node_id:
            self.network.loop.call_soon(self._deliver, envelope)
            return
        link = self.links.get(dst)
        client = None
        if link is None:
            addr = self.peers.get(dst)
            if addr is None:
                client = self.clients.get(dst)
                if client is None or client.closed:
                    self.unsendable += 1         # an unknown peer, or a client that left
                    return
            else:
                link = self.links[dst] = PeerLink(self, dst, addr)
        try:
            frame, size = encode_frame_parts(envelope, self.network.options.max_frame_bytes)
        except FrameError as exc:
            self.unsendable += 1
            log.error("%s: cannot send %s to %s: %s", self.node_id, type(envelope.msg).__name__, dst, exc)
            return
        conn = client if client is not None else link.conn
        if conn is not None and not conn.closed:
            conn.queue.put(frame, size, wake=False)     # written when this turn is through
            self.network.writes.mark(conn)
        else:
            link.send(frame, size)

    def flush(self) -> None:
        """Write what this turn queued (the driver calls it after each turn of the node;
        during a read, the read's end writes it)."""
        self.network.writes.flush()

    def _deliver(self, envelope: Envelope) -> None:
        if not self.closed and self.receiver is not None:
            try:
                self.receiver(envelope)
            except Exception:  # the node's failure is not the connection's
                log.exception("%s: handling %s failed", self.node_id, type(envelope.msg).__name__)

    @property
    def dropped(self) -> int:
        """Frames dropped from full send queues (oldest first)."""
        return sum(link.queue.dropped for link in self.links.values())

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for link in self.links.values():
            link.close()
        self.network._remove(self)


__all__ = ["CLIENT_REQUESTS", "PeerLink", "TcpNetwork", "TcpOptions", "TcpTransport", "client_may_send",
           "split_host_port"]
