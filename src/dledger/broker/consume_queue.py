"""ConsumeQueue: one topic-queue's index into the CommitLog, byte-compatible with RocketMQ's.

Files live at ``<root>/consumequeue/<topic>/<queueId>/<start>``, where ``<start>`` is the
20-digit, zero-padded byte offset of the file's first unit. A unit is 20 bytes, big-endian:
commit-log (physical) offset i64, message size i32, tags hash code i64; unit ``q`` (queue offset
``q``) lies at byte ``q * 20``. A file holds 300,000 units (6,000,000 bytes, created sparse at
full size, as RocketMQ preallocates them). A unit whose offset is negative or whose size is 0
ends the queue (RocketMQ's ``ConsumeQueue.recover`` rule).

A queue starts at offset 0, or later (``min_offset``) on a replica that caught up past the
leader's retention: its log begins after the messages that opened the queue, so the queue
starts at the queue offset stamped in the first message it holds (``restart_at``: the old
files go). Its units before ``min_offset`` read as zeros (a sparse file); on open the first
non-zero unit gives ``min_offset`` back.

Units are gathered and written by ``commit`` (one write per file per batch), as plain file
writes (a process crash keeps them: the page cache survives); ``flush`` syncs (or a
checkpoint job does, with the descriptors ``sync_fds`` hands it).
``truncate_from_physical(offset)`` drops every unit whose message starts at or after ``offset``
(recovery: units beyond what the dispatcher's checkpoint vouches for).
"""

from __future__ import annotations

import os
import struct

CQ_UNIT_SIZE = 20
UNITS_PER_FILE = 300_000
_UNIT = struct.Struct(">qiq")
_ZERO_UNIT = bytes(CQ_UNIT_SIZE)


def file_name(start_byte: int) -> str:
    return f"{start_byte:020d}"


class ConsumeQueue:
    def __init__(self, root: str, topic: str, queue_id: int, *, units_per_file: int = UNITS_PER_FILE) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.dir = os.path.join(root, "consumequeue", topic, str(queue_id))
        self.file_size = units_per_file * CQ_UNIT_SIZE
        self._fds: dict[int, int] = {}
        self._pending: list[bytes] = []
        #: whether a write since the last ``flush`` still needs a sync
        self._dirty = False
        self._pending_from = 0
        #: queue offset of the next unit
        self.max_offset = 0
        #: queue offset of the first unit (0 unless the queue started later: ``restart_at``)
        self.min_offset = 0
        #: physical offset just past the last unit's message (0 when empty)
        self.max_physical_offset = 0
        self._load()

    # -- files ----------------------------------------------------------------------------
    def _starts(self) -> list[int]:
        if not os.path.isdir(self.dir):
            return []
        return sorted(int(n) for n in os.listdir(self.dir) if n.isdigit() and len(n) == 20)

    def _fd(self, start: int, create: bool) -> int | None:
        fd = self._fds.get(start)
        if fd is None:
            path = os.path.join(self.dir, file_name(start))
            if not create and not os.path.exists(path):
                return None
            os.makedirs(self.dir, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            if os.fstat(fd).st_size < self.file_size:
                os.ftruncate(fd, self.file_size)
            self._fds[start] = fd
        return fd

    def _load(self) -> None:
        """Find the first unit (past the zeros before ``min_offset``, in the first file) and
        the end: the first unit after it with a negative offset or size 0."""
        starts = self._starts()
        first = 0
        for start in starts:
            data = os.pread(self._fd(start, False), self.file_size, 0)
            k = 0
            while k * CQ_UNIT_SIZE < len(data) and data[k * CQ_UNIT_SIZE:(k + 1) * CQ_UNIT_SIZE] == _ZERO_UNIT:
                k += 1
            if k * CQ_UNIT_SIZE < len(data):
                first = start + k * CQ_UNIT_SIZE
                break
        end = first
        for start in reversed(starts):
            if start + self.file_size <= first:
                break
            fd = self._fd(start, False)
            data = os.pread(fd, self.file_size, 0)
            count = max(0, first - start) // CQ_UNIT_SIZE
            skip = count
            while count * CQ_UNIT_SIZE < len(data):
                off, size, _tags = _UNIT.unpack_from(data, count * CQ_UNIT_SIZE)
                if off < 0 or size <= 0:
                    break
                count += 1
            if count > skip:
                end = start + count * CQ_UNIT_SIZE
                break
        self.min_offset = first // CQ_UNIT_SIZE if end > first else 0
        self.max_offset = end // CQ_UNIT_SIZE if end > first else 0
        if self.max_offset:
            off, size, _ = self.unit(self.max_offset - 1)
            self.max_physical_offset = off + size
        self._zero_from(self.max_offset * CQ_UNIT_SIZE)

    def _zero_from(self, end_byte: int) -> None:
        """Zero everything from byte ``end_byte`` on (a torn tail or units truncated away)."""
        self._dirty = True
        for start in self._starts():
            if start + self.file_size <= end_byte:
                continue
            fd = self._fd(start, False)
            begin = max(0, end_byte - start)
            if begin == 0 and start > 0:
                os.close(self._fds.pop(start))
                os.unlink(os.path.join(self.dir, file_name(start)))
                continue
            os.ftruncate(fd, begin)
            os.ftruncate(fd, self.file_size)

    # -- units ----------------------------------------------------------------------------
    def put(self, queue_offset: int, physical_offset: int, size: int, tags_code: int) -> None:
        """Add the unit of ``queue_offset``; it must be the next one (no gap, no overwrite). It
        reaches the file at the next ``commit`` (the reput service commits every batch)."""
        if queue_offset != self.max_offset:
            raise ValueError(f"consume queue {self.topic}/{self.queue_id}: unit {queue_offset} "
                             f"arrives while the next is {self.max_offset}")
        if not self._pending:
            self._pending_from = queue_offset
        self._pending.append(_UNIT.pack(physical_offset, size, tags_code))
        self.max_offset = queue_offset + 1
        self.max_physical_offset = physical_offset + size

    def put_next(self, physical_offset: int, size: int, tags_code: int) -> None:
        """``put(max_offset, ...)``: the unit after the last one (the reput service's path)."""
        pending = self._pending
        if not pending:
            self._pending_from = self.max_offset
        pending.append(_UNIT.pack(physical_offset, size, tags_code))
        self.max_offset += 1
        self.max_physical_offset = physical_offset + size

    def put_run(self, units: bytes, count: int, physical_end: int) -> None:
        """``count`` units after the last one at once: ``units`` holds them packed, in order
        (the reput service's gathered path); ``physical_end`` is the last one's message end."""
        pending = self._pending
        if not pending:
            self._pending_from = self.max_offset
        pending.append(units)
        self.max_offset += count
        self.max_physical_offset = physical_end

    def restart_at(self, queue_offset: int) -> None:
        """Drop every unit; the queue starts again at ``queue_offset`` (its next unit is that
        one). For a replica whose log now begins after the messages this queue held: they are
        not in its log any more, and the queue resumes at the first message it holds."""
        if queue_offset < 0:
            raise ValueError(f"consume queue {self.topic}/{self.queue_id}: cannot start at {queue_offset}")
        self._pending.clear()
        for start in self._starts():
            fd = self._fds.pop(start, None)
            if fd is not None:
                os.close(fd)
            os.unlink(os.path.join(self.dir, file_name(start)))
        self._dirty = True
        self.min_offset = self.max_offset = queue_offset
        self.max_physical_offset = 0

    def first_offset_from(self, physical_offset: int) -> int:
        """The first queue offset whose message starts at or after ``physical_offset`` (the log's
        first retained position: RocketMQ's min offset of a queue after retention); ``max_offset``
        when none does. Physical offsets grow along a queue, so this is a binary search."""
        lo, hi = self.min_offset, self.max_offset
        while lo < hi:
            mid = (lo + hi) // 2
            if self.unit(mid)[0] >= physical_offset:
                hi = mid
            else:
                lo = mid + 1
        return lo

    def commit(self) -> None:
        """Write the units ``put`` since the last commit: one write per file they fall in."""
        if not self._pending:
            return
        byte = self._pending_from * CQ_UNIT_SIZE
        data = b"".join(self._pending)
        self._pending.clear()
        while data:
            start = byte - byte % self.file_size
            room = start + self.file_size - byte
            os.pwrite(self._fd(start, True), data[:room], byte - start)
            self._dirty = True
            data, byte = data[room:], byte + room

    def unit(self, queue_offset: int) -> tuple[int, int, int]:
        """``(physical offset, size, tags code)`` of ``queue_offset`` (< ``max_offset``)."""
        self.commit()
        byte = queue_offset * CQ_UNIT_SIZE
        start = byte - byte % self.file_size
        return _UNIT.unpack(os.pread(self._fd(start, False), CQ_UNIT_SIZE, byte - start))

    def units(self, queue_offset: int, max_count: int) -> list[tuple[int, int, int]]:
        """Up to ``max_count`` units from ``queue_offset`` on, read with one read per file."""
        self.commit()
        q = max(queue_offset, self.min_offset)
        end = min(self.max_offset, q + max_count)
        out = []
        while q < end:
            byte = q * CQ_UNIT_SIZE
            start = byte - byte % self.file_size
            n = min(end - q, (start + self.file_size - byte) // CQ_UNIT_SIZE)
            data = os.pread(self._fd(start, False), n * CQ_UNIT_SIZE, byte - start)
            out.extend(_UNIT.iter_unpack(data))
            q += n
        return out

    def truncate_from_physical(self, physical_offset: int) -> int:
        """Drop units whose message starts at or after ``physical_offset``; how many went."""
        self.commit()
        keep = self.max_offset
        while keep > self.min_offset and self.unit(keep - 1)[0] >= physical_offset:
            keep -= 1
        dropped = self.max_offset - keep
        if dropped:
            self._zero_from(keep * CQ_UNIT_SIZE)
            self.max_offset = keep
            self.max_physical_offset = sum(self.unit(keep - 1)[:2]) if keep > self.min_offset else 0
        return dropped

    def truncate_to(self, count: int) -> bool:
        """Keep the units below ``count`` (the max offset a checkpoint vouches for) and zero the
        rest; False, changing nothing, when the queue does not reach ``count``. A ``count`` at
        or below ``min_offset`` leaves the queue empty, starting at ``count``."""
        self.commit()
        if self.max_offset < count:
            return False
        if self.max_offset > count or count <= self.min_offset:
            self._zero_from(count * CQ_UNIT_SIZE)
        if count <= self.min_offset:
            self._zero_from(0)
            self.min_offset = count
        self.max_offset = count
        self.max_physical_offset = sum(self.unit(count - 1)[:2]) if count > self.min_offset else 0
        return True

    def sync_fds(self) -> list[int]:
        """For a checkpoint: write what is pending and, when anything changed since the last
        sync (a checkpoint syncs only the queues that moved), a descriptor of each file to
        sync, duplicated: the caller syncs and closes them (``checkpoint_writer``), and calls
        ``mark_unsynced`` if that failed."""
        self.commit()
        if not self._dirty:
            return []
        fds: list[int] = []
        try:
            for fd in self._fds.values():
                fds.append(os.dup(fd))
        except BaseException:           # out of descriptors: nothing handed over, still dirty
            for fd in fds:
                os.close(fd)
            raise
        self._dirty = False
        return fds

    def mark_unsynced(self) -> None:
        self._dirty = True

    def flush(self) -> None:
        """Write what is pending and sync the files, when anything changed since the last sync."""
        fds = self.sync_fds()
        try:
            for fd in fds:
                os.fsync(fd)
        except BaseException:
            self._dirty = True
            raise
        finally:
            for fd in fds:
                os.close(fd)

    def close(self, commit: bool = True) -> None:
        """Close the files (``commit=False``: as a crash does, leaving units not written yet)."""
        if commit:
            self.commit()
        self._pending.clear()
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()


def list_queues(root: str) -> list[tuple[str, int]]:
    """Every ``(topic, queue id)`` with a consume queue directory under ``root``."""
    base = os.path.join(root, "consumequeue")
    out = []
    if os.path.isdir(base):
        for topic in sorted(os.listdir(base)):
            tdir = os.path.join(base, topic)
            for q in sorted(os.listdir(tdir)) if os.path.isdir(tdir) else ():
                if q.isdigit():
                    out.append((topic, int(q)))
    return out
