"""Checking a batch of records pushed by the leader, before a follower writes any of it.

Shared by the file store and the memory store, so both accept and refuse exactly the same
batches. A batch is the leader's encoded records back to back, as they lie in its data file;
blank records in it are skipped (each store writes its own padding, at the same places).

The checks, in order, for every record: a valid header (magic, sizes, bounds), size within
``max_entry_size``, the index continues the log, the term neither goes below the previous
entry's nor above the leader's, the body CRC (when not 0), and the position: the record's
``pos`` must be exactly where this follower would place it, given segments of ``file_size``
bytes and the same blank-padding rule as the leader. That keeps replicas byte-identical.
"""

from __future__ import annotations

from dledger.entry import (BODY_OFFSET, MAGIC_BLANK, MAGIC_SIZE, MIN_BLANK_LEN, RECORD_PREFIX,
                           crc32, decode_header)
from dledger.errors import (INCONSISTENT_INDEX, INCONSISTENT_STATE, INCONSISTENT_TERM,
                            CorruptEntryError, DLedgerError, EntryTooLargeError)


def next_position(cur_from: int, cur_wp: int, size: int, file_size: int) -> tuple[int, int]:
    """Segment start and in-segment offset where a record of ``size`` bytes lands."""
    if file_size - cur_wp < size + MIN_BLANK_LEN:
        return cur_from + file_size, 0
    return cur_from, cur_wp


def plan_follower_batch(view: memoryview, *, expect_index: int, last_term: int, leader_term: int,
                        next_pos: int | None, file_size: int, max_entry_size: int) -> list[tuple]:
    """Validate every record of ``view``; returns where each goes. Raises on the first problem.

    Each item is a plain tuple ``(offset in the batch, size, pos, index, term, magic)`` (tuples, not named tuples: this runs for every replicated entry). ``next_pos`` is
    where this follower's next record would start (None when the log is empty and has no
    position yet: the first record's ``pos`` is then accepted as the start).
    """
    total = len(view)
    plan: list[tuple] = []
    add = plan.append
    if next_pos is None:
        cur_from = cur_wp = None
    else:
        cur_from, cur_wp = next_pos - next_pos % file_size, next_pos % file_size
    unpack = RECORD_PREFIX.unpack_from
    off = 0
    expect = expect_index
    while off < total:
        if off + BODY_OFFSET <= total:
            magic, size, index, term, pos, _ch, _cc, body_crc, body_size = unpack(view, off)
            ok = (0 < magic < 4 and body_size == size - BODY_OFFSET and BODY_OFFSET <= size <= max_entry_size
                  and off + size <= total and index == expect and last_term <= term <= leader_term)
        else:
            ok = False
        if not ok:
            # the rare paths: a blank record (skipped), or a precise error
            off = _blank_or_raise(view, off, total, expect, last_term, leader_term, max_entry_size)
            continue
        if body_crc and crc32(view[off + BODY_OFFSET:off + size]) != body_crc:
            raise CorruptEntryError(f"pushed entry {index}: body CRC mismatch")
        if cur_from is None:
            cur_from, cur_wp = pos - pos % file_size, pos % file_size
        elif file_size - cur_wp < size + MIN_BLANK_LEN:
            cur_from, cur_wp = cur_from + file_size, 0
        if pos != cur_from + cur_wp:
            raise DLedgerError(f"pushed entry {index} has pos {pos} but would land at {cur_from + cur_wp} "
                               f"here (replicas must be byte-identical)", INCONSISTENT_STATE)
        add((off, size, pos, index, term, magic))
        cur_wp += size
        last_term = term
        expect += 1
        off += size
    return plan


def _blank_or_raise(view, off: int, total: int, expect: int, last_term: int, leader_term: int,
                    max_entry_size: int) -> int:
    """Past a blank record at ``off``: returns the offset after it. Anything else that failed
    the fast checks: raises the error that names what is wrong."""
    if off + 8 > total:
        raise CorruptEntryError(f"truncated record at batch offset {off}")
    magic, size = MAGIC_SIZE.unpack_from(view, off)
    if magic == MAGIC_BLANK:
        if size < MIN_BLANK_LEN or off + size > total:
            raise CorruptEntryError(f"bad blank record of {size} bytes at batch offset {off}")
        return off + size
    try:
        magic, size, index, term, *_ = decode_header(view, off)
    except CorruptEntryError as exc:
        raise CorruptEntryError(f"pushed record at batch offset {off}: {exc}") from None
    if size > max_entry_size:
        raise EntryTooLargeError(f"pushed record of {size} bytes exceeds max_entry_size {max_entry_size}")
    if index != expect:
        raise DLedgerError(f"pushed index {index}, expected {expect}", INCONSISTENT_INDEX)
    raise DLedgerError(f"pushed entry {index} has term {term} (previous {last_term}, "
                       f"leader {leader_term})", INCONSISTENT_TERM)
