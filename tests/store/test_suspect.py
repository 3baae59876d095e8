"""The store side of protocol-aware recovery: ``suspect`` and ``clear_suspect``.

A store reports why it may have lost acknowledged entries or a vote (``SuspectReason``):
``FRESH`` (an empty store never cleared), ``UNCLEAN_SHUTDOWN`` (page_cache mode, no clean
close, and the machine restarted since: a process crash in the same boot keeps the page cache),
``LOST_TAIL`` (a flushed entry is gone), ``TERM_LOST`` (term file damaged, or missing
while the store holds a log or a checkpoint). The state is durable until ``clear_suspect``.
"""

from __future__ import annotations

import os

import pytest

from dledger.sim.disk import PowerLoss, crash_store
from dledger.store import DLedgerMemoryStore, open_store
from dledger.store.suspect import SuspectReason
from helpers.small_store import MODES, Machine, append_bodies, body, open_small
from helpers.store_files import flip_bit, index_unit_location, record_location, zero


@pytest.mark.parametrize("durability", MODES)
def test_a_new_store_is_fresh_until_cleared_and_stays_so_across_crashes(tmp_path, durability):
    d = str(tmp_path / "s")
    s = open_small(d, durability)
    assert s.suspect is SuspectReason.FRESH
    crash_store(s)
    s = open_small(d, durability)
    assert s.suspect is SuspectReason.FRESH   # still: never cleared
    s.clear_suspect()
    assert s.suspect is None
    s.close()
    s = open_small(d, durability)
    try:
        assert s.suspect is None
    finally:
        s.close()


def test_a_wiped_store_is_fresh_again(tmp_path):
    import shutil
    d = str(tmp_path / "s")
    s = open_small(d)
    s.clear_suspect()
    s.persist_term(4, "n1")
    append_bodies(s, [body(1)])
    s.close()
    shutil.rmtree(d)
    s = open_small(d)
    try:
        assert s.suspect is SuspectReason.FRESH
    finally:
        s.close()


def _cleared(d, durability="page_cache", **kwargs):
    s = open_small(d, durability, **kwargs)
    s.clear_suspect()
    s.persist_term(2, "n1")
    append_bodies(s, [body(i) for i in range(3)])
    return s


def test_page_cache_unclean_shutdown_is_suspect_and_a_second_crash_keeps_it(tmp_path):
    d = str(tmp_path / "s")
    machine = Machine()
    crash_store(_cleared(d, store_io=machine))
    machine.reboot()                           # the page cache did not survive
    s = open_small(d, store_io=machine)
    assert s.suspect is SuspectReason.UNCLEAN_SHUTDOWN
    s.close()                                  # even a clean close does not clear it
    s = open_small(d, store_io=machine)
    assert s.suspect is SuspectReason.UNCLEAN_SHUTDOWN
    s.clear_suspect()
    s.close()
    s = open_small(d)
    try:
        assert s.suspect is None               # clean close: clean marker
    finally:
        s.close()


def test_a_process_crash_in_the_same_boot_is_not_suspect(tmp_path):
    """The machine stayed up: whatever the dead process wrote is in the page cache, which the
    kernel writes back; nothing acknowledged can be lost, so the replica votes at once."""
    d = str(tmp_path / "s")
    machine = Machine()
    crash_store(_cleared(d, store_io=machine))
    s = open_small(d, store_io=machine)
    try:
        assert s.suspect is None
        assert [e.body for e in s.iter_entries()] == [body(i) for i in range(3)]
        with open(os.path.join(d, "boot")) as f:
            assert "boot=boot-0" in f.read()
    finally:
        s.close()


def _crashed_after_a_flush(d, machine, appended=3, more=3):
    """A cleared page_cache store whose first ``appended`` entries are flushed and checkpointed,
    then ``more`` appended after the checkpoint, and the process crashes (same boot)."""
    s = _cleared(d, store_io=machine)
    s.flush()
    append_bodies(s, [body(i) for i in range(appended, appended + more)])
    crash_store(s)


def test_in_the_same_boot_a_damaged_record_written_whole_is_a_lost_tail(tmp_path):
    """The page cache kept every write, so a bad last record is not a write cut short but an
    entry written whole and damaged since: it may have been acknowledged, and its cut must make
    the replica suspect (as in fsync mode), not pass for a torn tail."""
    from dledger.entry import BODY_OFFSET
    d = str(tmp_path / "s")
    machine = Machine()
    _crashed_after_a_flush(d, machine)
    loc = record_location(d, 5, 32 * 64, 1024)
    flip_bit(loc.path, loc.offset + BODY_OFFSET + 3, 1)
    s = open_small(d, store_io=machine)
    try:
        assert s.ledger_end_index == 4
        assert s.suspect is SuspectReason.LOST_TAIL
    finally:
        s.close()


def test_in_the_same_boot_an_append_cut_short_is_not_suspect(tmp_path):
    """The header of the last record was written, its body never (the process died in
    between): that append never returned, nothing acknowledged is lost."""
    from dledger.entry import BODY_OFFSET
    d = str(tmp_path / "s")
    machine = Machine()
    _crashed_after_a_flush(d, machine)
    loc = record_location(d, 5, 32 * 64, 1024)
    zero(loc.path, loc.offset + BODY_OFFSET, 16)
    s = open_small(d, store_io=machine)
    try:
        assert s.ledger_end_index == 4
        assert s.suspect is None
    finally:
        s.close()


def test_an_unknown_boot_counts_every_unclean_shutdown(tmp_path):
    d = str(tmp_path / "s")
    machine = Machine()
    machine.boot = None                        # no /proc, say: nothing vouches for the page cache
    crash_store(_cleared(d, store_io=machine))
    assert not os.path.exists(os.path.join(d, "boot"))
    s = open_small(d, store_io=machine)
    try:
        assert s.suspect is SuspectReason.UNCLEAN_SHUTDOWN
    finally:
        s.close()


def test_a_failed_store_forgets_the_boot_so_its_next_open_is_suspect(tmp_path):
    """After a failed sync the kernel may have dropped the dirty pages: the same boot no
    longer vouches for them."""
    d = str(tmp_path / "s")
    machine = Machine()
    s = _cleared(d, store_io=machine)
    s._fail("injected: msync failed")
    assert not os.path.exists(os.path.join(d, "boot"))
    crash_store(s)
    s = open_small(d, store_io=machine)
    try:
        assert s.suspect is SuspectReason.UNCLEAN_SHUTDOWN
    finally:
        s.close()


def test_fsync_mode_crash_is_not_suspect(tmp_path):
    d = str(tmp_path / "s")
    crash_store(_cleared(d, "fsync"))
    s = open_small(d, "fsync")
    try:
        assert s.suspect is None
    finally:
        s.close()


def test_a_power_loss_in_page_cache_mode_is_an_unclean_shutdown(tmp_path):
    d = str(tmp_path / "s")
    with PowerLoss() as pl:
        s = open_small(d, store_io=pl.io)
        s.clear_suspect()
        s.persist_term(1, None)
        append_bodies(s, [body(i) for i in range(3)])
        pl.power_loss(s)
    s = open_small(d)
    try:
        assert s.suspect is SuspectReason.UNCLEAN_SHUTDOWN
    finally:
        s.close()


@pytest.mark.parametrize("durability", MODES)
def test_a_missing_term_file_with_a_log_is_term_lost(tmp_path, durability):
    d = str(tmp_path / "s")
    _cleared(d, durability).close()
    os.unlink(os.path.join(d, "currterm"))
    s = open_small(d, durability)
    try:
        assert s.suspect is SuspectReason.TERM_LOST
        assert s.current_term == 2 and s.vote_for is None   # raised to the last entry's term
    finally:
        s.close()


def test_a_missing_term_file_with_only_a_checkpoint_is_term_lost(tmp_path):
    d = str(tmp_path / "s")
    s = open_small(d)
    s.clear_suspect()
    s.persist_term(6, "n2")
    s.close()
    os.unlink(os.path.join(d, "currterm"))
    s = open_small(d)
    try:
        assert s.suspect is SuspectReason.TERM_LOST
    finally:
        s.close()


def test_a_flushed_entry_gone_is_a_lost_tail(tmp_path):
    d = str(tmp_path / "s")
    s = _cleared(d)
    s.flush()
    s.close()
    u = index_unit_location(d, 2, 32 * 64)
    zero(u.path, u.offset, 32)                 # the checkpoint's end entry is not in the index
    s = open_small(d)
    try:
        assert s.suspect is SuspectReason.LOST_TAIL
        assert s.ledger_end_index == 2         # rebuilt from the data
    finally:
        s.close()


def test_a_read_only_open_reports_but_changes_nothing(tmp_path):
    d = str(tmp_path / "s")
    machine = Machine()
    crash_store(_cleared(d, store_io=machine))
    machine.reboot()
    with open_store(d, data_file_size=1024, index_file_size=32 * 64, store_io=machine) as ro:
        assert ro.suspect is SuspectReason.UNCLEAN_SHUTDOWN
    assert not os.path.exists(os.path.join(d, "suspect"))
    with open(os.path.join(d, "boot")) as f:
        assert "boot=boot-0" in f.read()       # the read-only open wrote nothing
    s = open_small(d, store_io=machine)
    try:
        assert s.suspect is SuspectReason.UNCLEAN_SHUTDOWN
        assert os.path.exists(os.path.join(d, "suspect"))
    finally:
        s.close()


def test_the_memory_store_is_fresh_until_cleared():
    m = DLedgerMemoryStore()
    assert m.suspect is SuspectReason.FRESH
    m.clear_suspect()
    assert m.suspect is None
    assert DLedgerMemoryStore(suspect=None).suspect is None
