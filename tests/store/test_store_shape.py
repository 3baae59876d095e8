"""The shape of the file store, kept: the façade is assembled from parts that each hold the one
shared state (``StoreState``), never from mixins; recovery's planner holds its scan state and
its judge, it does not inherit them.

The inheritance rule is checked on the source with ``ast``, so that making a part a base class
again (``class DLedgerMmapFileStore(LogWriter, ...)``, ``class _Planner(RecoveryScan)``) fails
here with the file and line; the wiring is checked on an open store.
"""

from __future__ import annotations

import ast
import pathlib

from dledger.store import DLedgerMemoryStore, DLedgerMmapFileStore
from dledger.store.base import StoreBase
from dledger.store.durability import PAGE_CACHE
from dledger.store.log_reader import LogReader
from dledger.store.mmap_file_list import MmapFileList
from dledger.store.recovery import _Planner
from dledger.store.recovery_scan import RecoveryScan

STORE = pathlib.Path(__file__).resolve().parents[2] / "src" / "dledger" / "store"

#: the one inheritance inside the store package: both stores share ``StoreBase``
ALLOWED = {("memory_store.py", "DLedgerMemoryStore", "StoreBase"),
           ("mmap_file_store.py", "DLedgerMmapFileStore", "StoreBase")}

#: the façade's parts, by attribute
PARTS = ("_writer", "_reader", "_flusher", "_retention", "_cut", "_repair")

#: the reads, bound from the reader part on every store
READS = ("get", "get_raw", "get_raw_range", "get_entry_term", "verify")


def store_package_bases() -> list[tuple[str, int, str, str]]:
    """(file, line, class, base) for every base class that is itself a class of the store package."""
    trees = {p.name: ast.parse(p.read_text()) for p in sorted(STORE.glob("*.py"))}
    ours = {node.name for tree in trees.values() for node in ast.walk(tree) if isinstance(node, ast.ClassDef)}
    found = []
    for fname, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                for base in node.bases:
                    name = ast.unparse(base).split(".")[-1]
                    if name in ours:
                        found.append((fname, node.lineno, node.name, name))
    return found


def test_no_class_of_the_store_inherits_another_but_the_stores_their_base():
    mixins = [f"{f}:{line}: class {cls}({base})" for f, line, cls, base in store_package_bases()
              if (f, cls, base) not in ALLOWED]
    assert mixins == []


def test_the_rule_sees_the_stores_base():
    assert {(f, cls, base) for f, _line, cls, base in store_package_bases()} == ALLOWED
    assert DLedgerMmapFileStore.__bases__ == (StoreBase,)
    assert DLedgerMemoryStore.__bases__ == (StoreBase,)


def test_every_part_of_an_open_store_holds_its_one_state(open_file_store):
    store = open_file_store()
    for part in PARTS:
        assert getattr(store, part).state is store._state, part
    # the parts hold the store's files, not copies of them
    assert store._writer.data_list is store._reader.data_list is store.data_list is store._state.data_list
    assert store._writer.index_list is store._reader.index_list is store.index_list


def test_the_reads_are_the_readers_own_methods_with_no_layer_between(open_file_store):
    store = open_file_store()
    for name in READS:
        read = getattr(store, name)
        assert read.__self__ is store._reader, name
        assert read.__func__ is getattr(LogReader, name), name


def test_an_append_moves_the_bounds_every_part_and_the_facade_read(open_file_store):
    store = open_file_store()
    store.persist_term(2, None)
    store.batch_append_as_leader([b"a", b"bb", b"ccc"])
    assert store.ledger_end_index == store._state.ledger_end_index == 2
    assert store.ledger_end_term == 2
    assert [e.body for e in store.iter_entries()] == [b"a", b"bb", b"ccc"]   # StoreBase, through the reader
    assert store.get_first_log_of_target_term(2, 2).index == 0


def test_the_recovery_planner_holds_its_scan_and_shares_it_with_its_judge(tmp_path):
    lists = [MmapFileList(str(tmp_path / name), 4096) for name in ("data", "index")]
    scan = RecoveryScan(*lists, store_dir=str(tmp_path), data_path=str(tmp_path / "data"),
                        durability=PAGE_CACHE, read_only=True)
    planner = _Planner(scan)
    assert _Planner.__bases__ == (object,)
    assert planner.scan is scan and planner.judge.scan is scan
