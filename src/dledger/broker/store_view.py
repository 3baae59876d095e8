"""Reading a DLedger store by physical position, as RocketMQ's DLedgerCommitLog reads its
``MmapFileList`` (``getData(offset, size)``): the file store's data segments, or the memory
store's records. A message never spans two segments (DLedger pads a segment's end with a
blank record and starts the next entry in the next segment), so a read at a message's offset
is one slice; a read that falls into the padding, or past what is written, gives None.
"""

from __future__ import annotations

from bisect import bisect_right


def read_at(store, pos: int, size: int) -> bytes | None:
    """``size`` bytes at global position ``pos`` (None when they are not all one written record's)."""
    if pos < 0 or size <= 0:
        return None
    data_list = getattr(store, "data_list", None)
    if data_list is not None:
        return data_list.get_data(pos, size)
    positions = getattr(store, "_positions", None)
    if positions is None:
        return None
    k = bisect_right(positions, pos) - 1
    if k < 0:
        return None
    rec = store._records[k]
    off = pos - positions[k]
    if off + size > len(rec):
        return None
    return bytes(rec[off:off + size])


def max_position(store) -> int:
    """Where the next record will be written (RocketMQ's ``getMaxOffset`` of the CommitLog)."""
    data_list = getattr(store, "data_list", None)
    if data_list is not None:
        return data_list.max_wrote_position()
    return getattr(store, "_next_pos", 0)


def min_position(store) -> int:
    data_list = getattr(store, "data_list", None)
    if data_list is not None:
        return data_list.min_offset()
    positions = getattr(store, "_positions", None)
    return positions[0] if positions else max_position(store)


def entry_end(store, index: int) -> int:
    """The position just past entry ``index`` (0 before the first entry)."""
    if index < 0 or index <= getattr(store, "ledger_before_begin_index", -1):
        return 0
    e = store.get(index)
    return e.pos + e.size


