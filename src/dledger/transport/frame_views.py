"""Decoding a push without copying its records: the records as a view of the frame's bytes.

A push's records are one msgpack bin, the 11th field of ``PushEntryRequest``, with small
fields before and after it. ``protocol.decode_envelope`` copies them out of the frame into a
``bytes`` (msgpack's unpacking), and the follower's store then copies them again, into its
mapped segment. ``decode_envelope_view`` decodes the same bytes to the same envelope, except
that a push's records are a read-only ``memoryview`` of ``data``: the frame's checksum is
checked first (as always), the few items before the records are stepped over by their msgpack
headers to find the bin, and the frame is unpacked with that bin replaced by an empty one (a
copy of the small fields only), so every field is checked exactly as ``decode_envelope``
checks it. The wire format is unchanged: this is a reader of the same bytes.

Rules it keeps:
- ``decode_envelope_view(data) == decode_envelope(data)`` for any bytes: the same envelope,
  or a ``FrameError`` (whose text may differ); frames that are not pushes, pushes smaller than
  ``VIEW_MIN_BYTES``, and anything whose layout it does not expect are handed to
  ``decode_envelope`` as they are;
- the view is of ``data``'s own memory: the caller keeps those bytes unchanged for as long as
  the view may live (``frame_reader.FrameReader`` reads into a fresh buffer while a view of its
  own is alive; immutable ``bytes`` need nothing).
"""

from __future__ import annotations

from dledger.protocol import (MESSAGE_TYPES, Envelope, PushEntryRequest, checked_body, decode_envelope, envelope_of,
                              unpack_body, wire_values)

#: a frame of fewer bytes is decoded by ``decode_envelope`` (a copy of small records is cheaper
#: than stepping over the fields)
VIEW_MIN_BYTES = 4096
_PUSH_TAG = next(tag for tag, (cls, _code) in enumerate(MESSAGE_TYPES) if cls is PushEntryRequest)
#: the records' place among a push's fields
_RECORDS_FIELD = [name for name in PushEntryRequest.__dataclass_fields__].index("entries")
assert wire_values(PushEntryRequest(entries=b"\x01"))[1][_RECORDS_FIELD] == b"\x01"
#: msgpack items of a fixed size after their first byte: nil, false, true, floats, ints
_FIXED = {0xc0: 0, 0xc2: 0, 0xc3: 0, 0xca: 4, 0xcb: 8, 0xcc: 1, 0xcd: 2, 0xce: 4, 0xcf: 8,
          0xd0: 1, 0xd1: 2, 0xd2: 4, 0xd3: 8}
#: strings and bins whose length follows their first byte in 1, 2 or 4 bytes
_SIZED = {0xd9: 1, 0xda: 2, 0xdb: 4, 0xc4: 1, 0xc5: 2, 0xc6: 4}
_BINS = (0xc4, 0xc5, 0xc6)
_EMPTY_BIN = b"\xc4\x00"


def _skip(b, p: int) -> int:
    """Where the msgpack item at ``p`` ends; -1 for an item this reader does not step over
    (an array, a map, an ext, a reserved byte). ``IndexError`` past the end."""
    t = b[p]
    if t < 0x80 or t >= 0xe0:                   # positive and negative fixints
        return p + 1
    if 0xa0 <= t <= 0xbf:                       # fixstr
        return p + 1 + (t & 0x1f)
    n = _FIXED.get(t)
    if n is not None:
        return p + 1 + n
    n = _SIZED.get(t)
    if n is not None:
        return p + 1 + n + int.from_bytes(b[p + 1:p + 1 + n], "big")
    return -1


def records_span(body) -> tuple[int, int, int] | None:
    """For the msgpack body of a push: where its records' bin starts, where their bytes start
    and where they end; None for anything else (or a layout this reader does not expect)."""
    try:
        if body[0] != 0x97:                     # [version, src, dst, request_id, is_response, tag, values]
            return None
        p = 1
        for _ in range(5):
            p = _skip(body, p)
            if p < 0:
                return None
        if body[p] != _PUSH_TAG:
            return None
        head = body[p + 1]
        if not 0x90 + _RECORDS_FIELD < head <= 0x9f:   # a fixarray holding the records' field
            return None
        p += 2
        for _ in range(_RECORDS_FIELD):
            p = _skip(body, p)
            if p < 0:
                return None
        t = body[p]
        if t not in _BINS:
            return None
        n = _SIZED[t]
        start = p + 1 + n
        end = start + int.from_bytes(body[p + 1:start], "big")
    except IndexError:
        return None
    if end > len(body):
        return None
    return p, start, end


def decode_envelope_view(data) -> Envelope:
    """``protocol.decode_envelope(data)``, a push's records a read-only view of ``data``."""
    if len(data) < VIEW_MIN_BYTES:
        return decode_envelope(data)
    body = checked_body(data)
    span = records_span(body)
    if span is None:
        return envelope_of(unpack_body(body))
    head, start, end = span
    env = envelope_of(unpack_body(b"".join((body[:head], _EMPTY_BIN, body[end:]))))
    env.msg.entries = body[start:end].toreadonly()
    return env


__all__ = ["VIEW_MIN_BYTES", "decode_envelope_view", "records_span"]
