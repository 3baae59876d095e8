"""The file store against an in-memory model, under random operations and crashes (ST-22).

A hypothesis state machine drives one ``DLedgerMmapFileStore`` with tiny segments (so single
and batched appends roll data and index segments over) through leader and follower appends,
term changes, commits, truncations, prefix resets, retention cleaning, flushes (with and
without a checkpoint), clean closes, process crashes and power losses, each followed by a
reopen (and sometimes a read-only open). The model is a dict of index -> (term, body) plus
begin/end.

After every step the store must equal the model exactly. After a process crash (page cache
survives) and a clean close it must equal the model exactly, too. After a power loss (only
msync'ed pages survive, or a random subset of the unsynced sectors too, see
``dledger.sim.disk.PowerLoss``) it must equal a prefix of the model that keeps at least
everything made durable: everything flushed in ``page_cache`` mode, every append in
``fsync`` mode. The committed index is never above the model's and never below the one
persisted by the last flush. ``DLEDGER_MODEL_EXAMPLES`` sets the number of examples
(default 300, about 10-20 s).
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile

import hypothesis.strategies as st
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from dledger.entry import BODY_OFFSET, DLedgerEntry, encode
from dledger.errors import INCONSISTENT_STATE, INDEX_LESS_THAN_LOCAL_BEGIN, INDEX_OUT_OF_RANGE, DLedgerError
from dledger.store import DLedgerMmapFileStore
from dledger.store.follower_batch import next_position
from dledger.sim.disk import PowerLoss, crash_store

DATA_FILE_SIZE = 512
INDEX_FILE_SIZE = 32 * 8
MAX_BODY = DATA_FILE_SIZE - 8 - BODY_OFFSET  # the largest record that fits a segment

bodies = st.builds(lambda n, seed: bytes((seed + 3 * k) % 256 for k in range(n)),
                   st.one_of(st.integers(0, 40), st.integers(150, MAX_BODY)), st.integers(0, 255))


def _disk_75_percent_full(path):
    return (100, 75, 25)  # above the 0.70 ratio at which clean() deletes expired segments


class StoreModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="dledger-model-")
        self.power = PowerLoss()
        self.store: DLedgerMmapFileStore | None = None
        self.entries: dict[int, tuple[int, bytes]] = {}
        self.bb_index, self.bb_term = -1, -1
        self.end_index = -1
        self.term = 0
        self.committed = -1
        self.durable_end = -1          # survives a power loss
        self.flushed_committed = -1    # persisted by the last flush / close

    # -- lifecycle -------------------------------------------------------------------------
    def open(self, read_only: bool = False) -> DLedgerMmapFileStore:
        store = DLedgerMmapFileStore.open(self.dir, data_file_size=DATA_FILE_SIZE,
                                          index_file_size=INDEX_FILE_SIZE,
                                          durability=self.durability, read_only=read_only,
                                          disk_usage=_disk_75_percent_full, store_io=self.power.io)
        if not read_only:
            self.store = store
        return store

    @initialize(durability=st.sampled_from(["page_cache", "fsync"]))
    def start(self, durability):
        self.durability = durability
        self.open()

    def teardown(self) -> None:
        try:
            if self.store is not None and not self.store.closed:
                crash_store(self.store)
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    # -- helpers ---------------------------------------------------------------------------
    def last_term(self) -> int:
        return self.entries[self.end_index][0] if self.end_index in self.entries else self.bb_term

    def appended(self, first: int, items: list[bytes]) -> None:
        assert first == self.end_index + 1
        for k, b in enumerate(items):
            self.entries[first + k] = (self.term, b)
        self.end_index = first + len(items) - 1
        if self.durability == "fsync":
            self.durable_end = self.end_index

    # -- rules -----------------------------------------------------------------------------
    @rule(body=bodies)
    def append(self, body):
        e = self.store.append_as_leader(DLedgerEntry(body=body))
        assert (e.index, e.term, e.body) == (self.end_index + 1, self.term, body)
        self.appended(e.index, [body])

    @rule(items=st.lists(bodies, min_size=1, max_size=6))
    def batch_append(self, items):
        res = self.store.batch_append_as_leader(items)
        assert (res.first_index, res.term, len(res.positions)) == (self.end_index + 1, self.term, len(items))
        assert res.positions == sorted(res.positions)
        self.appended(res.first_index, items)

    @rule(items=st.lists(bodies, min_size=1, max_size=4))
    def follower_batch_append(self, items):
        """The same entries as a leader would push them: encoded, at the leader's positions."""
        data = self.store.data_list
        if not data.files:
            return  # no position known yet: a leader would truncate_to_entry first
        pos = data.max_wrote_position()
        cur_from, cur_wp = pos - pos % DATA_FILE_SIZE, pos % DATA_FILE_SIZE
        records = []
        for k, b in enumerate(items):
            size = BODY_OFFSET + len(b)
            cur_from, cur_wp = next_position(cur_from, cur_wp, size, DATA_FILE_SIZE)
            records.append(encode(DLedgerEntry(body=b, index=self.end_index + 1 + k, term=self.term,
                                               pos=cur_from + cur_wp)))
            cur_wp += size
        first = self.end_index + 1
        assert self.store.batch_append_as_follower(b"".join(records), self.term) == first + len(items) - 1
        self.appended(first, items)

    @rule()
    def next_term(self):
        self.term += 1
        self.store.persist_term(self.term, None)

    @precondition(lambda self: self.end_index > self.committed)
    @rule(data=st.data())
    def commit(self, data):
        i = data.draw(st.integers(self.committed + 1, self.end_index))
        self.store.update_committed_index(i)
        self.committed = i
        assert self.store.committed_index == i

    @precondition(lambda self: self.end_index > max(self.committed, self.bb_index))
    @rule(data=st.data())
    def truncate(self, data):
        i = data.draw(st.integers(max(self.committed, self.bb_index) + 1, self.end_index))
        assert self.store.truncate(i) == i - 1
        for k in range(i, self.end_index + 1):
            del self.entries[k]
        self.end_index = i - 1
        self.durable_end = min(self.durable_end, self.end_index)

    @precondition(lambda self: self.committed >= 0 and self.committed > self.bb_index)
    @rule(data=st.data())
    def truncate_committed_is_refused(self, data):
        i = data.draw(st.integers(self.bb_index + 1, self.committed))
        try:
            self.store.truncate(i)
        except DLedgerError as exc:
            assert exc.code == INCONSISTENT_STATE
        else:
            raise AssertionError(f"truncate({i}) removed committed entries (committed {self.committed})")

    @rule(data=st.data())
    def reset(self, data):
        k = data.draw(st.integers(self.bb_index + 1, self.end_index + 3))
        bb_term = self.entries[k][0] if k in self.entries else self.term
        assert self.store.reset(k, bb_term) == k + 1
        self.committed = max(self.committed, k)  # a reset prefix counts as committed
        for i in [i for i in self.entries if i <= k]:
            del self.entries[i]
        self.bb_index, self.bb_term = k, bb_term
        if k >= self.end_index:
            self.end_index = k
        self.durable_end = max(self.durable_end, k)

    @rule()
    def clean_expired_segments(self):
        """Retention: whole head segments whose entries are all committed may go."""
        old_bb = self.bb_index
        deleted = self.store.clean(4e9)  # far future: every segment has expired
        bb = self.store.ledger_before_begin_index
        assert old_bb <= bb <= max(self.committed, old_bb)
        assert bb == old_bb or deleted > 0  # (a deleted segment may have held only blanks)
        if bb > old_bb:
            self.bb_term = self.entries[bb][0]
            for i in range(old_bb + 1, bb + 1):
                del self.entries[i]
            self.bb_index = bb

    @rule()
    def read_only_view_after_crash(self):
        """An offline reader of a crashed store sees the same log, and changes nothing."""
        crash_store(self.store)
        ro = self.open(read_only=True)
        try:
            self.check_equal(ro)
        finally:
            ro.close()
        self.open()
        self.check_equal()
        self.check_committed_after_restart()

    @rule()
    def flush(self):
        self.store.flush()
        self.durable_end = self.end_index
        self.flushed_committed = self.committed

    @rule()
    def flush_without_checkpoint(self):
        """The periodic data flush between checkpoints: durable, but no checkpoint vouches yet."""
        self.store.flush(checkpoint=False)
        self.durable_end = self.end_index

    @rule()
    def close_and_reopen(self):
        self.store.close()
        self.durable_end = self.end_index
        self.flushed_committed = self.committed
        self.open()
        assert self.store.committed_index == self.committed
        self.check_equal()

    @rule()
    def crash_and_reopen(self):
        crash_store(self.store)
        self.open()
        self.check_equal()
        self.check_committed_after_restart()

    @rule()
    def power_loss_and_reopen(self):
        self.power.power_loss(self.store)
        self.after_power_loss()

    @rule(seed=st.integers(0, 2**32 - 1))
    def power_loss_with_reordered_writeback_and_reopen(self, seed):
        """Unsynced sectors reach the disk or not, at random (torn, reordered write-back)."""
        self.power.power_loss(self.store, random.Random(seed))
        self.after_power_loss()

    def after_power_loss(self):
        self.open()
        s = self.store
        low = max(self.durable_end, self.bb_index)
        assert low <= s.ledger_end_index <= self.end_index, \
            f"end {s.ledger_end_index} outside [{low}, {self.end_index}]"
        # what survived is a prefix of the model: cut the model to it
        for k in range(s.ledger_end_index + 1, self.end_index + 1):
            del self.entries[k]
        self.end_index = s.ledger_end_index
        self.durable_end = min(self.durable_end, self.end_index)
        self.check_equal()
        self.check_committed_after_restart()

    # -- checks ----------------------------------------------------------------------------
    def check_committed_after_restart(self) -> None:
        c = self.store.committed_index
        assert min(self.flushed_committed, self.end_index) <= c <= self.committed, \
            f"committed {c} outside [{self.flushed_committed}, {self.committed}]"
        self.committed = c
        assert self.store.current_term == self.term

    def check_equal(self, store=None) -> None:
        s = store or self.store
        assert (s.ledger_before_begin_index, s.ledger_end_index) == (self.bb_index, self.end_index)
        assert s.ledger_end_term == (self.last_term() if self.end_index > self.bb_index else self.bb_term)
        assert s.ledger_before_begin_term == self.bb_term
        prev_end = None
        for e in s.iter_entries():
            assert (e.term, e.body) == self.entries[e.index], f"entry {e.index}"
            assert prev_end is None or e.pos >= prev_end
            prev_end = e.pos + e.size
        assert sorted(self.entries) == list(range(self.bb_index + 1, self.end_index + 1))

    @invariant()
    def store_equals_model(self):
        if self.store is None:
            return
        self.check_equal()
        s = self.store
        try:
            s.get(self.end_index + 1)
            raise AssertionError("read past the end")
        except DLedgerError as exc:
            assert exc.code == INDEX_OUT_OF_RANGE
        if self.bb_index >= 0:
            try:
                s.get(self.bb_index)
                raise AssertionError("read before the begin")
            except DLedgerError as exc:
                assert exc.code == INDEX_LESS_THAN_LOCAL_BEGIN


EXAMPLES = int(os.environ.get("DLEDGER_MODEL_EXAMPLES", 300))
StoreModel.TestCase.settings = settings(max_examples=EXAMPLES, stateful_step_count=40, deadline=None,
                                        suppress_health_check=[HealthCheck.too_slow])
TestStoreModel = StoreModel.TestCase
