"""PushRanges: the records a leader reads for its pushes, read once for all followers, never
served once the log's begin has moved, and a damaged record never read for a push."""

from types import SimpleNamespace

import pytest

from dledger.core.push_ranges import KEPT, PushRanges
from dledger.errors import CorruptEntryError


class Log:
    """A leader's log as the push reads it: records ``name:index`` of term ``index // 10``,
    some damaged; counts the range reads."""

    def __init__(self, end: int, damaged=(), name: str = "a") -> None:
        self.ledger_before_begin_index, self.ledger_end_index = -1, end
        self.damaged, self.name, self.reads = set(damaged), name, []

    def get_raw_range(self, first: int, max_bytes: int, max_count: int) -> tuple[bytes, int]:
        self.reads.append((first, max_count))
        last = min(first + max_count - 1, self.ledger_end_index)
        if any(i in self.damaged for i in range(first, last + 1)):
            raise CorruptEntryError(f"a damaged record in {first}..{last}")
        return b"".join(f"{self.name}:{i};".encode() for i in range(first, last + 1)), last - first + 1

    def get_entry_term(self, index: int) -> int:
        return index // 10


def ranges(log: Log, count: int = 4) -> PushRanges:
    return PushRanges(log, SimpleNamespace(max_batch_append_size=1 << 20, max_batch_append_count=count))


def test_a_range_is_read_once_for_every_follower_with_the_terms_around_it():
    log = Log(end=30)
    r = ranges(log)
    first = r.read(8)
    assert first == (b"a:8;a:9;a:10;a:11;", 4, 1, 0)
    assert r.read(8) is first and log.reads == [(8, 4)]
    assert r.read(0).pre_term == -1


def test_what_was_read_before_the_log_begin_moved_is_read_again():
    log = Log(end=30)
    r = ranges(log)
    assert r.read(12).raw.startswith(b"a:12;")
    log.ledger_before_begin_index, log.name = 10, "b"          # a reset: other records from 11 on
    assert r.read(12).raw.startswith(b"b:12;") and len(log.reads) == 2


def test_forget_drops_every_range():
    log = Log(end=30)
    r = ranges(log)
    r.read(3)
    r.forget()
    r.read(3)
    assert log.reads == [(3, 4), (3, 4)]


def test_a_damaged_record_in_a_range_leaves_the_records_before_it_pushable_and_is_never_read():
    log = Log(end=30, damaged={6})
    r = ranges(log)
    assert r.read(5) == (b"a:5;", 1, 0, 0)                        # the record before the damage alone
    with pytest.raises(CorruptEntryError):
        r.read(6)                                                 # the damage itself: the pusher pauses
    with pytest.raises(CorruptEntryError):
        ranges(Log(end=30, damaged={6}), count=1).read(6)         # one record a push: no second try


def test_at_most_kept_ranges_are_kept_the_oldest_forgotten_first():
    log = Log(end=KEPT + 10)
    r = ranges(log, count=1)
    for i in range(KEPT + 1):
        r.read(i)
    r.read(KEPT)
    r.read(1)
    assert len(log.reads) == KEPT + 1                             # the newest ones were kept
    r.read(0)
    assert len(log.reads) == KEPT + 2                             # the oldest was forgotten
