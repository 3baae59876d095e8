"""The sans-IO frame codec: envelopes as length-prefixed frames on a byte stream.

A frame is a 4-byte big-endian length followed by that many bytes of payload. The payload of
an envelope frame is ``protocol.encode_envelope`` (msgpack with a CRC-32 trailer); a frame of
length 0 is a keepalive and carries nothing. The TCP transport and the simulated network both
use this module, so every simulated message crosses the same encode and decode as a real one.

Rules it keeps (h11-style: bytes in, events out, no I/O):
- the declared length is checked against ``max_frame_bytes`` before anything is allocated for
  it, so a prefix of ``0xFFFFFFFF`` costs nothing but a ``FrameError``;
- ``FrameDecoder`` holds at most one partial frame (prefix + at most ``max_frame_bytes``)
  between calls; every complete frame is taken out of the buffer as soon as it is whole. Frames
  that arrive whole in one read are decoded from that read's bytes without being copied into
  the buffer first (only a trailing partial frame is kept);
- any bytes either decode to envelopes or raise ``FrameError`` naming the problem; after an
  error the decoder is spent (a stream that lost its framing cannot be resynchronised), and
  its owner closes the connection.
"""

from __future__ import annotations

import msgpack

from dledger.protocol import (CRC_BYTES, MAX_FRAME_BYTES, WIRE_VERSION, Envelope, FrameError, crc32, decode_envelope,
                              encode_envelope, wire_values)
from dledger.transport.frame_views import decode_envelope_view

PREFIX_BYTES = 4
#: a frame with no payload: keeps an idle connection's read timeout from firing
KEEPALIVE = bytes(PREFIX_BYTES)


def frame_payload(payload: bytes, max_frame_bytes: int = MAX_FRAME_BYTES) -> bytes:
    """``payload`` with its length prefix."""
    if len(payload) > max_frame_bytes:
        raise FrameError(f"payload of {len(payload)} bytes exceeds the frame limit {max_frame_bytes}")
    return len(payload).to_bytes(PREFIX_BYTES, "big") + payload


def encode_frame(env: Envelope, max_frame_bytes: int = MAX_FRAME_BYTES) -> bytes:
    """One envelope as one frame (length prefix + ``encode_envelope``)."""
    return frame_payload(encode_envelope(env), max_frame_bytes)


#: a bytes value at least this long is sent as it is by ``encode_envelope_parts`` (not copied);
#: at least 256, so that its msgpack header is bin16 or bin32
BIG_VALUE_BYTES = 4096


def _big(value) -> bool:
    return type(value) is bytes and len(value) >= BIG_VALUE_BYTES


def encode_envelope_parts(env: Envelope) -> tuple[list, int]:
    """``protocol.encode_envelope(env)`` as a list of buffers and their total length: the same
    bytes, but every bytes value of ``BIG_VALUE_BYTES`` or more (a push's records, an append's
    body, the bodies of a batch) is a buffer of its own, the value itself rather than a copy,
    so that a vectored write (``socket.sendmsg``) copies it only into the socket. The CRC-32
    trailer is computed over the parts in turn. msgpack is a stream of items, so packing the
    items one by one gives the bytes of packing them together."""
    tag, values = wire_values(env.msg)
    if not any(_big(v) or (type(v) is list and any(map(_big, v))) for v in values):
        body = msgpack.packb([WIRE_VERSION, env.src, env.dst, env.request_id, env.is_response, tag, values],
                             use_bin_type=True)
        return [body, crc32(body).to_bytes(CRC_BYTES, "big")], len(body) + CRC_BYTES
    packer = msgpack.Packer(use_bin_type=True, autoreset=False)
    packer.pack_array_header(7)
    for item in (WIRE_VERSION, env.src, env.dst, env.request_id, env.is_response, tag):
        packer.pack(item)
    packer.pack_array_header(len(values))
    parts: list = []
    crc = total = 0

    def cut(extra: bytes = b"") -> None:
        nonlocal crc, total
        head = packer.bytes() + extra
        packer.reset()
        if head:
            parts.append(head)
            crc = crc32(head, crc)
            total += len(head)

    def big(value: bytes) -> None:
        nonlocal crc, total
        n = len(value)
        cut((b"\xc5" + n.to_bytes(2, "big")) if n < 0x10000 else (b"\xc6" + n.to_bytes(4, "big")))
        parts.append(value)
        crc = crc32(value, crc)
        total += n

    for value in values:
        if _big(value):
            big(value)
        elif type(value) is list and any(map(_big, value)):
            packer.pack_array_header(len(value))
            for x in value:
                if _big(x):
                    big(x)
                else:
                    packer.pack(x)
        else:
            packer.pack(value)
    cut()
    parts.append(crc.to_bytes(CRC_BYTES, "big"))
    return parts, total + CRC_BYTES


def encode_frame_parts(env: Envelope, max_frame_bytes: int = MAX_FRAME_BYTES) -> tuple[list, int]:
    """``encode_frame(env)`` as a list of buffers (the length prefix joined to the first) and
    their total length, large values not copied (``encode_envelope_parts``)."""
    parts, size = encode_envelope_parts(env)
    if size > max_frame_bytes:
        raise FrameError(f"payload of {size} bytes exceeds the frame limit {max_frame_bytes}")
    parts[0] = size.to_bytes(PREFIX_BYTES, "big") + parts[0]
    return parts, size + PREFIX_BYTES


def decode_frame(data: bytes, max_frame_bytes: int = MAX_FRAME_BYTES) -> Envelope:
    """Exactly one envelope frame (prefix included); ``FrameError`` on anything else. A push's
    records are a view of ``data`` (``frame_views``): ``data`` is ``bytes``, or stays as it is
    while the envelope lives."""
    if len(data) < PREFIX_BYTES:
        raise FrameError(f"a frame of {len(data)} bytes is shorter than its length prefix")
    declared = int.from_bytes(data[:PREFIX_BYTES], "big")
    if declared > max_frame_bytes:
        raise FrameError(f"declared frame length {declared} exceeds the limit {max_frame_bytes}")
    if declared != len(data) - PREFIX_BYTES:
        raise FrameError(f"declared frame length {declared} but {len(data) - PREFIX_BYTES} bytes follow")
    if declared == 0:
        raise FrameError("a keepalive frame carries no envelope")
    return decode_envelope_view(memoryview(data)[PREFIX_BYTES:])


class FrameDecoder:
    """Incremental decoder for one connection's byte stream.

    ``feed_payloads(data)`` returns the payloads of the frames completed by ``data`` (bytes,
    keepalives left out); ``feed(data)`` decodes them as envelopes. Both may be used on one
    decoder (a handshake reads raw payloads, then the stream carries envelopes)."""

    __slots__ = ("max_frame_bytes", "_buf", "_failed", "keepalives", "frames")

    def __init__(self, max_frame_bytes: int = MAX_FRAME_BYTES) -> None:
        if not 0 < max_frame_bytes <= MAX_FRAME_BYTES:
            raise ValueError(f"max_frame_bytes must be in 1..{MAX_FRAME_BYTES}, got {max_frame_bytes}")
        self.max_frame_bytes = max_frame_bytes
        self._buf = bytearray()
        self._failed: str | None = None
        #: keepalive frames and envelope/payload frames seen so far
        self.keepalives = 0
        self.frames = 0

    @property
    def buffered(self) -> int:
        """Bytes held for a frame not yet complete."""
        return len(self._buf)

    def take_buffered(self) -> bytes:
        """The bytes held for frames not yet taken out, removed from this decoder (a reader
        that goes on with a buffer of its own starts with them)."""
        out = bytes(self._buf)
        self._buf = bytearray()
        return out

    def _scan(self, data, limit: int | None, emit) -> int:
        """Call ``emit(view)`` with each complete frame's payload (a memoryview valid only
        during the call), at most ``limit`` of them; keep the rest; return how many."""
        if self._failed is not None:
            raise FrameError(f"the stream is unusable after an earlier error: {self._failed}")
        buf = self._buf
        buffered = bool(buf) or not isinstance(data, bytes)
        if buffered:
            buf += data
            src = memoryview(buf)
        else:
            src = memoryview(data)       # the common case: parse the bytes read, in place
        count = start = 0
        size = len(src)
        max_bytes = self.max_frame_bytes
        try:
            while size - start >= PREFIX_BYTES and (limit is None or count < limit):
                need = int.from_bytes(src[start:start + PREFIX_BYTES], "big")
                if need > max_bytes:
                    self._failed = f"declared frame length {need} exceeds the limit {max_bytes}"
                    raise FrameError(self._failed)
                end = start + PREFIX_BYTES + need
                if size < end:
                    break
                if need == 0:
                    self.keepalives += 1
                else:
                    self.frames += 1
                    count += 1
                    emit(src[start + PREFIX_BYTES:end])
                start = end
        except FrameError:
            # the error's traceback may still hold a view of the buffer (the frame's payload),
            # so the buffer is dropped, not resized in place; the stream is unusable anyway
            src.release()
            self._buf = bytearray()
            raise
        src.release()
        if buffered:                     # drop what was parsed
            del buf[:start]
        elif start < size:
            buf += memoryview(data)[start:]
        return count

    def feed_payloads(self, data: bytes = b"", limit: int | None = None) -> list[bytes]:
        """The payloads of the frames ``data`` completes, at most ``limit`` of them (the rest
        stay buffered for the next call, which may pass no data)."""
        out: list[bytes] = []
        self._scan(data, limit, lambda view: out.append(bytes(view)))
        return out

    def feed(self, data: bytes = b"") -> list[Envelope]:
        """The envelopes completed by ``data``; ``FrameError`` on a bad prefix or payload."""
        out: list[Envelope] = []

        def emit(view) -> None:
            try:
                out.append(decode_envelope(view))
            except FrameError as exc:
                self._failed = str(exc)
                raise

        self._scan(data, None, emit)
        return out


__all__ = ["BIG_VALUE_BYTES", "KEEPALIVE", "PREFIX_BYTES", "FrameDecoder", "decode_frame", "encode_envelope_parts",
           "encode_frame", "encode_frame_parts", "frame_payload"]
