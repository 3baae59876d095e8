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

The header may be written once per batch of keys (``put_hashes`` then ``write_header``; the
reput service writes it before its checkpoint): entries beyond the header's ``indexCount`` are
then keys put since, whose header never got written (a crash in between). Opening a file
(``undo=True``; the reput service instead cuts each file back to its durable checkpoint's
count, ``truncate_to``, which a torn header cannot mislead) undoes them, newest first (each slot gets back the entry's ``prevIndex``, the entry is
zeroed), so the file is again exactly what its header says; nothing beyond ``indexCount`` is
ever non-zero otherwise.
"""

from __future__ import annotations

import mmap
import os
import struct
import time

from dledger.broker.message_codec import KEY_SEPARATOR, java_string_hash
from dledger.broker.speedups import compiled as _compiled

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


_M32 = 0xFFFFFFFF
#: the most topic and head sums a ``KeyHasher`` keeps (then it starts again empty)
_CACHE_MAX = 1 << 16


class KeyHasher:
    """``key_hash(f"{topic}#{key}")`` without hashing every character every time.

    Java's hash is a polynomial in 31 (mod 2**32), so for an ASCII key of ``L`` characters
    ``h(topic#key) = h(topic#) * 31**L + h(key[:-2]) * 31**2 + h(key[-2:])``. The first two
    terms depend on the topic and the key's head only (``L`` is the head's length + 2): their
    sum is kept per topic and head (keys such as RocketMQ's UNIQ_KEY or ``order-<n>`` share
    their heads for hundreds of messages), and the last term per pair of characters, so a key
    mostly costs two look-ups. Other keys (shorter than 3 or not ASCII) take ``key_hash`` (the
    same value). At most ``_CACHE_MAX`` sums are kept, all topics together (the pairs, at most
    128 * 128, apart).
    """

    def __init__(self) -> None:
        self._topics: dict[str, tuple[int, dict[str, int]]] = {}
        self._kept = 0
        #: h(two ASCII characters), by the characters
        self._pairs: dict[str, int] = {}

    def __call__(self, topic: str, key: str) -> int:
        return self.message(topic, key, None)[0] if key else key_hash(f"{topic}#")

    def message(self, topic: str, uniq_key: str | None, keys: str | None) -> list[int]:
        """The hashes of ``topic#uniq_key`` and ``topic#key`` for each key of ``keys`` split on
        spaces, in that order, empty keys dropped."""
        if keys:
            keys = keys.split(KEY_SEPARATOR) if KEY_SEPARATOR in keys else [keys]
            if uniq_key:
                keys.insert(0, uniq_key)
        elif uniq_key:
            keys = [uniq_key]
        else:
            return []
        kept = self._topics.get(topic)
        if kept is None:
            self._kept += 1
            if self._kept > _CACHE_MAX:
                self._topics.clear()
                self._kept = 1
            kept = self._topics[topic] = (java_string_hash(topic + "#") & _M32, {})
        t, heads = kept
        pairs = self._pairs
        out: list[int] = []
        for key in keys:
            if len(key) < 3 or not key.isascii():
                if key:
                    out.append(key_hash(f"{topic}#{key}"))
                continue
            head = key[:-2]
            u = heads.get(head)
            if u is None:
                self._kept += 1
                if self._kept > _CACHE_MAX:
                    self._topics.clear()
                    self._topics[topic] = (t, heads)
                    heads.clear()
                    self._kept = 2                       # this topic and the head kept below
                u = heads[head] = (t * pow(31, len(key), 1 << 32) + java_string_hash(head) * 961) & _M32
            tail = key[-2:]
            v = pairs.get(tail)
            if v is None:
                v = pairs[tail] = ord(tail[0]) * 31 + ord(tail[1])
            u = (u + v) & _M32
            out.append(u if u < 0x80000000 else (0x100000000 - u if u > 0x80000000 else 0))
        return out


def file_name_for(store_timestamp_ms: int) -> str:
    t = time.gmtime(store_timestamp_ms // 1000)
    return time.strftime("%Y%m%d%H%M%S", t) + f"{store_timestamp_ms % 1000:03d}"


class IndexFile:
    def __init__(self, path: str, slots: int = DEFAULT_SLOTS, index_num: int = DEFAULT_INDEX_NUM,
                 undo: bool = True) -> None:
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
        if not 1 <= self.index_count <= index_num:
            self.index_count = 1           # a new file, or a header a power cut tore
        self._entries_base = HEADER_SIZE + slots * SLOT_SIZE
        #: the header as of the last sync (None: never synced by this object)
        self._synced_header = None
        if undo:
            self._undo_unwritten()

    def _undo_unwritten(self) -> int:
        """Undo the entries beyond ``indexCount`` (put, header never written); how many."""
        base, zero = self._entries_base, bytes(INDEX_SIZE)
        end = self.index_count
        while end < self.index_num and self.mm[base + end * INDEX_SIZE:base + (end + 1) * INDEX_SIZE] != zero:
            end += 1
        for i in range(end - 1, self.index_count - 1, -1):
            h, _off, _diff, prev = _ENTRY.unpack_from(self.mm, base + i * INDEX_SIZE)
            _SLOT.pack_into(self.mm, HEADER_SIZE + (h % self.slots) * SLOT_SIZE, prev)
            self.mm[base + i * INDEX_SIZE:base + (i + 1) * INDEX_SIZE] = zero
        return end - self.index_count

    @property
    def full(self) -> bool:
        return self.index_count >= self.index_num

    def write_header(self) -> None:
        HEADER.pack_into(self.mm, 0, self.begin_timestamp, self.end_timestamp, self.begin_phy_offset,
                         self.end_phy_offset, self.hash_slot_count, self.index_count)

    def put_key(self, key: str, phy_offset: int, store_timestamp: int) -> bool:
        """Add ``key`` -> ``phy_offset`` and write the header; False when the file is full."""
        if not self.put_hashes([(key_hash(key), phy_offset, store_timestamp)]):
            return False
        self.write_header()
        return True

    def put_hashes(self, work: list[tuple[int, int, int]], start: int = 0) -> int:
        """Add the entries ``work[start:]``, each ``(key_hash, phy_offset, store_timestamp)``,
        in order until the file is full; how many went in. The header reaches the file at the
        next ``write_header``. Compiled where the broker's hot loops are (``speedups``), else
        ``_put_hashes_python``, the reference: the same bytes and fields."""
        if _compiled is None:
            return self._put_hashes_python(work, start)
        taken, count, used, begin, begin_phy = _compiled.put_index_entries(
            self.mm, self.slots, self._entries_base, self.index_count, self.index_num, self.begin_timestamp,
            self.hash_slot_count, work, start)
        if taken:
            self.index_count, self.hash_slot_count, self.begin_timestamp = count, used, begin
            if begin_phy is not None:
                self.begin_phy_offset = begin_phy
            _h, self.end_phy_offset, self.end_timestamp = work[start + taken - 1]
        return taken

    def _put_hashes_python(self, work: list[tuple[int, int, int]], start: int = 0) -> int:
        """``put_hashes`` in Python (the reference of the compiled loop)."""
        count, room = self.index_count, self.index_num
        if count >= room or start >= len(work):
            return 0
        mm, slots, base = self.mm, self.slots, self._entries_base
        begin = self.begin_timestamp
        used = self.hash_slot_count
        read_slot, write_slot, write_entry = _SLOT.unpack_from, _SLOT.pack_into, _ENTRY.pack_into
        stop = min(len(work), start + room - count)
        last = diff = None
        for i in range(start, stop):
            h, phy_offset, store_timestamp = work[i]
            slot_pos = HEADER_SIZE + (h % slots) * SLOT_SIZE
            prev = read_slot(mm, slot_pos)[0]
            if prev <= 0 or prev > count:
                prev = 0
                used += 1
            if store_timestamp != last:                    # a message's keys share their time
                last = store_timestamp
                if begin <= 0:
                    diff = 0
                else:
                    diff = (store_timestamp - begin) // 1000
                    diff = 0 if diff < 0 else (diff if diff < 0x7FFFFFFF else 0x7FFFFFFF)
            write_entry(mm, base + count * INDEX_SIZE, h, phy_offset, diff, prev)
            write_slot(mm, slot_pos, count)
            if count <= 1:
                self.begin_phy_offset = phy_offset
                begin = store_timestamp
                last = None
            count += 1
        self.index_count, self.hash_slot_count, self.begin_timestamp = count, used, begin
        _h, self.end_phy_offset, self.end_timestamp = work[stop - 1]
        return stop - start

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
        self._rebuild(kept, n + 1)
        return n - len(kept)

    def truncate_to(self, count: int) -> None:
        """Keep exactly entries ``1 .. count - 1`` (what a checkpoint vouches for: synced before
        it was written) and rebuild the slots and the header from them, whatever a power cut
        left in the slots, the header or the entries beyond."""
        count = max(1, min(count, self.index_num))
        base = HEADER_SIZE + self.slots * SLOT_SIZE
        kept = [_ENTRY.unpack_from(self.mm, base + i * INDEX_SIZE) for i in range(1, count)]
        header = HEADER.unpack_from(self.mm, 0)
        self._rebuild(kept, self.index_num)
        if header[5] == count:
            # the header is the one written with these entries: keep its exact times (the
            # rebuild knows them to the second only)
            self.begin_timestamp, self.end_timestamp = header[0], header[1]
            self.write_header()

    def _rebuild(self, kept: list, clear_entries: int) -> None:
        """Zero the slots and the first ``clear_entries`` entries, then add ``kept`` again."""
        base = HEADER_SIZE + self.slots * SLOT_SIZE
        self.mm[HEADER_SIZE:base + clear_entries * INDEX_SIZE] = bytes(base + clear_entries * INDEX_SIZE - HEADER_SIZE)
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
        self.write_header()

    def sync_fd(self) -> int | None:
        """For a checkpoint: a new descriptor of the file to sync when its header changed since
        the last sync (entries and slots are only written together with a header write, before
        a checkpoint), else None. The caller syncs it (an fsync writes the pages dirtied through
        the mapping) and closes it, and calls ``mark_unsynced`` if that failed."""
        header = HEADER.unpack_from(self.mm, 0)
        if header == self._synced_header:
            return None
        fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        self._synced_header = header
        return fd

    def mark_unsynced(self) -> None:
        self._synced_header = None

    def close(self) -> None:
        self.mm.close()
