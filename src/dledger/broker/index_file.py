"""IndexFile: a hash index from ``topic#key`` to physical offsets, in RocketMQ's layout.

One file (``<root>/keyindex/<yyyyMMddHHmmssSSS>``, named after the store time of its first key)::

    header (40 bytes): beginTimestamp:i64 endTimestamp:i64 beginPhyOffset:i64
                       endPhyOffset:i64 hashSlotCount:i32 indexCount:i32
    slots  (hashSlotNum x 4 bytes): the latest index number whose key hashes to the slot
    index  (indexNum x 20 bytes):   keyHash:i32 phyOffset:i64 timeDiff:i32 prevIndex:i32

``keyHash`` is ``abs(String.hashCode)`` of ``topic#key`` (0 when that overflows), the slot is
``keyHash % hashSlotNum``; ``timeDiff`` is seconds since ``beginTimestamp``; ``prevIndex``
chains entries of one slot, newest first; index number 0 is "none", so ``indexCount`` starts
at 1 and a file is full when it reaches ``indexNum``. RocketMQ's defaults are 5,000,000 slots and
20,000,000 entries (a 420 MB file); ours are smaller (50,000 and 200,000, 4.2 MB) and set per
``IndexService``; the layout does not change with them. A lookup walks the chain of the key's
slot in every file, newest first, and keeps entries whose hash matches (the caller checks the
message's real keys, as RocketMQ's ``queryMessage`` does).
"""

from __future__ import annotations

import mmap
import os
import struct
import time

from dledger.broker.message_codec import java_string_hash

HEADER = struct.Struct(">qqqqii")
HEADER_SIZE = 40
SLOT_SIZE = 4
INDEX_SIZE = 20
_SLOT = struct.Struct(">i")
_ENTRY = struct.Struct(">iqii")
DEFAULT_SLOTS = 50_000
DEFAULT_INDEX_NUM = 200_000


def key_hash(key: str) -> int:
    h = abs(java_string_hash(key))
    return h if h < (1 << 31) else 0


def file_name_for(store_timestamp_ms: int) -> str:
    t = time.gmtime(store_timestamp_ms // 1000)
    return time.strftime("%Y%m%d%H%M%S", t) + f"{store_timestamp_ms % 1000:03d}"


class IndexFile:
    def __init__(self, path: str, slots: int = DEFAULT_SLOTS, index_num: int = DEFAULT_INDEX_NUM) -> None:
        self.path = path
        self.slots = slots
        self.index_num = index_num
        size = HEADER_SIZE + slots * SLOT_SIZE + index_num * INDEX_SIZE
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if os.fstat(fd).st_size < size:
                os.ftruncate(fd, size)
            self.mm = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        (self.begin_timestamp, self.end_timestamp, self.begin_phy_offset, self.end_phy_offset,
         self.hash_slot_count, self.index_count) = HEADER.unpack_from(self.mm, 0)
        if self.index_count == 0:
            self.index_count = 1

    @property
    def full(self) -> bool:
        return self.index_count >= self.index_num

    def _write_header(self) -> None:
        HEADER.pack_into(self.mm, 0, self.begin_timestamp, self.end_timestamp, self.begin_phy_offset,
                         self.end_phy_offset, self.hash_slot_count, self.index_count)

    def put_key(self, key: str, phy_offset: int, store_timestamp: int) -> bool:
        """Add ``key`` -> ``phy_offset``; False when the file is full."""
        if self.full:
            return False
        h = key_hash(key)
        slot_pos = HEADER_SIZE + (h % self.slots) * SLOT_SIZE
        prev = _SLOT.unpack_from(self.mm, slot_pos)[0]
        if prev <= 0 or prev > self.index_count:
            prev = 0
        if self.begin_timestamp <= 0:
            diff = 0
        else:
            diff = min(max((store_timestamp - self.begin_timestamp) // 1000, 0), 2**31 - 1)
        pos = HEADER_SIZE + self.slots * SLOT_SIZE + self.index_count * INDEX_SIZE
        _ENTRY.pack_into(self.mm, pos, h, phy_offset, diff, prev)
        _SLOT.pack_into(self.mm, slot_pos, self.index_count)
        if self.index_count <= 1:
            self.begin_phy_offset, self.begin_timestamp = phy_offset, store_timestamp
        if prev == 0:
            self.hash_slot_count += 1
        self.index_count += 1
        self.end_phy_offset, self.end_timestamp = phy_offset, store_timestamp
        self._write_header()
        return True

    def lookup(self, key: str, max_num: int) -> list[int]:
        """Physical offsets of entries whose hash matches ``key``'s, newest first."""
        h = key_hash(key)
        slot_pos = HEADER_SIZE + (h % self.slots) * SLOT_SIZE
        i = _SLOT.unpack_from(self.mm, slot_pos)[0]
        out = []
        seen = 0
        while 0 < i < self.index_count and len(out) < max_num and seen < self.index_count:
            eh, off, _diff, prev = _ENTRY.unpack_from(self.mm, HEADER_SIZE + self.slots * SLOT_SIZE + i * INDEX_SIZE)
            if eh == h:
                out.append(off)
            if prev <= 0 or prev > self.index_count or prev == i:
                break
            i = prev
            seen += 1
        return out

    def entries(self) -> list[tuple[int, int, int, int]]:
        base = HEADER_SIZE + self.slots * SLOT_SIZE
        return [_ENTRY.unpack_from(self.mm, base + i * INDEX_SIZE) for i in range(1, self.index_count)]

    def truncate_from_physical(self, phy_offset: int) -> int:
        """Drop the entries (from the end) whose offset is at or beyond ``phy_offset``: the
        slots are rebuilt from the kept entries. How many went."""
        if self.index_count <= 1 or self.end_phy_offset < phy_offset:
            return 0                       # offsets only grow: nothing at or beyond phy_offset
        kept = self.entries()
        n = len(kept)
        while kept and kept[-1][1] >= phy_offset:
            kept.pop()
        if len(kept) == n:
            return 0
        base = HEADER_SIZE + self.slots * SLOT_SIZE
        self.mm[HEADER_SIZE:base + (n + 1) * INDEX_SIZE] = bytes(base + (n + 1) * INDEX_SIZE - HEADER_SIZE)
        self.index_count, self.hash_slot_count = 1, 0
        begin_ts = self.begin_timestamp
        self.begin_timestamp = self.end_timestamp = self.begin_phy_offset = self.end_phy_offset = 0
        for h, off, diff, _prev in kept:
            slot_pos = HEADER_SIZE + (h % self.slots) * SLOT_SIZE
            prev = _SLOT.unpack_from(self.mm, slot_pos)[0]
            _ENTRY.pack_into(self.mm, base + self.index_count * INDEX_SIZE, h, off, diff, prev)
            _SLOT.pack_into(self.mm, slot_pos, self.index_count)
            if prev == 0:
                self.hash_slot_count += 1
            if self.index_count == 1:
                self.begin_phy_offset, self.begin_timestamp = off, begin_ts
            self.end_phy_offset, self.end_timestamp = off, begin_ts + diff * 1000
            self.index_count += 1
        self._write_header()
        return n - len(kept)

    def flush(self) -> None:
        self.mm.flush()

    def close(self) -> None:
        self.mm.close()
