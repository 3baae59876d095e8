"""Consume-queue files and the key index against simple models (hypothesis): what is written
reads back after a reopen, lookups find every offset of a key, truncation drops exactly the
units and entries at or beyond an offset."""

import os
import tempfile

from hypothesis import given, settings
from hypothesis import strategies as st

from dledger.broker.consume_queue import ConsumeQueue
from dledger.broker.index_service import IndexService


@settings(max_examples=40, deadline=None)
@given(sizes=st.lists(st.integers(1, 500), max_size=60), per_file=st.integers(1, 12), cut=st.integers(0, 40_000))
def test_consume_queue_units_survive_a_reopen_and_truncate_exactly(sizes, per_file, cut):
    with tempfile.TemporaryDirectory() as root:
        cq = ConsumeQueue(root, "T", 3, units_per_file=per_file)
        units, off = [], 0
        for q, size in enumerate(sizes):
            cq.put(q, off, size, q * 7 - 100)
            units.append((off, size, q * 7 - 100))
            off += size + 48
        cq.close()
        again = ConsumeQueue(root, "T", 3, units_per_file=per_file)
        assert again.max_offset == len(units) and again.units(0, 10_000) == units
        files = sorted(os.listdir(again.dir)) if os.path.isdir(again.dir) else []
        assert files == [f"{i * per_file * 20:020d}" for i in range(len(files))]
        kept = [u for u in units if u[0] < cut]
        assert again.truncate_from_physical(cut) == len(units) - len(kept)
        again.close()
        third = ConsumeQueue(root, "T", 3, units_per_file=per_file)
        assert third.units(0, 10_000) == kept and third.max_offset == len(kept)
        third.close()


@settings(max_examples=40, deadline=None)
@given(keys=st.lists(st.sampled_from(["a", "b", "order-1", "user-7", "Aa", "BB", "x" * 40]), max_size=80),
       index_num=st.integers(2, 30), slots=st.integers(1, 16), cut=st.integers(0, 100))
def test_index_lookups_find_every_offset_of_a_key_newest_first(keys, index_num, slots, cut):
    # "Aa" and "BB" have the same Java hash code: lookups return both, as RocketMQ's do
    with tempfile.TemporaryDirectory() as root:
        idx = IndexService(root, slots=slots, index_num=index_num)
        for off, key in enumerate(keys):
            idx.build_index("T", [key], off, 1_700_000_000_000 + off * 1000)
        same_hash = {"Aa": {"Aa", "BB"}, "BB": {"Aa", "BB"}}
        for key in set(keys):
            want = [o for o in range(len(keys) - 1, -1, -1) if keys[o] in same_hash.get(key, {key})]
            assert idx.lookup("T", key, 10_000) == want
        assert idx.lookup("T", "absent", 10) == [] or "absent" in keys
        idx.truncate_from_physical(cut)
        idx.close()
        again = IndexService(root, slots=slots, index_num=index_num)
        for key in set(keys):
            want = [o for o in range(min(cut, len(keys)) - 1, -1, -1) if keys[o] in same_hash.get(key, {key})]
            assert again.lookup("T", key, 10_000) == want
        again.close()
