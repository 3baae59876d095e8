"""The reput service on a store, without a cluster: its consume queues and key index against a
reference walk (``store.get`` entry by entry, the full decoder, ``IndexFile.put_key``), over
small segments (runs that stop at segment ends, blank padding between), with crashes between
the files and the checkpoint, damaged records, listeners and broken stamps."""

import os
import random
import tempfile

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from dledger.broker.index_file import IndexFile, KeyHasher, file_name_for, key_hash
from dledger.broker.index_service import INDEX_DIR, IndexService
from dledger.broker.message_codec import MessageFormatError, decode, encode_message, tags_hash_code
from dledger.broker.reput import CHECKPOINT, ReputService
from dledger.entry import BODY_OFFSET, MAGIC_CONFIG_CHANGE, MAGIC_NOOP, MAGIC_NORMAL
from dledger.errors import CorruptStoreError
from dledger.store import DLedgerMmapFileStore
from dledger.store.memory_store import DLedgerMemoryStore

SEGMENT = 4096
INDEX = {"slots": 7, "index_num": 13}          # small: chains share slots, files fill up


def open_store(path):
    store = DLedgerMmapFileStore.open(str(path), data_file_size=SEGMENT, index_file_size=32 * 64)
    store.persist_term(1, None)
    return store


def fill(store, kinds, seed=0):
    """Append one entry per kind: "m" a message (next queue offset of its queue), "n" a NOOP,
    "c" a membership entry holding a message body, "g" a NORMAL entry that is not a message,
    "e" an empty NORMAL entry, "b" a message stamped with a wrong queue offset."""
    rnd = random.Random(seed)
    next_offset = {}
    for i, kind in enumerate(kinds):
        topic = rnd.choice(["T0", "T1", "t" * 130])
        qid = rnd.randrange(2)
        qo = next_offset.get((topic, qid), 0)
        props = {}
        if rnd.random() < 0.8:
            props["TAGS"] = rnd.choice(["TagA", "TagB", "é"])
        if rnd.random() < 0.7:
            props["KEYS"] = " ".join(rnd.choice(["order-%d" % i, "k", "", "ключ-%d" % i])
                                     for _ in range(rnd.randrange(3)))
        if rnd.random() < 0.7:
            props["UNIQ_KEY"] = "0A00000700002A9F%016X" % i
        raw = encode_message(topic=topic, body=bytes(rnd.randrange(200)), queue_id=qid,
                             queue_offset=qo + 5 if kind == "b" else qo, store_timestamp=1_764_000_000_000 + i * 700,
                             born_host=rnd.choice([("10.0.0.7", 1), ("::1", 2)]), properties=props)
        if kind in "mb":
            next_offset[(topic, qid)] = qo + 1
            store.batch_append_as_leader([raw])
        elif kind == "n":
            store.batch_append_as_leader([b""], magic=MAGIC_NOOP)
        elif kind == "c":
            store.batch_append_as_leader([raw], magic=MAGIC_CONFIG_CHANGE)
        elif kind == "g":
            store.batch_append_as_leader([raw[:60] + b"not a message"])
        else:
            store.batch_append_as_leader([b""])


def reference(store):
    """``(units per queue, index keys in order, problems)`` walking entry by entry."""
    units, keys, problems = {}, [], 0
    for i in range(store.ledger_end_index + 1):
        e = store.get(i)
        if e.magic != MAGIC_NORMAL or not e.body:
            continue
        try:
            m = decode(e.body, inflate=False)
        except MessageFormatError:
            continue
        if not m.topic:
            continue
        offset = e.pos + BODY_OFFSET
        q = units.setdefault((m.topic, m.queue_id), [])
        problems += m.queue_offset != len(q)
        q.append((offset, len(e.body), tags_hash_code(m.tags)))
        for k in ([m.uniq_key] if m.uniq_key else []) + m.key_list:
            keys.append((f"{m.topic}#{k}", offset, m.store_timestamp))
    return units, keys, problems


def reference_index(directory, keys):
    """The key index files as ``IndexFile.put_key`` writes them, key by key: name -> bytes."""
    os.makedirs(directory)
    files, out = [], {}
    for key, offset, ts in keys:
        if not files or not files[-1].put_key(key, offset, ts):
            name = file_name_for(ts)
            while os.path.exists(os.path.join(directory, name)):
                name = file_name_for(int(name[-3:]) + ts - ts % 1000 + 1)
            files.append(IndexFile(os.path.join(directory, name), **INDEX))
            assert files[-1].put_key(key, offset, ts)
    for f in files:
        f.close()
        with open(f.path, "rb") as fh:
            out[os.path.basename(f.path)] = fh.read()
    return out


def files_of(root):
    """Every consume-queue and key-index file under ``root``: relative path -> bytes."""
    out = {}
    for base in ("consumequeue", INDEX_DIR):
        for d, _dirs, names in os.walk(os.path.join(root, base)):
            for n in names:
                with open(os.path.join(d, n), "rb") as fh:
                    out[os.path.relpath(os.path.join(d, n), root)] = fh.read()
    return out


def dispatch_all(reput, store, step=4096):
    while reput.dispatch_up_to(store, store.ledger_end_index, step):
        pass


KINDS = st.lists(st.sampled_from("mmmmmmncgeb"), min_size=1, max_size=90).map("".join)


@settings(max_examples=30, deadline=None)
@given(kinds=KINDS, steps=st.lists(st.integers(1, 40), min_size=1, max_size=5), seed=st.integers(0, 1000))
@example(kinds="m" * 60, steps=[7], seed=1)          # index files fill up inside batches
def test_dispatch_in_any_batches_equals_the_reference_walk_byte_for_byte(kinds, steps, seed):
    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(os.path.join(tmp, "store"))
        fill(store, kinds, seed)
        units, keys, problems = reference(store)
        reput = ReputService(os.path.join(tmp, "r"), units_per_file=5, index_options=INDEX)
        k = 0
        while reput.dispatch_up_to(store, store.ledger_end_index, steps[k % len(steps)]):
            k += 1
        assert reput.next_index == store.ledger_end_index + 1
        last = store.get(store.ledger_end_index)
        assert reput.next_physical_offset == last.pos + last.size
        assert {q: cq.units(0, 10_000) for q, cq in reput.queues.items()} == units
        assert len(reput.problems) == problems
        reput.close()
        got = files_of(os.path.join(tmp, "r"))
        index = {os.path.basename(p): b for p, b in got.items() if p.startswith(INDEX_DIR)}
        assert index == reference_index(os.path.join(tmp, "ref"), keys)
        # the memory store's runs give the same files
        mem = DLedgerMemoryStore(data_file_size=SEGMENT)
        mem.persist_term(1, None)
        for i in range(store.ledger_end_index + 1):
            e = store.get(i)
            mem.batch_append_as_leader([e.body], magic=e.magic)
        assert [mem.get(i).pos for i in range(len(kinds))] == [store.get(i).pos for i in range(len(kinds))]
        again = ReputService(os.path.join(tmp, "m"), units_per_file=5, index_options=INDEX)
        dispatch_all(again, mem, steps[0])
        again.close()
        assert files_of(os.path.join(tmp, "m")) == got
        store.close()


@settings(max_examples=25, deadline=None)
@given(kinds=KINDS, crash_at=st.integers(1, 90), lost_header=st.booleans(), step=st.integers(1, 30),
       seed=st.integers(0, 1000))
def test_a_crash_before_the_checkpoint_is_undone_and_dispatched_again_once(kinds, crash_at, lost_header, step, seed):
    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(os.path.join(tmp, "store"))
        fill(store, kinds, seed)
        clean = ReputService(os.path.join(tmp, "clean"), units_per_file=5, index_options=INDEX)
        dispatch_all(clean, store, step)
        clean.close()
        root = os.path.join(tmp, "r")
        reput = ReputService(root, units_per_file=5, index_options=INDEX)
        crash_at = min(crash_at, len(kinds))
        reput.dispatch_up_to(store, crash_at - 1, step)
        reput.checkpoint()                # the commit log's periodic checkpoint
        with open(os.path.join(root, CHECKPOINT)) as f:
            vouched = f.read()
        # the next batches reach the files (headers too, or not), then the process dies
        # before the next checkpoint: the checkpoint file stays as it was
        if lost_header:
            reput.index.commit = lambda: None
        reput.dispatch_up_to(store, store.ledger_end_index, step)
        for cq in reput.queues.values():
            cq.commit()
        for f in reput.index.files:
            f.mm.close()                  # no header written at close: as a killed process leaves it
        with open(os.path.join(root, CHECKPOINT), "w") as f:
            f.write(vouched)
        again = ReputService(root, units_per_file=5, index_options=INDEX)
        dispatch_all(again, store, step)
        again.close()
        assert files_of(root) == files_of(os.path.join(tmp, "clean"))
        store.close()


def test_runs_cross_segment_ends_and_every_message_keeps_its_real_offset(tmp_path):
    store = open_store(tmp_path / "store")
    fill(store, "m" * 60)
    data = sorted(os.listdir(tmp_path / "store" / "data"))
    assert len(data) > 3                             # segment ends with blank padding in between
    # one batch spans them all: the runs stop at every segment end
    raw, count = store.get_raw_range(0, 1 << 20)
    assert count < 60
    reput = ReputService(str(tmp_path / "r"))
    assert reput.dispatch_up_to(store, 59) == 60
    units = sorted(u for cq in reput.queues.values() for u in cq.units(0, 100))
    assert [u[0] for u in units] == [store.get(i).pos + BODY_OFFSET for i in range(60)]
    for offset, size, _code in units:
        assert decode(store_body_at(store, offset, size)).topic
    reput.close()
    store.close()


def store_body_at(store, offset, size):
    i = next(i for i in range(store.ledger_end_index + 1) if store.get(i).pos + BODY_OFFSET == offset)
    body = store.get(i).body
    assert len(body) == size
    return body


def test_a_damaged_record_stops_the_walk_there_and_is_noted_like_a_read(tmp_path):
    store = open_store(tmp_path / "store")
    fill(store, "m" * 10)
    e = store.get(6)
    f = store.data_list.find_file(e.pos)
    # a bit flip in the body, which the store does not check again for a range read
    f.mm[e.pos - f.file_from_offset + BODY_OFFSET + 100] ^= 0xFF
    reput = ReputService(str(tmp_path / "r"))
    with pytest.raises(CorruptStoreError):
        reput.dispatch_up_to(store, 9)
    assert 6 in store.damaged()
    assert reput.next_index == 6 and sum(cq.max_offset for cq in reput.queues.values()) == 6
    reput.close()
    store.close()


def test_listeners_hear_every_message_once_and_broken_stamps_are_recorded(tmp_path):
    store = open_store(tmp_path / "store")
    fill(store, "mmnmbmgm", seed=3)
    reput = ReputService(str(tmp_path / "r"))
    each, batches = [], []
    reput.on_dispatch = lambda offset, ts: each.append((offset, ts))
    reput.on_dispatch_batch = batches.append
    while reput.dispatch_up_to(store, store.ledger_end_index, 3):
        pass
    messages = [store.get(i) for i in (0, 1, 3, 4, 5, 7)]
    assert each == [(e.pos + BODY_OFFSET, decode(e.body).store_timestamp) for e in messages]
    assert [p for b in batches for p in b] == each and len(batches) == 3
    assert len(reput.problems) == 1 and "carries queue offset" in reput.problems[0]
    # the broken stamp's unit is still written, as its queue's next
    assert sum(cq.max_offset for cq in reput.queues.values()) == 6
    reput.close()
    store.close()


@settings(max_examples=300, deadline=None)
@given(topic=st.text(min_size=1, max_size=10),
       key=st.one_of(st.text(max_size=300), st.text(alphabet="0A9-", max_size=40)))
def test_the_key_hasher_gives_javas_hash_of_topic_hash_key(topic, key):
    h = KeyHasher()
    assert h(topic, key) == key_hash(f"{topic}#{key}")
    assert h(topic, key) == key_hash(f"{topic}#{key}")             # again, from what it kept
    keys = f"{key}  x{key}"
    assert h.message(topic, key, keys) == [key_hash(f"{topic}#{k}") for k in [key] + keys.split(" ") if k]


def test_the_key_hasher_keeps_at_most_its_limit_and_stays_right(monkeypatch):
    import dledger.broker.index_file as index_file
    monkeypatch.setattr(index_file, "_CACHE_MAX", 10)
    h = KeyHasher()
    for i in range(300):
        topic, key = f"T{i % 7}", f"head-{i}-{i % 3}-tail"
        want = [key_hash(f"{topic}#{k}") for k in (key, f"k{i}xyzw", "other")]
        assert h.message(topic, key, f"k{i}xyzw other") == want
        assert sum(1 + len(heads) for _t, heads in h._topics.values()) <= 10


def test_entries_put_after_the_last_header_are_undone_on_open(tmp_path):
    idx = IndexService(str(tmp_path), slots=5, index_num=50)
    idx.index_messages([("T", None, "a%d b" % i, 100 + i, 1_764_000_000_000 + i) for i in range(10)])
    idx.commit()
    path = idx.files[-1].path
    with open(path, "rb") as fh:
        vouched = fh.read()
    idx.index_messages([("T", "u%d" % i, "a%d" % i, 200 + i, 1_764_000_100_000 + i) for i in range(10)])
    with open(path, "rb") as fh:
        assert fh.read() != vouched
    idx.files[-1].mm.close()                       # killed before the header was written
    again = IndexService(str(tmp_path), slots=5, index_num=50)
    with open(path, "rb") as fh:
        assert fh.read() == vouched
    assert again.lookup("T", "b", 100) == list(range(109, 99, -1))
    again.close()


def test_a_checkpoint_syncs_the_queues_and_the_index_before_it_is_written(tmp_path, monkeypatch):
    """The order the crash rule rests on: every consume-queue file and every key-index file
    fsynced, then the checkpoint written (itself synced before its rename)."""
    store = open_store(tmp_path / "store")
    fill(store, "mmmmmmmm")
    reput = ReputService(str(tmp_path / "r"), units_per_file=5, index_options=INDEX)
    dispatch_all(reput, store)
    calls = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append(("fsync", os.readlink(f"/proc/self/fd/{fd}"))),
                                                  real_fsync(fd)))
    monkeypatch.setattr(os, "replace", lambda a, b: (calls.append(("replace", os.path.basename(b))),
                                                      real_replace(a, b)))
    reput.checkpoint()
    cq_files = {os.readlink(f"/proc/self/fd/{fd}") for cq in reput.queues.values() for fd in cq._fds.values()}
    first_checkpoint_write = calls.index(("fsync", str(tmp_path / "r" / CHECKPOINT) + ".tmp"))
    before = {p for kind, p in calls[:first_checkpoint_write] if kind == "fsync"}
    assert cq_files and cq_files <= before
    assert reput.index.files and {f.path for f in reput.index.files} <= before
    assert calls[first_checkpoint_write + 1] == ("replace", CHECKPOINT)
    calls.clear()
    reput.checkpoint()                  # nothing moved: nothing synced but the checkpoint itself
    assert [p for kind, p in calls if kind == "fsync"] == [str(tmp_path / "r" / CHECKPOINT) + ".tmp",
                                                            str(tmp_path / "r")]
    reput.close()
    store.close()


@pytest.mark.parametrize("failing", ["queue", "index"])
def test_a_checkpoint_out_of_descriptors_hands_nothing_over_and_syncs_everything_next_time(
        tmp_path, monkeypatch, failing):
    """Capturing a checkpoint takes a descriptor of each file to sync: when the process has
    none left (EMFILE), nothing is handed over, none leaks, and every file is still to sync."""
    import errno

    store = open_store(tmp_path / "store")
    fill(store, "mmmmmmmm")
    reput = ReputService(str(tmp_path / "r"), units_per_file=5, index_options=INDEX)
    dispatch_all(reput, store)
    assert len(reput.queues) > 1 and reput.index.files
    before = set(os.listdir("/proc/self/fd"))
    real_dup, real_open = os.dup, os.open
    calls = []

    def dup(fd):
        calls.append(fd)
        if failing == "queue" and len(calls) == 2:
            raise OSError(errno.EMFILE, "Too many open files")
        return real_dup(fd)

    def open_(path, flags, *args):
        if failing == "index" and "/keyindex/" in str(path):
            raise OSError(errno.EMFILE, "Too many open files", str(path))
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "dup", dup)
    monkeypatch.setattr(os, "open", open_)
    with pytest.raises(OSError, match="Too many open files"):
        reput.checkpoint_job()
    monkeypatch.undo()
    assert set(os.listdir("/proc/self/fd")) == before
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(os.readlink(f"/proc/self/fd/{fd}")),
                                                  real_fsync(fd)))
    reput.checkpoint()
    cq_files = {os.readlink(f"/proc/self/fd/{fd}") for cq in reput.queues.values() for fd in cq._fds.values()}
    assert cq_files <= set(synced) and {f.path for f in reput.index.files} <= set(synced)
    reput.close()
    store.close()


def test_a_message_whose_topic_no_put_may_use_is_not_dispatched_and_makes_no_directory(tmp_path):
    store = open_store(tmp_path / "store")
    for topic, qid in (("../escape", 0), ("T", -3), ("T", 0)):
        raw = encode_message(topic=topic, body=b"x", queue_id=qid, store_timestamp=1_764_000_000_000)
        store.batch_append_as_leader([raw])
    reput = ReputService(str(tmp_path / "r"))
    assert reput.dispatch_up_to(store, 2) == 3
    assert sorted(reput.queues) == [("T", 0)] and reput.queues[("T", 0)].max_offset == 1
    assert len(reput.problems) == 2 and "'../escape' holds '.'" in reput.problems[0]
    assert "queue_id: -3" in reput.problems[1]
    assert sorted(os.listdir(tmp_path / "r" / "consumequeue")) == ["T"] and not (tmp_path / "escape").exists()
    reput.close()
    store.close()


def test_a_checkpoint_syncs_only_the_files_that_changed_since_the_last(tmp_path, monkeypatch):
    store = open_store(tmp_path / "store")
    for i in range(4):
        store.batch_append_as_leader([encode_message(topic=f"T{i}", body=b"x", queue_id=0, queue_offset=0,
                                                     store_timestamp=1_764_000_000_000)])
    reput = ReputService(str(tmp_path / "r"))
    dispatch_all(reput, store)
    reput.checkpoint()
    store.batch_append_as_leader([encode_message(topic="T2", body=b"y", queue_id=0, queue_offset=1,
                                                 store_timestamp=1_764_000_000_001)])
    dispatch_all(reput, store)
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(os.readlink(f"/proc/self/fd/{fd}")), real_fsync(fd)))
    reput.checkpoint()
    queue_files = [p for p in synced if "consumequeue" in p]
    assert len(queue_files) == 1 and "/consumequeue/T2/0/" in queue_files[0]
    synced.clear()
    reput.checkpoint()                                   # nothing moved: only the checkpoint itself
    assert not [p for p in synced if "consumequeue" in p]
    reput.close()
    store.close()


def test_the_service_dispatches_with_the_loops_its_run_asked_for(tmp_path, hot_loops):
    """This file runs with each implementation (``conftest.BOTH_SCANS``): the reput service's
    scan and the key index's writes are the ones asked for."""
    from dledger.broker import index_file, speedups

    reput = ReputService(str(tmp_path / "r"))
    try:
        if hot_loops == "C":
            assert reput._scan is speedups.compiled.scan_messages and index_file._compiled is speedups.compiled
        else:
            assert type(reput._scan).__name__ == "MessageScanner" and index_file._compiled is None
    finally:
        reput.close()
