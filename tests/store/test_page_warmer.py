"""The page warmer maps pages in ahead of the writer and never changes what a segment holds."""

import os

from dledger.entry import DLedgerEntry
from dledger.store import DLedgerMmapFileStore, page_warmer
from dledger.store.mmap_file import POPULATE_WINDOW, MmapFile


def test_warming_written_and_unwritten_pages_leaves_the_bytes_as_they_were(tmp_path):
    f = MmapFile(str(tmp_path / f"{0:020d}"), 0, 1 << 20, create=True)
    payload = os.urandom(100_000)
    f.append_message(payload)
    before = page_warmer.warmed_bytes()
    page_warmer.populate_later(f, 0, 1 << 20)
    assert page_warmer.drain(timeout=10)
    assert f.read(0, len(payload)) == payload
    assert f.read(len(payload), 1000) == bytes(1000)
    if page_warmer.supported:
        assert page_warmer.warmed_bytes() - before >= 1 << 20
        assert page_warmer.populate(page_warmer.base_address(f.mm), 0, 8192)
    f.close()


def test_a_request_for_a_closed_segment_is_dropped(tmp_path):
    f = MmapFile(str(tmp_path / f"{0:020d}"), 0, 1 << 20, create=True)
    f.close()
    assert page_warmer.drain(timeout=10)  # earlier requests are through
    before = page_warmer.warmed_bytes()
    page_warmer.populate_later(f, 0, 1 << 20)  # mm is None: nothing is queued or touched
    assert page_warmer.drain(timeout=10)
    assert page_warmer.warmed_bytes() == before


def test_a_store_written_while_the_warmer_runs_ahead_reads_back_exactly(tmp_path):
    store = DLedgerMmapFileStore.open(str(tmp_path / "s"), data_file_size=64 << 20, index_file_size=1 << 20)
    before = page_warmer.warmed_bytes()
    bodies = [os.urandom(1000 + i % 3000) for i in range(20_000)]  # ~50 MB: several windows
    for k in range(0, len(bodies), 500):
        store.batch_append_as_leader(bodies[k:k + 500])
    assert page_warmer.drain(timeout=30)
    seg = store.data_list.files[0]
    if page_warmer.supported:
        # the writer faulted in windows as it went, the warmer the windows after them
        assert seg.populated_to > 16 << 20
        assert page_warmer.warmed_bytes() - before >= 2 * POPULATE_WINDOW
    store.close()
    again = DLedgerMmapFileStore.open(str(tmp_path / "s"), data_file_size=64 << 20, index_file_size=1 << 20)
    assert [e.body for e in again] == bodies
    assert again.append_as_leader(DLedgerEntry(body=b"more")).index == len(bodies)
    again.close()
