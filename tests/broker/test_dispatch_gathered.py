"""The dispatch of a run gathered per consume queue (the compiled ``scan_queues`` and
``ReputService._dispatch_gathered``) against the walk message by message (the reference).

Two reput services dispatch the same runs of records, one gathering per queue where it can, the
other walking message by message: runs of messages to a few queues with tags, keys and
UNIQ_KEYs, their stamped offsets mostly each queue's next (sometimes a gap or a repeat, a
broken promise), queues that exist or not yet, the queue whose bodies are kept, other entries
and damaged messages among them. Afterwards both hold the same units, the same key index
bytes, the same problems, kept bodies, listeners' pairs and walk position."""

import os

from hypothesis import given, settings
from hypothesis import strategies as st

from dledger.broker import speedups
from dledger.broker.message_codec import encode_message
from dledger.broker.reput import ReputService
from dledger.entry import MAGIC_NOOP, MAGIC_NORMAL, DLedgerEntry, encode

QUEUES = [("A", 0), ("A", 1), ("B", 0), ("Cé", 2)]
FIRST_INDEX = 7


@st.composite
def runs(draw):
    """Two runs of records back to back (index, position continue), and the queues to create
    first with their next offsets."""
    starts = {q: draw(st.integers(0, 3)) for q in QUEUES}
    nxt = dict(starts)
    items = []
    for _ in range(draw(st.integers(0, 40))):
        kind = draw(st.integers(0, 19))
        if kind == 0:
            items.append((MAGIC_NOOP, b""))
            continue
        if kind == 1:
            items.append((MAGIC_NORMAL, draw(st.binary(min_size=1, max_size=60))))   # not a message
            continue
        topic, queue_id = draw(st.sampled_from(QUEUES))
        qo = nxt[(topic, queue_id)]
        if kind == 2:
            qo += draw(st.sampled_from([-1, 1, 5]))          # a broken promise
        nxt[(topic, queue_id)] = qo + 1
        props = {}
        if draw(st.booleans()):
            props["UNIQ_KEY"] = draw(st.sampled_from(["U1", "u2", "", "é"]))
        if draw(st.booleans()):
            props["TAGS"] = draw(st.sampled_from(["TagA", "", "ü"]))
        if draw(st.booleans()):
            props["KEYS"] = draw(st.sampled_from(["k1", "k1 k2", " ", "a  b", "𝄞"]))
        raw = encode_message(topic=topic, body=draw(st.binary(max_size=20)), queue_id=queue_id, queue_offset=qo,
                             store_timestamp=draw(st.integers(0, 2**41)), properties=props)
        items.append((MAGIC_NORMAL, raw))
    created = draw(st.sets(st.sampled_from(QUEUES)))
    cut = draw(st.integers(0, len(items)))
    keep = draw(st.sampled_from([None, ("A", 0), ("Cé", 2)]))
    return items, cut, {q: starts[q] + draw(st.sampled_from([0, 0, 0, 1])) for q in created}, keep


def records_of(items, first_pos=4096):
    out, pos = [], first_pos
    for k, (magic, body) in enumerate(items):
        record = encode(DLedgerEntry(body, magic, FIRST_INDEX + k, 3, pos))
        out.append(record)
        pos += len(record)
    return out


def service(root, created, keep, gathered):
    svc = ReputService(root)
    if not gathered:
        svc._scan_queues = None
    for (topic, queue_id), start in created.items():
        svc.queue(topic, queue_id).restart_at(start)
    svc.keep_bodies_of = keep
    svc.next_index = FIRST_INDEX
    heard = []
    svc.on_dispatch = lambda offset, ts: heard.append((offset, ts))
    return svc, heard


def state(svc, heard, dispatched):
    for cq in svc.queues.values():
        cq.commit()
    svc.index.commit()
    files = {}
    for sub, _dirs, names in os.walk(svc.root):
        for name in names:
            with open(os.path.join(sub, name), "rb") as fh:
                files[os.path.relpath(os.path.join(sub, name), svc.root)] = fh.read()
    return (files, {k: (cq.min_offset, cq.max_offset, cq.max_physical_offset) for k, cq in svc.queues.items()},
            svc.problems, svc.take_kept(), heard, dispatched, svc.next_index, svc.next_physical_offset)


def test_this_build_has_the_gathered_scan(tmp_path):
    assert speedups.compiled is not None and ReputService(str(tmp_path))._scan_queues is not None


@settings(max_examples=150, deadline=None)
@given(case=runs())
def test_the_gathered_dispatch_leaves_what_the_walk_leaves(tmp_path_factory, case):
    items, cut, created, keep = case
    records = records_of(items)
    out = []
    for gathered in (True, False):
        root = str(tmp_path_factory.mktemp("g" if gathered else "w"))
        svc, heard = service(root, created, keep, gathered)
        dispatched = []
        for run in (records[:cut], records[cut:]):
            if run:
                svc._dispatch_run(b"".join(run), dispatched)
        out.append(state(svc, heard, dispatched))
        svc.close(checkpoint=False)
    assert out[0] == out[1]


def test_a_run_of_usual_messages_is_gathered_and_a_queues_first_is_walked(tmp_path, monkeypatch):
    """The gathered path is the one taken for a run of messages to existing queues with their
    next offsets; a run with a queue's first message is walked (the queue is made there)."""
    used = []
    original = ReputService._dispatch_gathered

    def spy(self, found, dispatched):
        used.append(original(self, found, dispatched))
        return used[-1]

    monkeypatch.setattr(ReputService, "_dispatch_gathered", spy)
    svc, _heard = service(str(tmp_path), {}, None, True)
    first = records_of([(MAGIC_NORMAL, encode_message(topic="A", body=b"x", queue_offset=0))])
    svc._dispatch_run(b"".join(first), None)
    assert used == [False] and svc.queues[("A", 0)].max_offset == 1
    more = records_of([(MAGIC_NORMAL, encode_message(topic="A", body=b"x", queue_offset=k,
                                                     properties={"KEYS": f"k{k}"})) for k in (1, 2, 3)],
                      first_pos=svc.next_physical_offset)
    svc._dispatch_run(b"".join(more), None)
    assert used == [False, True] and svc.queues[("A", 0)].max_offset == 4
    assert svc.index.lookup("A", "k2") and not svc.problems
    svc.close(checkpoint=False)


def test_an_empty_run_changes_nothing_both_ways(tmp_path):
    assert speedups.compiled.scan_queues(b"", FIRST_INDEX, 8, None, 0) == ([], [], [], [], FIRST_INDEX, -1)
    for gathered in (True, False):
        svc, heard = service(str(tmp_path / str(gathered)), {("A", 0): 3}, None, gathered)
        svc.next_physical_offset = 4096
        svc._dispatch_run(b"", [])
        assert (svc.next_index, svc.next_physical_offset, heard) == (FIRST_INDEX, 4096, [])
        svc.close(checkpoint=False)


@settings(max_examples=60, deadline=None)
@given(first=st.lists(st.tuples(st.lists(st.integers(0, 2**31 - 1), min_size=1, max_size=3), st.integers(0, 50)),
                      max_size=6),
       again=st.lists(st.tuples(st.lists(st.integers(0, 2**31 - 1), min_size=1, max_size=3), st.integers(0, 50)),
                      min_size=1, max_size=6))
def test_the_index_given_its_work_skips_what_it_holds_as_given_the_messages(tmp_path_factory, first, again):
    """``index_hash_work`` (the gathered path's) against ``index_hashed`` (the walk's): after
    the messages of ``first``, those of ``again`` (whose offsets may lie below the newest
    file's end: indexed already) leave the same files."""
    from dledger.broker.index_service import IndexService

    def messages(spec, base):
        out, offset = [], base
        for hashes, step in spec:
            offset += 1 + step
            out.append((tuple(hashes), offset, 1_000 + offset))
        return out

    made = []
    for given_work in (True, False):
        root = str(tmp_path_factory.mktemp("ix"))
        ix = IndexService(root, undo=False)
        ms = messages(first, 100)
        later = messages(again, 100 + len(first) * 20 // 2)
        for batch in (ms, later):
            if given_work:
                ix.index_hash_work([(h, off, ts) for hashes, off, ts in batch for h in hashes])
            else:
                ix.index_hashed(batch)
        ix.commit()
        files = {}
        for sub, _dirs, names in os.walk(root):
            for name in names:
                with open(os.path.join(sub, name), "rb") as fh:
                    files[name] = fh.read()
        ix.close(commit=False)
        made.append(files)
    assert made[0] == made[1]
