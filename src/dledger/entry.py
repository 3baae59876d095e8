"""DLedgerEntry and its byte layouts: the data record, the 32-byte index unit, the blank record.

This module is the single place that knows the on-disk bytes (docs/format.md). All integers are
big-endian, as Java's ByteBuffer writes them.

Data record (``size = 48 + len(body)``)::

    0 magic:i32  4 size:i32  8 index:i64  16 term:i64  24 pos:i64
    32 channel:i32  36 chain_crc:u32  40 body_crc:u32  44 body_size:i32  48 body

Index unit (32 bytes, at ``index * 32`` of the index file list)::

    0 magic:i32  4 pos:i64  12 size:i32  16 index:i64  24 term:i64

Blank record: ``magic = -1``, ``size`` = the whole blank region (>= 8), then zeros.

Rules kept here:
- ``body_crc`` is the CRC-32 (IEEE; same value as ``zlib.crc32`` and Java's ``CRC32``) of the
  final body bytes. A stored ``body_crc`` of 0 means "not computed" (Java DLedger always writes
  0) and is never checked.
- ``decode`` never trusts a length it has not bounds-checked: a corrupt ``size`` raises
  ``CorruptEntryError`` rather than allocating or reading past the buffer.
- Entry equality ignores ``chain_crc`` and ``body_crc`` (as Java's ``DLedgerEntry.equals``).

The CRC on hot paths is zlib-ng's ``crc32`` (SIMD; measured here 2x faster than ``zlib.crc32`` at
128 B and 12x at 64 KB), falling back to ``zlib.crc32`` (same values) where zlib-ng is missing.
Both are C and far faster than crcmod's extension; the test suite checks our CRC against
crcmod's ``crc-32`` as an independent reference.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from enum import IntEnum
from typing import NamedTuple

from dledger.errors import CorruptEntryError

POS_OFFSET = 24
HEADER_SIZE = 44
BODY_OFFSET = 48
INDEX_UNIT_SIZE = 32
MIN_BLANK_LEN = 8

MAGIC_NORMAL = 1
MAGIC_NOOP = 2
MAGIC_CONFIG_CHANGE = 3
MAGIC_BLANK = -1
VALID_MAGICS = frozenset((MAGIC_NORMAL, MAGIC_NOOP, MAGIC_CONFIG_CHANGE))

#: Largest record Java DLedger can encode (its thread-local 4 MiB buffer); our default limit.
MAX_RECORD_SIZE = 4 * 1024 * 1024

try:  # zlib-ng: same CRC-32, vectorised
    from zlib_ng.zlib_ng import crc32
except ImportError:  # pragma: no cover - exercised only where zlib-ng has no wheel
    from zlib import crc32

# magic, size, index, term, pos, channel, chain_crc, body_crc, body_size
#: Largest term a store accepts: terms beyond it (from a file or a peer) are refused, leaving
#: room to count up without ever reaching the int64 limit.
MAX_TERM = (1 << 62) - 1
#: Largest log index: index unit ``k`` lies at byte ``k * 32`` of the index list, which must fit
#: in an int64 (Java's ``long`` file offsets).
MAX_INDEX = (1 << 58) - 1

RECORD_PREFIX = struct.Struct(">iiqqqiIIi")
# magic, pos, size, index, term
INDEX_UNIT = struct.Struct(">iqiqq")
# magic, size
MAGIC_SIZE = struct.Struct(">ii")
# magic, size, pos (a record's fields a reader of bodies needs)
_MAGIC_SIZE_POS = struct.Struct(">ii16xq")
assert RECORD_PREFIX.size == BODY_OFFSET and INDEX_UNIT.size == INDEX_UNIT_SIZE


class EntryType(IntEnum):
    """Entry types (the record's magic)."""

    NORMAL = MAGIC_NORMAL
    NOOP = MAGIC_NOOP
    CONFIG_CHANGE = MAGIC_CONFIG_CHANGE
    BLANK = MAGIC_BLANK


@dataclass(slots=True, eq=False)
class DLedgerEntry:
    """One log entry. ``size`` and ``body_crc`` are filled in by ``encode``."""

    body: bytes = b""
    magic: int = MAGIC_NORMAL
    index: int = -1
    term: int = -1
    pos: int = -1
    channel: int = 0
    chain_crc: int = 0
    body_crc: int = 0
    size: int = 0

    def __post_init__(self) -> None:
        if not self.size:
            self.size = BODY_OFFSET + len(self.body)

    def _key(self) -> tuple:
        return (self.size, self.magic, self.index, self.term, self.channel, self.pos,
                bytes(self.body))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, DLedgerEntry):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    @property
    def entry_type(self) -> EntryType:
        return EntryType(self.magic)

    def crc_ok(self) -> bool:
        """True when ``body_crc`` is 0 (unchecked) or equals the body's CRC-32."""
        return self.body_crc == 0 or self.body_crc == crc32(self.body)


class IndexUnit(NamedTuple):
    """A decoded 32-byte index unit."""

    magic: int
    pos: int
    size: int
    index: int
    term: int


class RecordHeader(NamedTuple):
    """The decoded 48-byte prefix of a data record (``decode_header``), in its byte order."""

    magic: int
    size: int
    index: int
    term: int
    pos: int
    channel: int
    chain_crc: int
    body_crc: int
    body_size: int


def matches_unit(unit: IndexUnit, magic: int, size: int, index: int, term: int, pos: int,
                 body_crc: int) -> bool:
    """Does a record's header agree with its index unit? The one rule, used by every reader.

    The CRC covers only the body, so this is what catches a damaged header field. Two
    allowances for Java DLedger's files: its leaders write magic 1 (NORMAL) into the index unit
    of every entry, NOOP entries included; and its records carry no CRC (``body_crc`` 0) and may
    hold another node's ``pos``, so for them the position is not compared. A no-op of ours has
    no CRC either (its body is empty), but its unit says NOOP, which Java never writes: its
    position is compared.
    """
    # the magic rule is magic_matches_unit's, short-circuited here: every get() runs this
    return (index == unit.index and term == unit.term and size == unit.size
            and (magic == unit.magic or (unit.magic == MAGIC_NORMAL and magic == MAGIC_NOOP))
            and (pos == unit.pos or not body_crc and unit.magic != MAGIC_NOOP))


def crc_vouches(body_crc: int, size: int) -> bool:
    """Does a record's CRC vouch for its body? It carries one (Java DLedger's records carry
    none: ``body_crc`` 0), or its body is empty (the CRC-32 of nothing is 0: a no-op's record
    is all header, and every header field is checked against the index unit)."""
    return bool(body_crc) or size == BODY_OFFSET


def magic_matches_unit(unit_magic, magic):
    """The magic part of ``matches_unit``: equal, or NOOP under Java's magic 1. Written with
    ``|``/``&`` so that it also compares whole numpy columns (the Spark scan's fast path);
    ``tests/test_entry.py`` checks that both forms agree."""
    return (unit_magic == magic) | ((unit_magic == MAGIC_NORMAL) & (magic == MAGIC_NOOP))


#: builds a named tuple from a tuple of the right length without ``_make``'s extra call (the
#: segment walk and recovery build one per record)
_new_tuple = tuple.__new__

_SEGMENT_NAME = re.compile(r"\d{20}")


def is_segment_name(name: str) -> bool:
    """Is ``name`` a segment file name: its global start offset as exactly 20 decimal digits?"""
    return _SEGMENT_NAME.fullmatch(name) is not None


def segment_name(offset: int) -> str:
    """The file name of the segment starting at global ``offset``."""
    return f"{offset:020d}"


def encode(entry: DLedgerEntry, *, compute_crc: bool = True) -> bytes:
    """Encode ``entry`` as a data record; sets ``entry.size`` and (by default) ``entry.body_crc``."""
    body = entry.body
    size = BODY_OFFSET + len(body)
    entry.size = size
    if compute_crc:
        entry.body_crc = crc32(body)
    return RECORD_PREFIX.pack(entry.magic, size, entry.index, entry.term, entry.pos,
                              entry.channel, entry.chain_crc, entry.body_crc, len(body)) + body


def encode_into(buf, offset: int, entry: DLedgerEntry, *, compute_crc: bool = True) -> int:
    """Encode ``entry`` into a writable buffer at ``offset``; returns the record size."""
    body = entry.body
    n = len(body)
    size = BODY_OFFSET + n
    entry.size = size
    if compute_crc:
        entry.body_crc = crc32(body)
    RECORD_PREFIX.pack_into(buf, offset, entry.magic, size, entry.index, entry.term, entry.pos,
                            entry.channel, entry.chain_crc, entry.body_crc, n)
    buf[offset + BODY_OFFSET:offset + size] = body
    return size


def decode_header(buf, offset: int = 0, *, limit: int | None = None,
                  path: str | None = None, base: int = 0) -> RecordHeader:
    """Decode and validate a record prefix at ``offset``; raises ``CorruptEntryError``.

    ``limit`` bounds the record's end (default: the buffer length). ``path``/``base`` only
    enrich the error (``base`` is the global position of ``buf[0]``).
    """
    return _new_tuple(RecordHeader, _checked_prefix(buf, offset, limit, path, base))


def _checked_prefix(buf, offset: int, limit: int | None, path: str | None, base: int) -> tuple:
    """``decode_header``'s checks, returning the plain tuple (``decode`` unpacks it at once)."""
    end = len(buf) if limit is None else limit
    if offset + BODY_OFFSET > end:
        raise CorruptEntryError(f"record header truncated: {end - offset} of {BODY_OFFSET} bytes",
                                path=path, offset=offset, position=base + offset if path else None)
    fields = RECORD_PREFIX.unpack_from(buf, offset)
    magic, size = fields[0], fields[1]
    if magic not in VALID_MAGICS:
        raise CorruptEntryError(f"invalid magic {magic}", path=path, offset=offset,
                                position=base + offset if path else None)
    if size < BODY_OFFSET or fields[8] != size - BODY_OFFSET:
        raise CorruptEntryError(f"inconsistent sizes: size={size} body_size={fields[8]}",
                                path=path, offset=offset, position=base + offset if path else None)
    if offset + size > end:
        raise CorruptEntryError(f"record of {size} bytes runs past the end ({end - offset} left)",
                                path=path, offset=offset, position=base + offset if path else None)
    if not (0 <= fields[2] <= MAX_INDEX and 0 <= fields[3] <= MAX_TERM and fields[4] >= 0):
        raise CorruptEntryError(f"field out of bounds: index={fields[2]} term={fields[3]} "
                                f"pos={fields[4]} (index 0..{MAX_INDEX}, term 0..{MAX_TERM}, "
                                f"pos >= 0)", path=path, offset=offset,
                                position=base + offset if path else None)
    return fields


def decode(buf, offset: int = 0, *, check_crc: bool = True, limit: int | None = None,
           path: str | None = None, base: int = 0) -> DLedgerEntry:
    """Decode one data record at ``offset``; raises ``CorruptEntryError`` on any inconsistency."""
    magic, size, index, term, pos, channel, chain_crc, body_crc, _ = _checked_prefix(
        buf, offset, limit, path, base)
    body = bytes(buf[offset + BODY_OFFSET:offset + size])
    if check_crc and body_crc and crc32(body) != body_crc:
        raise CorruptEntryError(f"body CRC mismatch for index {index}: stored {body_crc:#010x}, "
                                f"computed {crc32(body):#010x}", path=path, offset=offset,
                                position=base + offset if path else None)
    return DLedgerEntry(body=body, magic=magic, index=index, term=term, pos=pos, channel=channel,
                        chain_crc=chain_crc, body_crc=body_crc, size=size)


def encode_index(magic: int, pos: int, size: int, index: int, term: int) -> bytes:
    """Encode one 32-byte index unit."""
    return INDEX_UNIT.pack(magic, pos, size, index, term)


def decode_index(buf, offset: int = 0) -> IndexUnit:
    """Decode one 32-byte index unit (no validation: see ``IndexUnit`` fields)."""
    return IndexUnit._make(INDEX_UNIT.unpack_from(buf, offset))


def encode_blank(length: int) -> bytes:
    """A blank padding record covering ``length`` bytes (>= 8), zero-filled after its 8-byte head."""
    if length < MIN_BLANK_LEN:
        raise ValueError(f"a blank record needs at least {MIN_BLANK_LEN} bytes, got {length}")
    return MAGIC_SIZE.pack(MAGIC_BLANK, length) + bytes(length - MIN_BLANK_LEN)


def iter_record_bodies(records, first_index: int) -> Iterator[tuple[int, int, int, int, int]]:
    """``(index, magic, pos, body_start, end)`` of each record of ``records``, a run of whole
    records as ``get_raw_range`` returns them (the first of index ``first_index``): the body of
    each is ``records[body_start:end]``. Nothing is checked here (the store checked the run)."""
    unpack = _MAGIC_SIZE_POS.unpack_from
    off, total, index = 0, len(records), first_index
    while off < total:
        magic, size, pos = unpack(records, off)
        end = off + size
        yield index, magic, pos, off + BODY_OFFSET, end
        off = end
        index += 1


class SegmentItem(NamedTuple):
    """One step of ``iter_segment_records``.

    ``header`` set: a record with a valid header at ``offset`` (its CRC is not checked here).
    ``error`` set: bad bytes at ``offset`` (a misplaced blank, an invalid header); the walk ends.
    Neither: a zero header at ``offset``, where the written data ends; the walk ends.
    """

    offset: int
    header: RecordHeader | None = None
    error: str | None = None


def iter_segment_records(buf, offset: int, end: int, *, path: str | None = None,
                         base: int = 0) -> Iterator[SegmentItem]:
    """Walk the records of one segment ``buf`` from ``offset`` up to ``end`` (the segment size,
    or how far it is written), skipping blank padding. The one walk of the format's rules:

    - a blank record (magic -1, size >= 8) is padding only at the head of a segment (offset 0,
      a reset's head blank) or when it runs exactly to ``end`` (a segment's tail); anywhere
      else it is bad;
    - a zero header (magic 0, size 0) is where the written data ends;
    - anything else must decode (``decode_header``), else it is bad.

    Yields a ``SegmentItem`` per record, and a last one for a zero header or bad bytes; stops
    without one when the walk reaches ``end``. ``path``/``base`` enrich error messages.
    """
    unpack = MAGIC_SIZE.unpack_from
    check = _checked_prefix
    while offset + MIN_BLANK_LEN <= end:
        magic, size = unpack(buf, offset)
        if magic == MAGIC_BLANK:
            if size >= MIN_BLANK_LEN and offset + size <= end and (offset + size == end or offset == 0):
                offset += size
                continue
            yield SegmentItem(offset, None, f"bad blank record of {size} bytes")
            return
        if magic == 0 and size == 0:
            yield SegmentItem(offset)
            return
        try:
            header = _new_tuple(RecordHeader, check(buf, offset, end, path, base))
        except CorruptEntryError as exc:
            yield SegmentItem(offset, None, str(exc))
            return
        yield _new_tuple(SegmentItem, (offset, header, None))
        offset += size
