"""Cut: removing a suffix (``truncate``, ``truncate_to_entry``) or a prefix (``reset``) of the log.

A part of ``DLedgerMmapFileStore`` (see ``mmap_file_store.py``): it holds the shared state
(``state.StoreState``), cuts its ``data_list`` and ``index_list``, moves the bounds,
``written_from`` and ``cut_epoch`` there, and writes the checkpoint through the flusher part.
What it reads and appends goes through the store's own entry points (``store``: ``get``,
``truncate``, ``append_as_follower``, each behind the store's write gate) and its index
(``index_unit``).

Rules (crash-safe order: whatever step a crash interrupts, the next open finds either the old
log or the cut one):
- before a cut, everything written is synced (``_sync_before_cut``), and the store's *cut
  epoch* moves, so a background flush job made before it is dropped; a failed store
  (``flusher.py``) cuts nothing, and a failed sync there fails the store;
- ``truncate``: the checkpoint stops vouching for the doomed entries first, then their index
  units are erased (stale units must not vouch for stale data after a crash), then the data
  header at the cut is zeroed and synced;
- ``reset``: the checkpoint announces the new begin before any file changes; an open after a
  crash in the middle finishes the reset (``load``);
- committed entries are never truncated;
- every msync of a cut (the index units erased, the zeroed data header) that fails fails the
  store (``DISK_ERROR``, as in ``flusher.py``): what the disk holds is unknown from then on,
  and the next open recovers it. A checkpoint the cut must write *before* it changes a file
  and that the full disk refuses refuses the cut (``DISK_FULL``, nothing changed); one
  written *after* the change is only logged (the checkpoint written before already keeps an
  open after a crash right), and the next flush retries it.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import contextmanager

from dledger.entry import INDEX_UNIT_SIZE, MAGIC_BLANK, MAGIC_SIZE, DLedgerEntry, IndexUnit
from dledger.errors import DISK_FULL, INCONSISTENT_STATE, INCONSISTENT_TERM, DLedgerError, ReadOnlyStoreError
from dledger.store.base import check_truncatable
from dledger.store.flusher import Flusher
from dledger.store.mmap_file_list import zero_header_at
from dledger.store.state import StoreState


class Cut:
    """Truncation and reset of the file store (a part of ``DLedgerMmapFileStore``)."""

    def __init__(self, state: StoreState, flusher: Flusher, store, index_unit: Callable[[int], IndexUnit]) -> None:
        self.state = state
        self.flusher = flusher
        #: the store: its gated entry points (``get``, ``truncate``, ``append_as_follower``)
        self.store = store
        #: entry ``i``'s index unit (the store's reader)
        self.index_unit = index_unit

    def _sync_before_cut(self) -> None:
        """Make the log durable before a truncation or reset makes its cut durable.

        The cut is synced at once (the page holding an erased header or a head blank). Were
        the pages before it still only in the page cache, a power loss could keep the cut and
        lose what precedes it: a hole that recovery would take for mid-log damage.
        """
        st = self.state
        st.check_not_failed()     # a failed store's disk is unknown: no cut on top of it
        st.cut_epoch += 1
        try:
            st.data_list.flush(0)
            st.index_list.flush(0)
        except OSError as exc:
            raise st.sync_failed("msync before a cut", exc) from exc

    @contextmanager
    def _cut_syncs(self, what: str):
        """An msync inside a cut that fails fails the store (never a raw ``OSError``)."""
        st = self.state
        try:
            yield
        except OSError as exc:
            raise st.sync_failed(f"msync inside {what}", exc) from exc

    def _checkpoint_after_cut(self, end_index: int) -> None:
        """The checkpoint after a cut's files changed: a full disk is only logged there."""
        try:
            self.flusher.write_checkpoint(end_index)
        except DLedgerError as exc:
            if exc.code != DISK_FULL:
                raise

    def truncate(self, truncate_index: int) -> int:
        """Remove ``truncate_index`` and every later entry; returns the new end index.

        Refuses to remove a committed entry.
        """
        st = self.state
        st.check_open()
        if st.read_only:
            raise ReadOnlyStoreError(f"store {st.store_dir} is opened read-only")
        if truncate_index > st.ledger_end_index:
            return st.ledger_end_index
        check_truncatable(self.state, truncate_index)
        unit = self.index_unit(truncate_index)
        st.written_from = min(st.written_from, truncate_index)
        # Crash-safe order: whatever step a crash interrupts, the next open finds either the
        # old log or the truncated one. The checkpoint stops vouching for the doomed entries
        # first (else it would trust a log whose record was already erased); the index units
        # go before the data header (else intact entries would follow an erased record, which
        # recovery must take for mid-log damage).
        self._sync_before_cut()
        if st.checkpoint is not None and st.checkpoint.end_index >= truncate_index:
            self.flusher.write_checkpoint(truncate_index - 1)
        with self._cut_syncs(f"the truncation at {truncate_index}"):
            self.truncate_index_to(truncate_index)
            zero_header_at(st.data_list, unit.pos)
            st.data_list.truncate_offset(unit.pos)
            if st.data_list.max_wrote_position() != unit.pos:
                st.data_list.rebuild_with_pos(unit.pos)
        if truncate_index - 1 == st.ledger_before_begin_index:
            st.ledger_end_index, st.ledger_end_term = truncate_index - 1, st.ledger_before_begin_term
        else:
            st.ledger_end_index = truncate_index - 1
            st.ledger_end_term = self.index_unit(truncate_index - 1).term
        return st.ledger_end_index

    def drop_trailing_pad(self, next_pos: int) -> bool:
        """The log's last entry ends at ``next_pos`` but the data's write position lies beyond,
        past a blank that pads the rest of its segment: a pad written for a next entry that was
        since truncated or lost (the truncation cuts at that entry, after the pad; a power cut
        may keep the pad and lose the entry). Positions follow from the entries alone (an entry
        goes right after the last one when it fits, else to the next segment, as the leader's
        writer decides), so the pad is erased and the next entry lands at ``next_pos``, where
        the leader put it (swarm seed 4200090: a follower refused the leader's entry there for
        good). Returns whether a pad was dropped."""
        st = self.state
        end = st.ledger_end_index
        if end <= st.ledger_before_begin_index:
            return False
        unit = self.index_unit(end)
        data = st.data_list
        if unit.pos + unit.size != next_pos or data.max_wrote_position() <= next_pos:
            return False
        f = data.find_file(next_pos)
        if f is None:
            return False
        off = next_pos - f.file_from_offset
        head = data.get_data(next_pos, MAGIC_SIZE.size)
        if head is None:
            return False
        magic, size = MAGIC_SIZE.unpack(head)
        if magic != MAGIC_BLANK or off + size != f.file_size:
            return False
        self._sync_before_cut()
        with self._cut_syncs(f"dropping the pad after entry {end}"):
            zero_header_at(data, next_pos)
            data.truncate_offset(next_pos)
            if data.max_wrote_position() != next_pos:
                data.rebuild_with_pos(next_pos)
        st.cut_epoch += 1
        return True

    def place_empty_log(self, index: int, pos: int) -> bool:
        """A log empty after its begin, whose next entry would land elsewhere than the leader's
        entry ``index`` (the one after the begin) at ``pos``: a log-start move that a crash
        interrupted was finished at the open without the leader's position (swarm seed
        5200124). Nothing is held after the begin, so the next entry is placed at ``pos``.
        Returns whether it was moved."""
        st = self.state
        begin = st.ledger_before_begin_index
        if begin < 0 or st.ledger_end_index != begin or index != begin + 1:
            return False
        if not self._moves_empty_log(begin, st.ledger_before_begin_term, pos):
            return False
        self.reset(begin, st.ledger_before_begin_term, pos)
        return True

    def _moves_empty_log(self, before_begin_index: int, before_begin_term: int, next_pos: int | None) -> bool:
        """Whether a reset to the current begin still has something to do: the log is empty
        after it, and its next entry would land elsewhere than ``next_pos`` or its begin term
        differs."""
        st = self.state
        if next_pos is None or before_begin_index != st.ledger_before_begin_index \
                or st.ledger_end_index != before_begin_index:
            return False
        data = st.data_list
        at = data.max_wrote_position() if data.files else None
        return at != next_pos or st.ledger_before_begin_term != before_begin_term

    def truncate_index_to(self, index: int) -> None:
        st = self.state
        pos = index * INDEX_UNIT_SIZE
        idx = st.index_list
        if idx.files and idx.min_offset() <= pos <= idx.max_wrote_position():
            # Erase the dropped units: stale units must not vouch for stale data after a crash.
            for f in idx.files:
                lo = max(pos - f.file_from_offset, f.start_position)
                if lo < f.wrote_position:
                    f.mm[lo:f.wrote_position] = bytes(f.wrote_position - lo)
                    f.flush_range(lo, f.wrote_position)
            idx.truncate_offset(pos)
        else:
            idx.rebuild_with_pos(pos)

    def truncate_to_entry(self, entry: DLedgerEntry, leader_term: int, leader_id: str | None = None) -> int:
        """Make ``entry`` the last entry, at ``entry.pos`` (the legacy TRUNCATE request of Java DLedger).

        Keeps a local copy equal to ``entry``; otherwise everything from ``entry.index`` on is
        dropped and ``entry`` is written. When ``entry.pos`` lies outside the local data, the
        store is rebuilt to start at ``entry`` (its before-begin index becomes ``index - 1``).
        """
        st = self.state
        st.check_open()
        if leader_term != st.term_file.term:
            raise DLedgerError(f"leader term {leader_term} differs from local term "
                               f"{st.term_file.term}", INCONSISTENT_TERM)
        existed = False
        if st.ledger_before_begin_index < entry.index <= st.ledger_end_index:
            try:
                existed = self.store.get(entry.index) == entry
            except DLedgerError:
                existed = False
        if existed:
            if entry.index < st.ledger_end_index:
                self.store.truncate(entry.index + 1)
            return st.ledger_end_index
        if entry.index <= st.committed_index:
            raise DLedgerError(f"refusing to replace committed entry {entry.index}", INCONSISTENT_STATE)
        data = st.data_list
        inside = (st.ledger_before_begin_index < entry.index <= st.ledger_end_index + 1
                  and data.files and data.min_offset() <= entry.pos <= data.max_wrote_position())
        if inside:
            if entry.index <= st.ledger_end_index:
                self.store.truncate(entry.index)
        else:
            self._sync_before_cut()
            self.flusher.announce_begin(entry.index - 1, -1, st.committed_index)
            with self._cut_syncs(f"the rebuild at entry {entry.index}"):
                zero_header_at(st.data_list, entry.pos)
                data.rebuild_with_pos(entry.pos)
                st.index_list.rebuild_with_pos(entry.index * INDEX_UNIT_SIZE)
            st.ledger_before_begin_index = entry.index - 1
            st.ledger_before_begin_term = -1
            st.ledger_end_index, st.ledger_end_term = entry.index - 1, -1
        self.store.append_as_follower(entry, leader_term, leader_id)
        self._checkpoint_after_cut(min(st.checkpoint.end_index if st.checkpoint else -1,
                                       st.ledger_end_index))
        return st.ledger_end_index

    def reset(self, before_begin_index: int, before_begin_term: int, next_pos: int | None = None) -> int:
        """Drop the log prefix up to and including ``before_begin_index`` (after a snapshot).

        When the whole log goes, the log restarts empty after ``before_begin_index``; the next
        entry lands at ``next_pos`` when given (a follower moved to the leader's log start),
        else where the old data ended. A log already empty after that very begin is moved to
        ``next_pos`` (and ``before_begin_term``) when it would put its next entry elsewhere
        (a reset that a crash interrupted is finished at the next open without the leader's
        position). Returns the new begin index.
        """
        st = self.state
        st.check_open()
        if st.read_only:
            raise ReadOnlyStoreError(f"store {st.store_dir} is opened read-only")
        data = st.data_list
        if before_begin_index <= st.ledger_before_begin_index:
            if not self._moves_empty_log(before_begin_index, before_begin_term, next_pos):
                return st.ledger_before_begin_index + 1
        self._sync_before_cut()
        self.flusher.announce_begin(before_begin_index, before_begin_term,
                             max(st.committed_index, min(before_begin_index, st.ledger_end_index)))
        if before_begin_index >= st.ledger_end_index:
            if next_pos is not None:
                data.rebuild_with_pos(next_pos)
            elif st.ledger_end_index > st.ledger_before_begin_index:
                unit = self.index_unit(st.ledger_end_index)
                data.reset_offset(unit.pos + unit.size)
            elif data.files:
                data.reset_offset(data.max_wrote_position())
            st.index_list.rebuild_with_pos((before_begin_index + 1) * INDEX_UNIT_SIZE)
            st.ledger_end_index, st.ledger_end_term = before_begin_index, before_begin_term
        else:
            unit = self.index_unit(before_begin_index + 1)
            data.reset_offset(unit.pos)
            st.index_list.reset_offset((before_begin_index + 1) * INDEX_UNIT_SIZE)
        st.ledger_before_begin_index = before_begin_index
        st.ledger_before_begin_term = before_begin_term
        st.committed_index = max(st.committed_index, min(before_begin_index, st.ledger_end_index))
        self._checkpoint_after_cut(st.ledger_end_index if st.checkpoint is None
                                   else min(max(st.checkpoint.end_index, before_begin_index),
                                            st.ledger_end_index))
        return before_begin_index + 1

