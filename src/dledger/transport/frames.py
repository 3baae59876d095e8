"""The sans-IO frame codec: envelopes as length-prefixed frames on a byte stream.

A frame is a 4-byte big-endian length followed by that many bytes of payload. The payload of
an envelope frame is ``protocol.encode_envelope`` (msgpack with a CRC-32 trailer); a frame of
length 0 is a keepalive and carries nothing. The TCP transport and the simulated network both
use this module, so every simulated message crosses the same encode and decode as a real one.

Rules it keeps (h11-style: bytes in, events out, no I/O):
- the declared length is checked against ``max_frame_bytes`` before anything is allocated for
  it, so a prefix of ``0xFFFFFFFF`` costs nothing but a ``FrameError``;
- ``FrameDecoder`` holds at most one partial frame (prefix + at most ``max_frame_bytes``)
  between calls; every complete frame is taken out of the buffer as soon as it is whole;
- any bytes either decode to envelopes or raise ``FrameError`` naming the problem; after an
  error the decoder is spent (a stream that lost its framing cannot be resynchronised), and
  its owner closes the connection.
"""

from __future__ import annotations

from dledger.protocol import MAX_FRAME_BYTES, Envelope, FrameError, decode_envelope, encode_envelope

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


def decode_frame(data: bytes, max_frame_bytes: int = MAX_FRAME_BYTES) -> Envelope:
    """Exactly one envelope frame (prefix included); ``FrameError`` on anything else."""
    if len(data) < PREFIX_BYTES:
        raise FrameError(f"a frame of {len(data)} bytes is shorter than its length prefix")
    declared = int.from_bytes(data[:PREFIX_BYTES], "big")
    if declared > max_frame_bytes:
        raise FrameError(f"declared frame length {declared} exceeds the limit {max_frame_bytes}")
    if declared != len(data) - PREFIX_BYTES:
        raise FrameError(f"declared frame length {declared} but {len(data) - PREFIX_BYTES} bytes follow")
    if declared == 0:
        raise FrameError("a keepalive frame carries no envelope")
    return decode_envelope(memoryview(data)[PREFIX_BYTES:])


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

    def feed_payloads(self, data: bytes = b"", limit: int | None = None) -> list[bytes]:
        """The payloads of the frames ``data`` completes, at most ``limit`` of them (the rest
        stay buffered for the next call, which may pass no data)."""
        if self._failed is not None:
            raise FrameError(f"the stream is unusable after an earlier error: {self._failed}")
        buf = self._buf
        buf += data
        out: list[bytes] = []
        start = 0
        max_bytes = self.max_frame_bytes
        while len(buf) - start >= PREFIX_BYTES and (limit is None or len(out) < limit):
            need = int.from_bytes(buf[start:start + PREFIX_BYTES], "big")
            if need > max_bytes:
                self._failed = f"declared frame length {need} exceeds the limit {max_bytes}"
                buf.clear()
                raise FrameError(self._failed)
            end = start + PREFIX_BYTES + need
            if len(buf) < end:
                break
            if need == 0:
                self.keepalives += 1
            else:
                out.append(bytes(buf[start + PREFIX_BYTES:end]))
                self.frames += 1
            start = end
        del buf[:start]
        return out

    def feed(self, data: bytes = b"") -> list[Envelope]:
        """The envelopes completed by ``data``; ``FrameError`` on a bad prefix or payload."""
        out = []
        for payload in self.feed_payloads(data):
            try:
                out.append(decode_envelope(payload))
            except FrameError as exc:
                self._failed = str(exc)
                self._buf.clear()
                raise
        return out


__all__ = ["KEEPALIVE", "PREFIX_BYTES", "FrameDecoder", "decode_frame", "encode_frame", "frame_payload"]
