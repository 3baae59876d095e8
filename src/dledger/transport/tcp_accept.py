"""A TLS listener's accept loop: each connection is TLS or plain, told apart by its first byte.

``asyncio.start_server(ssl=...)`` starts a TLS handshake on every connection, so a client that
connects without TLS sees its connection close without a word: its hello is not a TLS record.
This loop accepts, waits (at most ``handshake_s``) for the connection's first byte without
taking it (``MSG_PEEK``), and hands the connection to ``on_accept`` as ``start_server`` would:
over TLS when that byte starts a TLS handshake record (22, the ClientHello), as a plain
connection otherwise, which the listener then refuses with a reason the client can read
(``tcp.TcpNetwork``). A TLS handshake that fails is logged with its reason, as a refused
connection. ``has_room()`` says whether one more connection may be kept (the listener counts
``waiting``, the connections whose first byte has not come yet); when it may not, the
connection is closed at once. Everything runs on the loop's thread.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
from collections.abc import Callable

log = logging.getLogger("dledger.transport.tcp")

#: the first byte of a TLS connection (a record of type 22, handshake); no frame starts with
#: it (its length would exceed any frame limit)
TLS_HANDSHAKE_RECORD = b"\x16"
#: the stream buffer of an accepted connection (asyncio's default, which ``start_server`` uses)
STREAM_LIMIT = 64 * 1024


class TlsOrPlainAcceptor:
    def __init__(self, sock: socket.socket, loop: asyncio.AbstractEventLoop, server_ssl: ssl.SSLContext,
                 on_accept, *, handshake_s: float, has_room: Callable[[], bool], stats: dict, name: str) -> None:
        self.sock, self.loop, self.server_ssl = sock, loop, server_ssl
        self.on_accept = on_accept
        self.handshake_s = handshake_s
        self.has_room = has_room
        self.stats = stats
        self.name = name
        #: accepted connections whose first byte has not come yet, and their tasks
        self.waiting: set[socket.socket] = set()
        self._tasks: set[asyncio.Task] = set()
        self._task: asyncio.Task | None = None
        self.closed = False

    def start(self) -> None:
        self._task = self.loop.create_task(self._accept_loop())

    def close(self) -> None:
        self.closed = True
        if self._task is not None:
            self._task.cancel()
        for task in list(self._tasks):
            task.cancel()
        for conn in list(self.waiting):
            conn.close()

    async def _accept_loop(self) -> None:
        while not self.closed:
            try:
                conn, _addr = await self.loop.sock_accept(self.sock)
            except OSError:
                if self.closed or self.sock.fileno() == -1:
                    return
                await asyncio.sleep(0.05)          # out of file descriptors: do not spin
                continue
            if not self.has_room():
                self.stats["refused_cap"] += 1
                conn.close()
                continue
            conn.setblocking(False)
            self.waiting.add(conn)
            task = self.loop.create_task(self._hand_on(conn))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _hand_on(self, conn: socket.socket) -> None:
        try:
            try:
                async with asyncio.timeout(self.handshake_s):
                    first = await self._peek(conn)
            except (OSError, asyncio.TimeoutError) as exc:
                self.stats["handshake_failed"] += 1
                log.debug("%s: a connection sent nothing: %r", self.name, exc)
                conn.close()
                return
            finally:
                self.waiting.discard(conn)
            if not first:                           # closed before it said anything
                conn.close()
                return
            tls = first == TLS_HANDSHAKE_RECORD
            try:
                await self.loop.connect_accepted_socket(
                    self._protocol, conn, ssl=self.server_ssl if tls else None,
                    ssl_handshake_timeout=self.handshake_s if tls else None)
            except (OSError, asyncio.TimeoutError) as exc:     # ssl.SSLError is an OSError
                self.stats["handshake_failed"] += 1
                log.warning("%s: refused a connection: the TLS handshake failed: %s", self.name,
                            exc or type(exc).__name__)
                conn.close()
        except asyncio.CancelledError:
            conn.close()
            raise

    async def _peek(self, conn: socket.socket) -> bytes:
        """The first byte waiting on ``conn``, left in place (b"" when the peer closed)."""
        fd = conn.fileno()
        while True:
            try:
                return conn.recv(1, socket.MSG_PEEK)
            except (BlockingIOError, InterruptedError):
                pass
            readable = self.loop.create_future()
            self.loop.add_reader(fd, lambda: readable.done() or readable.set_result(None))
            try:
                await readable
            finally:
                self.loop.remove_reader(fd)

    def _protocol(self) -> asyncio.StreamReaderProtocol:
        """What ``asyncio.start_server`` builds for each connection."""
        return asyncio.StreamReaderProtocol(asyncio.StreamReader(limit=STREAM_LIMIT, loop=self.loop),
                                            self.on_accept, loop=self.loop)


__all__ = ["STREAM_LIMIT", "TLS_HANDSHAKE_RECORD", "TlsOrPlainAcceptor"]
