"""Reading frames straight into a buffer the reader owns (``asyncio.BufferedProtocol``).

After its handshake, a plain TCP connection's transport reads with ``recv_into`` into the free
end of one buffer, and every frame completed there is decoded in place: the payload's bytes
are copied once, by the kernel, before ``protocol.decode_envelope`` reads them. With asyncio's
streams the same bytes were copied four times more on the way (the transport's ``recv``
allocates them, the ``StreamReader`` appends them to its buffer and copies them out again, a
frame spanning reads is gathered in the frame decoder's buffer), and at 256 KiB pushes each
read allocated and freed a fresh block of that size.

Rules it keeps (those of ``frames.FrameDecoder``):
- a frame's declared length is checked against ``max_frame_bytes`` as soon as its prefix is
  whole, before any room is made for it; a frame of length 0 is a keepalive;
- the buffer holds what was received and not yet decoded: at most one partial frame. It starts
  at 64 KiB and grows up to 1 MiB while it runs more than half full; a frame larger than the
  buffer gets a buffer of its own size, into which the part already received is moved once;
  otherwise a partial frame is moved to the start when the free end runs short;
- ``on_payload(view)`` gets each payload as a memoryview of the buffer. The callee may keep a
  view of it (``frame_views``: a push's records, written to the store from there): the bytes
  under a live view never change. Before the buffer is written again (a read, a partial frame
  moved to its start) the reader checks whether a view of it is still alive (any view holds a
  reference to the buffer: ``sys.getrefcount``); if one is, it goes on in a fresh buffer, into
  which the partial frame is copied, and the old one is freed with its last view (counted in
  ``lent``). A push handled at once, as a follower's append is, leaves no view behind;
- the first error (a bad frame, a payload the callee refuses, a bug in the callee) ends
  reading: ``on_error(exc)`` is told and the transport is closed.
The transport's flow-control calls (``pause_writing``/``resume_writing``) and its
``connection_lost`` go on to the stream protocol it had before, so the ``StreamWriter`` of the
connection keeps working (``drain()``) as it did.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Callable

from dledger.protocol import FrameError
from dledger.transport.frames import PREFIX_BYTES

#: a connection's buffer starts at INITIAL_BYTES and grows, up to BUFFER_BYTES (or one frame),
#: while what it must hold passes half of it: to twice its size or four times what it must hold
#: (a busy connection reads up to 1 MiB at a time; an idle one, of the many that many groups
#: open, holds 64 KiB); a read is offered at least MIN_FREE bytes
INITIAL_BYTES = 64 * 1024
BUFFER_BYTES = 1024 * 1024
MIN_FREE = 16 * 1024


class FrameReader(asyncio.BufferedProtocol):
    def __init__(self, max_frame_bytes: int, on_payload: Callable[[memoryview], None],
                 on_error: Callable[[BaseException], None], on_read: Callable[[], None],
                 stream_protocol: asyncio.BaseProtocol | None, initial: bytes = b"") -> None:
        self.max_frame_bytes = max_frame_bytes
        self.on_payload = on_payload
        self.on_error = on_error
        self.on_read = on_read
        self.stream_protocol = stream_protocol
        self.transport: asyncio.BaseTransport | None = None
        self.keepalives = self.frames = 0
        #: buffers left to payload views that outlived their call (a fresh one was taken)
        self.lent = 0
        #: set once reading has ended: None (the peer closed), or the exception that ended it
        self.done: asyncio.Future = asyncio.get_running_loop().create_future()
        self._buf = bytearray(max(INITIAL_BYTES, len(initial)))
        self._start = 0
        self._end = len(initial)
        self._buf[:self._end] = initial
        self._failed = False

    # -- the transport's side --------------------------------------------------------------
    def get_buffer(self, sizehint: int) -> memoryview:
        if sys.getrefcount(self._buf) > 2:      # this attribute and the call's argument: a view lives
            self._fresh_buffer()
        buf, start, end = self._buf, self._start, self._end
        pending = end - start
        need = MIN_FREE
        if pending >= PREFIX_BYTES:
            need = max(need, PREFIX_BYTES + int.from_bytes(buf[start:start + PREFIX_BYTES], "big") - pending)
        if len(buf) - end < need:
            size = len(buf)
            if pending + need > size // 2:       # room for several frames of this size
                size = max(min(max(2 * size, 4 * (pending + need)), BUFFER_BYTES), pending + need)
            if size > len(buf):
                fresh = bytearray(size)
                fresh[:pending] = memoryview(buf)[start:end]
                self._buf = buf = fresh
            else:
                buf[:pending] = buf[start:end]
            self._start, self._end = 0, pending
            end = pending
        return memoryview(buf)[end:]

    def _fresh_buffer(self) -> None:
        """Go on in a buffer of the same size: views of the old one keep their bytes."""
        old, start, end = self._buf, self._start, self._end
        fresh = bytearray(len(old))
        fresh[:end - start] = memoryview(old)[start:end]
        self._buf, self._start, self._end = fresh, 0, end - start
        self.lent += 1

    def buffer_updated(self, nbytes: int) -> None:
        self._end += nbytes
        self.on_read()
        self.parse()

    def parse(self) -> None:
        """Hand on every frame the buffer holds whole (also what arrived with the handshake)."""
        if self._failed:
            return
        buf, end, limit = self._buf, self._end, self.max_frame_bytes
        start = self._start
        view = memoryview(buf)
        try:
            while end - start >= PREFIX_BYTES:
                need = int.from_bytes(view[start:start + PREFIX_BYTES], "big")
                if need > limit:
                    raise FrameError(f"declared frame length {need} exceeds the limit {limit}")
                stop = start + PREFIX_BYTES + need
                if stop > end:
                    break
                start = stop
                if need:
                    self.frames += 1
                    self.on_payload(view[stop - need:stop])
                else:
                    self.keepalives += 1
                if self._failed:                 # closed meanwhile
                    return
        except Exception as exc:
            self._fail(exc)
            return
        finally:
            del view
        if start == end:
            start = end = 0
        self._start, self._end = start, end

    def _fail(self, exc: BaseException) -> None:
        if self._failed:
            return
        self._failed = True
        if not self.done.done():
            self.done.set_result(exc)
        self.on_error(exc)
        if self.transport is not None:
            self.transport.close()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def eof_received(self) -> bool:
        if not self.done.done():
            self.done.set_result(None)
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_result(exc)
        if self.stream_protocol is not None:
            self.stream_protocol.connection_lost(exc)

    def pause_writing(self) -> None:
        if self.stream_protocol is not None:
            self.stream_protocol.pause_writing()

    def resume_writing(self) -> None:
        if self.stream_protocol is not None:
            self.stream_protocol.resume_writing()


__all__ = ["BUFFER_BYTES", "INITIAL_BYTES", "FrameReader"]
