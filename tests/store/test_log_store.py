"""Every store the core can be handed satisfies ``LogStore``, member by member, signatures included:
the file store, the memory store, and the simulator's ``FaultyStore`` wrapping either."""

import inspect

import pytest

from dledger.sim.disk import FaultyStore
from dledger.store import DLedgerMemoryStore, LogStore


def protocol_members():
    """(data members, properties, methods) declared by ``LogStore`` itself."""
    data = set(LogStore.__annotations__)
    props = {n for n, v in vars(LogStore).items() if isinstance(v, property)}
    methods = {n for n, v in vars(LogStore).items()
               if inspect.isfunction(v) and not n.startswith("_")}
    return data, props, methods


def parameters(fn):
    """The parameters as a caller sees them: names, kinds and defaults (no annotations, no self)."""
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()
            if p.name != "self"]


@pytest.fixture(params=["file", "memory", "faulty-file", "faulty-memory"])
def store(request, open_file_store):
    kind = request.param
    inner = open_file_store() if kind.endswith("file") else DLedgerMemoryStore()
    return FaultyStore(inner) if kind.startswith("faulty") else inner


def test_the_protocol_names_what_the_core_and_server_use():
    data, props, methods = protocol_members()
    assert {"ledger_end_index", "ledger_before_begin_index", "committed_index", "max_entry_size"} <= data
    assert props == {"current_term", "vote_for"}
    assert {"append_as_leader", "batch_append_as_follower", "get_raw_range", "truncate", "reset",
            "flush_if_due", "clean", "close"} <= methods


def test_every_store_satisfies_the_protocol_member_by_member(store):
    assert isinstance(store, LogStore)
    data, props, methods = protocol_members()
    for name in sorted(data | props):
        assert not callable(getattr(store, name)), name
    for name in sorted(methods):
        impl = getattr(store, name)
        assert callable(impl), name
        assert parameters(impl) == parameters(getattr(LogStore, name)), name


def test_the_signature_check_sees_a_mismatch():
    class Odd:
        def truncate(self, index):  # another parameter name than the protocol's
            return index

    assert parameters(Odd().truncate) != parameters(LogStore.truncate)
