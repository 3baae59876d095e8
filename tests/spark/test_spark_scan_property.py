"""Property: the scan engine returns exactly what the store serves, for any store history.

No Spark here: ``dledger.spark.scan`` is what every Spark task runs.
"""

import os
import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dledger.spark import scan
from dledger.store import DLedgerMmapFileStore, open_store

APPEND = st.tuples(st.just("append"), st.lists(st.integers(0, 700), min_size=5, max_size=40))
OPS = st.lists(st.one_of(
    APPEND,
    st.tuples(st.just("truncate"), st.floats(0, 1)),   # where, as a fraction of the log
    st.tuples(st.just("reset"), st.floats(0, 1)),
    st.tuples(st.just("term"), st.integers(1, 3)),
), min_size=0, max_size=6).flatmap(lambda rest: APPEND.map(lambda first: [first, *rest]))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS, data_file_size=st.sampled_from([1024, 2048, 4096]),
       lo=st.one_of(st.none(), st.integers(-2, 80)),
       span=st.one_of(st.none(), st.integers(0, 60)), body=st.booleans())
def test_scan_matches_the_store(ops, data_file_size, lo, span, body):
    with tempfile.TemporaryDirectory() as tmp:
        d = os.path.join(tmp, "dledger-n0")
        store = DLedgerMmapFileStore.open(d, data_file_size=data_file_size,
                                          index_file_size=32 * 32)
        term = 1
        store.persist_term(term, None)
        n = 0
        for op, arg in ops:
            if op == "append":
                store.batch_append_as_leader([bytes([n % 251]) * size for size in arg])
                n += len(arg)
            elif op == "term":
                term += arg
                store.persist_term(term, None)
            elif op in ("truncate", "reset"):
                begin, end = store.ledger_before_begin_index + 1, store.ledger_end_index
                k = begin + int(arg * (end - begin))
                if op == "truncate" and begin < k <= end:
                    store.truncate(k)
                elif op == "reset" and begin <= k < end:
                    store.reset(k, store.get_entry_term(k))
        store.close()
        hi = None if span is None else (lo or 0) + span
        with open_store(d) as st_:
            first = st_.ledger_before_begin_index + 1
            expected = [(e.index, e.term, e.magic, e.size, e.body) for e in st_.iter_entries()
                        if (lo is None or e.index >= lo) and (hi is None or e.index < hi)]
        table = scan.read_stores([d], lo=lo, hi=hi, body=body)
        cols = ["index", "term", "magic", "size"] + (["body"] if body else [])
        got = list(zip(*(table.column(c).to_pylist() for c in cols)))
        assert got == [e[:len(cols)] for e in expected], (first, lo, hi)
        assert table.column("error").null_count == table.num_rows
        assert all(table.column("crc_ok").to_pylist())
