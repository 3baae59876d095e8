"""The flush thread pages out synced pages behind each list's end (``background_flush``):
which ranges it names, and that paging out never changes what the store reads."""

import ctypes
import mmap

import pytest

from dledger.store import background_flush as bg

MiB = 1024 * 1024


def resident_pages(f, start: int, end: int) -> int:
    """How many pages of ``f``'s mapping in ``[start, end)`` are resident (mincore)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    n = (end - start) // mmap.PAGESIZE
    vec = ctypes.create_string_buffer(n)
    assert libc.mincore(f._addr + start, end - start, vec) == 0
    return sum(b & 1 for b in vec.raw)


@pytest.fixture
def release_store(open_file_store):
    # the store pages out through libc's madvise(MADV_PAGEOUT) and msync, which Linux (where the
    # project runs and these tests run) has: a build without them must not pass unnoticed
    assert bg.release_supported, "MADV_PAGEOUT and msync through ctypes are not available here"
    return open_file_store(data_file_size=16 * MiB, index_file_size=1024 * 1024, flush_interval_ms=1,
                           checkpoint_interval_ms=0, background_flush=True, release_pages_behind=4 * MiB)


def flush_and_reap(store, now: int) -> list:
    assert store.flush_if_due(now)
    job = store._flusher.flush_job
    release = list(job.release)
    assert job.wait(10)
    store._flusher.reap_flush_job()
    return release


def test_synced_pages_behind_the_end_are_paged_out_across_segments_and_read_back_the_same(release_store):
    store = release_store
    bodies = [bytes([k % 251]) * 60_000 for k in range(700)]      # about 42 MB: three segments
    for k in range(0, len(bodies), 50):
        store.batch_append_as_leader(bodies[k:k + 50])
    release = flush_and_reap(store, 0)
    top = store.data_list.max_wrote_position()
    target = (top - 4 * MiB) & ~(bg.RELEASE_ALIGN - 1)
    # every segment up to 4 MiB (aligned) before the end, each range inside its segment
    covered = sorted((f.file_from_offset + a, f.file_from_offset + b) for f, a, b in release
                     if f in store.data_list.files)
    assert covered[0][0] == 0 and covered[-1][1] == target
    assert all(prev[1] == nxt[0] for prev, nxt in zip(covered, covered[1:]))
    assert store.data_list.released_where == target
    first = store.data_list.files[0]
    assert resident_pages(first, 0, first.file_size) == 0
    last = store.data_list.files[-1]
    kept_from = (last.wrote_position - 2 * MiB) & ~(mmap.PAGESIZE - 1)
    assert resident_pages(last, kept_from, kept_from + 2 * MiB) > 0       # the last 4 MiB stay
    assert [e.body for e in store.iter_entries(0, len(bodies) - 1)] == bodies


def test_after_a_truncation_below_what_was_released_releasing_starts_again_from_the_end(release_store):
    store = release_store
    body = b"t" * 60_000
    for _ in range(8):
        store.batch_append_as_leader([body] * 50)
    flush_and_reap(store, 0)
    released = store.data_list.released_where
    assert released > 0
    cut_at = 20                                   # far below the released position
    store.truncate(cut_at)
    store.batch_append_as_leader([b"new"])
    flush_and_reap(store, 10)
    assert store.data_list.released_where <= store.data_list.max_wrote_position()
    assert store.get(cut_at).body == b"new" and store.get(cut_at - 1).body == body


def test_release_off_names_no_range(open_file_store):
    store = open_file_store(data_file_size=16 * MiB, flush_interval_ms=1, checkpoint_interval_ms=0,
                            background_flush=True, release_pages_behind=0)
    store.batch_append_as_leader([b"z" * 60_000] * 200)
    if store.flush_if_due(0) and store._flusher.flush_job is not None:
        assert store._flusher.flush_job.release == []
