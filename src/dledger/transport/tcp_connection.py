"""One TCP connection after its handshake: a bounded send queue, a writer, a reader, timeouts.

What it guarantees:
- memory is bounded: frames wait in a ``SendQueue`` of at most ``max_queue_frames`` frames and
  ``max_queue_bytes`` bytes; when a new frame does not fit, the *oldest* frames are dropped (and
  counted in ``dropped``). Raft tolerates loss, and the newest message is the one worth sending:
  a later heartbeat carries a later commit index, and an unacknowledged push is resent by its
  dispatcher anyway. The writer hands every waiting frame to the socket at once (vectored,
  no joined copy) and awaits ``drain()`` after each batch (``_write``: what the socket does not
  take is handed on 64 KiB at a time as it drains);
- a stuck peer is detected: a ``drain()`` that does not finish within ``write_timeout_ms``
  (the peer stopped reading: half-open or hung) closes the connection;
- a silent peer is detected: both ends send a keepalive frame whenever they have sent nothing
  for ``keepalive_ms``, and a read that sees no byte for ``idle_timeout_ms`` closes the
  connection (a half-open connection, a partitioned or frozen peer);
- a malformed or oversized frame closes this connection only (``FrameError``); a request of
  another wire version is first answered UNSUPPORTED (``on_unsupported``); frames that
  were whole before it were delivered, the partial one never is.
- on a plain socket the bytes are copied as few times as the kernel allows: frames are read
  straight into a buffer the connection owns (``frame_reader.FrameReader``, ``recv_into``) and
  decoded there, and written with vectored sends, large values not copied on the way
  (``frames.encode_frame_parts``). A TLS connection reads and writes through asyncio's stream.
- a frame leaves without a turn of the loop: what a node sends while it handles one input
  (everything a read delivered, a timer, the host's appends) is queued, and once that input
  is handled the connections it was queued on write it straight to their sockets
  (``WriteBatch``; answers to clients first). A connection whose socket is full leaves it to
  its writer task, which awaits ``drain()`` as above, so the bounds hold.
Everything runs on the event loop's thread.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections import deque
from dataclasses import dataclass
from typing import Callable

from dledger.protocol import MAX_FRAME_BYTES, Envelope, FrameError, UnsupportedVersion
from dledger.transport.frame_reader import FrameReader
from dledger.transport.frame_views import decode_envelope_view
from dledger.transport.frames import KEEPALIVE, FrameDecoder

log = logging.getLogger(__name__)

#: buffers per ``sendmsg`` call at most (Linux's IOV_MAX)
IOV_MAX = 1024
#: when the socket is full, at most this much is handed to the transport at a time (``_write``)
HANDOFF_BYTES = 64 * 1024


@dataclass(slots=True)
class TcpOptions:
    """Limits and timings of the TCP transport (defaults suit a LAN and 100 ms heartbeats)."""

    max_frame_bytes: int = MAX_FRAME_BYTES   # refuse a frame declaring more than this
    max_queue_bytes: int = 32 * 1024 * 1024  # per connection: queued frames beyond this drop the oldest
    max_queue_frames: int = 8192             # ... and beyond this many frames
    keepalive_ms: int = 200                  # send a keepalive after this long without sending
    idle_timeout_ms: int = 2000              # close after this long without receiving a byte
    write_timeout_ms: int = 2000             # close when a drain takes longer (peer not reading)
    connect_timeout_ms: int = 2000           # give up a connection attempt after this
    handshake_timeout_ms: int = 2000         # the whole handshake must finish within this
    backoff_min_ms: int = 20                 # first reconnect delay (then doubled, with jitter)
    backoff_max_ms: int = 1000               # largest reconnect delay
    max_connections: int = 256               # inbound connections one listener keeps
    read_chunk: int = 256 * 1024             # bytes per read at most

    def validate(self) -> "TcpOptions":
        for name in self.__slots__:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"TcpOptions.{name} must be a positive integer, got {value!r}")
        if self.max_frame_bytes > MAX_FRAME_BYTES:
            raise ValueError(f"TcpOptions.max_frame_bytes may not exceed {MAX_FRAME_BYTES}")
        if self.backoff_max_ms < self.backoff_min_ms:
            raise ValueError("TcpOptions.backoff_max_ms is below backoff_min_ms")
        if self.idle_timeout_ms <= self.keepalive_ms:
            raise ValueError("TcpOptions.idle_timeout_ms must exceed keepalive_ms")
        return self


class SendQueue:
    """Frames waiting for a connection's writer; bounded, dropping the oldest. A frame is
    ``bytes`` or a list of buffers (``frames.encode_frame_parts``) with its size given."""

    __slots__ = ("frames", "sizes", "bytes", "max_frames", "max_bytes", "dropped", "ready")

    def __init__(self, max_frames: int, max_bytes: int) -> None:
        self.frames: deque = deque()
        self.sizes: deque[int] = deque()
        self.bytes = 0
        self.max_frames = max_frames
        self.max_bytes = max_bytes
        self.dropped = 0
        self.ready = asyncio.Event()

    def put(self, frame, size: int | None = None, wake: bool = True) -> None:
        """Queue ``frame``; ``wake=False`` leaves the writer task asleep (a ``WriteBatch`` will
        write it)."""
        if size is None:
            size = len(frame)
        frames, sizes = self.frames, self.sizes
        while frames and (len(frames) >= self.max_frames or self.bytes + size > self.max_bytes):
            frames.popleft()
            self.bytes -= sizes.popleft()
            self.dropped += 1
        frames.append(frame)
        sizes.append(size)
        self.bytes += size
        if wake:
            self.ready.set()

    def take_all(self) -> list:
        out = list(self.frames)
        self.frames.clear()
        self.sizes.clear()
        self.bytes = 0
        self.ready.clear()
        return out

    def take_buffers(self) -> list:
        """Every waiting frame's buffers, in order, as one list for a vectored write (a frame
        of parts gives its parts), and the queue emptied."""
        bufs: list = []
        for frame in self.take_all():
            if type(frame) is bytes:
                bufs.append(frame)
            else:
                bufs.extend(frame)
        return bufs

    def clear(self) -> None:
        self.take_all()


class WriteBatch:
    """The connections frames were queued on while one input was handled, written when it is
    through: ``hold()`` / ``release()`` around the input (a read's frames), ``mark(conn)`` per
    frame queued, ``flush()`` at the end of anything else that sent (the driver calls it after
    each turn of a node). Frames queued outside any of these leave on the next turn of the
    loop. Connections that answer clients are written first: a client's answer does not wait
    behind the pushes that forward the same commit."""

    __slots__ = ("loop", "held", "dirty", "scheduled")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.held = 0
        self.dirty: dict = {}
        self.scheduled = False

    def mark(self, conn: "Connection") -> None:
        self.dirty[conn] = None
        if not self.held and not self.scheduled:
            self.scheduled = True
            self.loop.call_soon(self._on_turn)

    def hold(self) -> None:
        self.held += 1

    def release(self) -> None:
        self.held -= 1
        if not self.held and self.dirty:
            self.flush()

    def _on_turn(self) -> None:
        self.scheduled = False
        self.flush()

    def flush(self) -> None:
        if self.held or not self.dirty:
            return
        dirty = self.dirty
        self.dirty = {}
        for conn in dirty:
            if conn.answers_client:
                conn.write_now()
        for conn in dirty:
            if not conn.answers_client:
                conn.write_now()


async def read_payload(reader: asyncio.StreamReader, decoder: FrameDecoder, chunk: int) -> bytes:
    """The next frame's payload (one only; later bytes stay in ``decoder``). ``EOFError`` when
    the stream ends first, ``FrameError`` on a bad frame."""
    while True:
        got = decoder.feed_payloads(limit=1)
        if got:
            return got[0]
        data = await reader.read(chunk)
        if not data:
            raise EOFError("the peer closed the connection")
        got = decoder.feed_payloads(data, limit=1)
        if got:
            return got[0]


class Connection:
    """A connection past its handshake. ``run()`` reads and writes until either side fails or
    ``close()`` is called; ``on_envelope`` gets every envelope read, ``on_closed`` the reason.

    Three tasks: the reader, the writer, and one watchdog that wakes every quarter keepalive
    to send a keepalive after ``keepalive_ms`` without sending, and to close the connection
    after ``idle_timeout_ms`` without a byte received or a ``drain()`` pending for
    ``write_timeout_ms``. The reader and writer themselves await plainly (no timer per read
    or per write), which keeps a frame's trip through the loop short."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, decoder: FrameDecoder,
                 queue: SendQueue, options: TcpOptions, name: str,
                 on_envelope: Callable[[Envelope], None],
                 on_unsupported: Callable[[UnsupportedVersion], None] | None = None,
                 batch: WriteBatch | None = None, answers_client: bool = False) -> None:
        self.reader = reader
        self.writer = writer
        self.decoder = decoder
        self.queue = queue
        self.options = options
        self.name = name
        self.on_envelope = on_envelope
        #: a request of another wire version arrived: answer it (before the connection closes)
        self.on_unsupported = on_unsupported
        #: where frames queued while a read is handled are written from (None: the writer task)
        self.batch = batch
        #: this connection carries a client's answers (written first by ``WriteBatch``)
        self.answers_client = answers_client
        self.closed = False
        self.reason: str | None = None
        #: who is on the other side (set by the listener after the handshake)
        self.peer = None
        self._tasks: list[asyncio.Task] = []
        self._last_read = self._last_write = 0.0
        self._drain_since: float | None = None
        #: what the writer has yet to hand on of the frames it took (the socket was full)
        self._rest: list = []
        #: the ``FrameReader`` once a plain socket's reading went over to it
        self.frame_reader: FrameReader | None = None
        #: the plain socket under the transport, for vectored writes (None: write through the
        #: transport, e.g. TLS); asyncio's selector transport keeps it as ``_sock``
        sock = getattr(writer.transport, "_sock", None)
        self._sock = sock if isinstance(sock, socket.socket) and writer.get_extra_info("sslcontext") is None \
            else None
        if self._sock is not None:       # drain() waits until what the socket did not take is sent
            writer.transport.set_write_buffer_limits(high=0)

    async def run(self) -> str:
        """Serve until closed; returns why it closed."""
        loop = asyncio.get_running_loop()
        self._last_read = self._last_write = loop.time()
        self._tasks = [loop.create_task(self._reader_for_socket()), loop.create_task(self._write_loop()),
                       loop.create_task(self._watchdog())]
        try:
            done, _ = await asyncio.wait(self._tasks, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                exc = task.exception()
                if exc is not None:         # a bug, not the peer: say so, with the stack
                    log.error("%s: closing the connection after an internal error", self.name, exc_info=exc)
                    self._fail(f"internal error: {exc!r}")
        finally:
            self.close(self.reason or "closed")
        return self.reason or "closed"

    def close(self, reason: str) -> None:
        if self.closed:
            return
        self.closed = True
        self.reason = reason
        for task in self._tasks:
            if task is not asyncio.current_task():
                task.cancel()
        self.queue.ready.set()
        try:
            self.writer.close()
        except Exception:  # the transport may already be gone
            pass
        log.debug("%s: connection closed: %s", self.name, reason)

    def _fail(self, reason: str) -> None:
        if self.reason is None:
            self.reason = reason

    def _reader_for_socket(self):
        """The coroutine that reads this connection: frames straight into a buffer of its own
        (``frame_reader``) on a plain socket, asyncio's stream otherwise (TLS)."""
        if self._sock is not None and isinstance(getattr(self.reader, "_buffer", None), bytearray):
            return self._read_frames()
        return self._read_loop()

    async def _read_frames(self) -> None:
        loop = asyncio.get_running_loop()
        transport = self.writer.transport
        stream_buffer = self.reader._buffer            # what the stream read past the handshake
        pending = self.decoder.take_buffered() + bytes(stream_buffer)
        stream_buffer.clear()

        def touch() -> None:
            self._last_read = loop.time()

        reader = FrameReader(self.options.max_frame_bytes, self._on_payload, self._read_failed, touch,
                             transport.get_protocol(), pending)
        batch = self.batch
        if batch is not None:                   # what handling a read sends leaves after it
            parse = reader.parse

            def parse_then_write() -> None:
                batch.hold()
                try:
                    parse()
                finally:
                    batch.release()
            reader.parse = parse_then_write
        transport.set_protocol(reader)
        reader.connection_made(transport)
        if not transport.is_reading():
            transport.resume_reading()
        reader.parse()                                 # frames that came with the handshake
        self.frame_reader = reader
        if self.reader.at_eof() or transport.is_closing():   # the peer closed meanwhile
            self._fail("the peer closed the connection")
            return
        ended = await reader.done
        if ended is None:
            self._fail("the peer closed the connection")
        elif isinstance(ended, (ConnectionError, OSError)):
            self._fail(f"read failed: {ended!r}")

    def _on_payload(self, payload) -> None:
        env = decode_envelope_view(payload)     # a push's records: a view of the reader's buffer
        if not self.closed:
            self.on_envelope(env)

    def _read_failed(self, exc: BaseException) -> None:
        """Why reading ended, said as the stream reader says it (``_read_loop``)."""
        if isinstance(exc, FrameError):
            log.warning("%s: bad frame, closing the connection: %s", self.name, exc)
            if isinstance(exc, UnsupportedVersion) and exc.answer is not None and self.on_unsupported is not None:
                self.on_unsupported(exc)
            self._fail(f"bad frame: {exc}")
        elif isinstance(exc, ProtocolViolation):
            log.warning("%s: closing the connection: %s", self.name, exc)
            self._fail(str(exc))
        elif isinstance(exc, (ConnectionError, OSError)):
            self._fail(f"read failed: {exc!r}")
        else:                           # a bug, not the peer: say so, with the stack
            log.error("%s: closing the connection after an internal error", self.name, exc_info=exc)
            self._fail(f"internal error: {exc!r}")

    async def _read_loop(self) -> None:
        o = self.options
        loop = asyncio.get_running_loop()
        read, chunk, on_envelope = self.reader.read, o.read_chunk, self.on_envelope
        try:
            envs = self.decoder.feed()          # what arrived together with the handshake
            while True:
                for env in envs:
                    if self.closed:
                        return
                    on_envelope(env)
                data = await read(chunk)
                if not data:
                    self._fail("the peer closed the connection")
                    return
                self._last_read = loop.time()
                envs = self.decoder.feed(data)
        except FrameError as exc:
            log.warning("%s: bad frame, closing the connection: %s", self.name, exc)
            if isinstance(exc, UnsupportedVersion) and exc.answer is not None and self.on_unsupported is not None:
                self.on_unsupported(exc)
            self._fail(f"bad frame: {exc}")
        except (ConnectionError, OSError) as exc:
            self._fail(f"read failed: {exc!r}")
        except ProtocolViolation as exc:
            log.warning("%s: closing the connection: %s", self.name, exc)
            self._fail(str(exc))

    async def _write_loop(self) -> None:
        loop = asyncio.get_running_loop()
        queue, writer = self.queue, self.writer
        try:
            while not self.closed:
                if not queue.frames and not self._rest:
                    await queue.ready.wait()
                    if self.closed:
                        return
                if not self._rest:              # (else ``write_now`` left the rest of a frame)
                    bufs = queue.take_buffers()
                    if not bufs:
                        continue
                    self._rest = self._write(bufs)
                    self._last_write = loop.time()
                self._drain_since = loop.time()
                while self._rest:               # the socket was full: the rest once it has room
                    await writer.drain()
                    if self.closed:
                        return
                    self._rest = self._write(self._rest)
                await writer.drain()
                self._drain_since = None
        except (ConnectionError, OSError) as exc:
            self._fail(f"write failed: {exc!r}")

    def write_now(self) -> None:
        """Write the queued frames now, straight to the socket, unless the writer task is at
        work (bytes in the transport's buffer, or the rest of a frame the socket did not take):
        then wake it to take them, so the bounds hold. What the socket does not take now is
        left to the writer task, as after its own writes."""
        queue = self.queue
        if self.closed or not queue.frames:
            return
        transport = self.writer.transport
        if self._drain_since is not None or self._rest or transport.get_write_buffer_size() \
                or transport.is_closing():
            queue.ready.set()
            return
        try:
            rest = self._write(queue.take_buffers())
        except (ConnectionError, OSError) as exc:
            # ends as a failed write of the writer task does: reading stops, ``run`` returns
            self._fail(f"write failed: {exc!r}")
            transport.abort()
            return
        self._last_write = asyncio.get_running_loop().time()
        if rest:
            self._rest = rest
            self._drain_since = self._last_write
            queue.ready.set()

    def write_last(self, frame: bytes) -> None:
        """Write ``frame`` at once, behind the rest of a frame the writer is sending (a last
        answer before the connection closes)."""
        rest, self._rest = self._rest, []
        if rest:
            self.writer.writelines([*rest, frame])
        else:
            self.writer.write(frame)

    def _write(self, bufs: list) -> list:
        """Hand ``bufs`` to the socket; return what is left to send once it has room. With
        nothing waiting in the transport's buffer they go straight to the socket with vectored
        sends (each buffer copied once, into the socket); when the socket takes only part, the
        transport is given the next ``HANDOFF_BYTES`` at most (it copies them into its buffer
        and sends them when the socket has room, and, its high-water mark being 0, ``drain()``
        waits until it has) and the rest is returned: asyncio 3.11 would join all of it into
        one copy (``writelines``), copy that into its buffer and move the buffer's tail down
        after each send, three copies of every byte of a large push. Else, and on a transport
        without a plain socket (TLS), everything goes through the transport."""
        sock, transport = self._sock, self.writer.transport
        if sock is not None and not transport.get_write_buffer_size() and not transport.is_closing():
            k = 0
            while k < len(bufs):
                batch = bufs[k:k + IOV_MAX]
                try:
                    sent = sock.sendmsg(batch)
                except (BlockingIOError, InterruptedError):
                    sent = 0
                whole = 0
                for buf in batch:                       # skip what the socket took
                    n = len(buf)
                    if sent < n:
                        break
                    sent -= n
                    whole += 1
                k += whole
                if whole < len(batch):
                    if sent:
                        bufs[k] = memoryview(bufs[k])[sent:]
                    break
            if k == len(bufs):
                return []
            head = bufs[k]
            if len(head) > HANDOFF_BYTES:
                head = memoryview(head)
                bufs[k] = head[HANDOFF_BYTES:]
                self.writer.write(head[:HANDOFF_BYTES])
                return bufs[k:]
            self.writer.write(head)
            return bufs[k + 1:]
        if len(bufs) == 1:
            self.writer.write(bufs[0])
        else:
            self.writer.writelines(bufs)
        return []

    async def _watchdog(self) -> None:
        o = self.options
        loop = asyncio.get_running_loop()
        keepalive, idle, write_timeout = o.keepalive_ms / 1000, o.idle_timeout_ms / 1000, o.write_timeout_ms / 1000
        period = min(keepalive, idle, write_timeout) / 4
        while not self.closed:
            await asyncio.sleep(period)
            now = loop.time()
            if now - self._last_read >= idle:
                self._fail(f"nothing received for {o.idle_timeout_ms} ms")
                return
            since = self._drain_since
            if since is not None and now - since >= write_timeout:
                self._fail(f"the peer read nothing for {o.write_timeout_ms} ms")
                return
            if since is None and not self.queue.frames and now - self._last_write >= keepalive:
                try:
                    self.writer.write(KEEPALIVE)
                except (ConnectionError, OSError, RuntimeError) as exc:
                    self._fail(f"write failed: {exc!r}")
                    return
                self._last_write = now


class ProtocolViolation(Exception):
    """An authenticated peer sent an envelope its connection may not carry."""


__all__ = ["Connection", "ProtocolViolation", "SendQueue", "TcpOptions", "WriteBatch", "read_payload"]
