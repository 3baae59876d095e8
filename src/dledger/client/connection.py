"""One client connection to one node: handshake, requests matched to answers, keepalives.

``NodeConnection.request(msg, timeout)`` sends one request envelope and waits for its answer.
It tells the two ways of failing apart, because the client's resend rule depends on it:
- ``NotSent``: the connection could not be opened (refused, unreachable, handshake refused), so
  the request never left this process: it certainly was not taken. Its message says why: the
  reason a node gave for refusing the connection (a group it does not serve, a plain
  connection to a TLS node, ...), a node that answered a TLS client in plain text, the
  operating system's error;
- ``AnswerLost``: the request was written, but the connection broke or no answer came in time:
  the node may have taken it.

The handshake is the members' (``transport.auth``) with the kind ``client``, so a cluster with
a secret refuses a client without it before any request is read. While open, the connection
sends a keepalive frame every ``KEEPALIVE_S`` so the node's idle timeout never closes it under a
request in flight.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import socket
import ssl
from typing import Any, Sequence

from dledger.protocol import Envelope, FrameError
from dledger.transport.auth import CLIENT, ClientHandshake, HandshakeError, HandshakeRefused, Peer
from dledger.transport.frames import KEEPALIVE, FrameDecoder, encode_frame, frame_payload
from dledger.transport.tcp import split_host_port
from dledger.transport.tcp_connection import read_payload

log = logging.getLogger(__name__)

KEEPALIVE_S = 0.5
READ_CHUNK = 64 * 1024


class NotSent(Exception):
    """The request never left this process (no connection could be opened)."""


class AnswerLost(Exception):
    """The request was sent, but its answer did not arrive (connection lost or timed out)."""


class _AnswerTimeout(Exception):
    """No answer came by the request's deadline."""


def _time_out(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_exception(_AnswerTimeout())


class NodeConnection:
    """The client's connection to node ``node_id`` at ``addr`` (opened on first request and
    again after it breaks)."""

    _rids = itertools.count(1)

    def __init__(self, group: str, client_id: str, node_id: str, addr: str, keys: Sequence[bytes] = (),
                 ssl_context: ssl.SSLContext | None = None) -> None:
        self.group, self.client_id, self.node_id = group, client_id, node_id
        self.host, self.port = split_host_port(addr)
        self.keys = tuple(keys)
        self.ssl = ssl_context
        self._writer: asyncio.StreamWriter | None = None
        self._tasks: list[asyncio.Task] = []
        self._pending: dict[int, asyncio.Future] = {}
        self._lock: asyncio.Lock | None = None

    @property
    def is_open(self) -> bool:
        return self._writer is not None and not self._writer.is_closing()

    async def _open(self, timeout: float) -> None:
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self.is_open:
                return
            try:
                async with asyncio.timeout(max(timeout, 0.001)):
                    await self._connect()
            except HandshakeRefused as exc:        # the node said why
                raise NotSent(f"{self.node_id} at {self.host}:{self.port} refused the connection: "
                              f"{exc.reason}") from None
            except ssl.SSLError as exc:
                if exc.reason == "WRONG_VERSION_NUMBER":    # the node answered in plain text
                    raise NotSent(f"{self.node_id} at {self.host}:{self.port} does not use TLS: connect "
                                  f"without a client certificate") from None
                raise NotSent(f"cannot reach {self.node_id} at {self.host}:{self.port}: TLS: "
                              f"{exc.reason or exc}") from None
            except (OSError, EOFError, HandshakeError, FrameError, asyncio.TimeoutError) as exc:
                raise NotSent(f"cannot reach {self.node_id} at {self.host}:{self.port}: "
                              f"{exc or type(exc).__name__}") from None

    async def _connect(self) -> None:
        reader, writer = await asyncio.open_connection(self.host, self.port, ssl=self.ssl)
        try:
            sock = writer.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            decoder = FrameDecoder()
            hs = ClientHandshake(Peer(self.group, self.client_id, self.node_id, CLIENT), self.keys)
            writer.write(frame_payload(hs.hello()))
            challenge = await read_payload(reader, decoder, READ_CHUNK)
            writer.write(frame_payload(hs.on_challenge(challenge)))
            await writer.drain()
        except BaseException:
            writer.close()
            raise
        self._writer = writer
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._read_loop(reader, decoder, writer)),
                       loop.create_task(self._keepalive_loop(writer))]

    async def request(self, msg: Any, timeout: float) -> Any:
        """Send ``msg`` and return the node's answer (``NotSent`` / ``AnswerLost``)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        if not self.is_open:
            await self._open(timeout)
        rid = next(self._rids)
        fut = loop.create_future()
        self._pending[rid] = fut
        try:
            try:
                self._writer.write(encode_frame(Envelope(self.client_id, self.node_id, rid, False, msg)))
            except (OSError, RuntimeError) as exc:
                raise AnswerLost(f"writing to {self.node_id} failed: {exc!r}") from None
            # a timer fails the answer's future at the deadline (``asyncio.wait_for`` would put a
            # future and a turn of the loop more between the answer and its caller)
            timer = loop.call_later(max(deadline - loop.time(), 0.001), _time_out, fut)
            try:
                return await fut
            except _AnswerTimeout:
                raise AnswerLost(f"{self.node_id} did not answer within {timeout:.1f} s") from None
            finally:
                timer.cancel()
        finally:
            self._pending.pop(rid, None)

    async def _read_loop(self, reader, decoder: FrameDecoder, writer) -> None:
        reason = "the node closed the connection"
        try:
            envs = decoder.feed()
            while True:
                for env in envs:
                    if env.is_response and env.src == self.node_id:
                        fut = self._pending.get(env.request_id)
                        if fut is not None and not fut.done():
                            fut.set_result(env.msg)
                data = await reader.read(READ_CHUNK)
                if not data:
                    break
                envs = decoder.feed(data)
        except (OSError, FrameError) as exc:
            reason = f"connection to {self.node_id} failed: {exc!r}"
        except asyncio.CancelledError:
            reason = "the client closed"
            raise
        finally:
            self._drop(writer, reason)

    async def _keepalive_loop(self, writer) -> None:
        try:
            while not writer.is_closing():
                await asyncio.sleep(KEEPALIVE_S)
                writer.write(KEEPALIVE)
        except (OSError, RuntimeError):
            self._drop(writer, "keepalive failed")

    def _drop(self, writer, reason: str) -> None:
        if self._writer is writer:
            self._writer = None
        writer.close()
        for fut in list(self._pending.values()):
            if not fut.done():
                fut.set_exception(AnswerLost(reason))

    async def close(self) -> None:
        writer = self._writer
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        try:
            if tasks:
                # ``asyncio.wait`` hands back the tasks' own ends without raising them, and raises
                # only the caller's cancellation: catching CancelledError around ``await task``
                # would swallow a Ctrl-C that comes while the caller waits here
                done, _ = await asyncio.wait(tasks)
                for task in done:
                    if not task.cancelled():
                        task.exception()    # taken: a loop that failed on its way out is not news
        finally:
            if writer is not None:
                self._drop(writer, "the client closed")

