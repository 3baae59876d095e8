"""Remote misbehaviour (wrong group or member, inconsistent pushes, fuzzed requests): malformed or hostile pushes get an
error answer, change nothing and never raise. Only ``PeerProtocolError`` is taken for the peer's fault: a builtin
exception escaping a handler is a bug in the core and reaches the caller of ``receive``."""

import random

import pytest
from hypothesis import given, settings, strategies as st

from dledger.config import DLedgerConfig
from dledger.core import Node, Role
from dledger.errors import PeerProtocolError
from dledger.protocol import (DLedgerResponseCode as Code, Envelope, HeartBeatRequest, PushEntryRequest,
                              PushEntryResponse, PushEntryType, VoteRequest)
from dledger.store import DLedgerMemoryStore

PEERS = "n0-h:1;n1-h:2;n2-h:3"


def follower_with_log(entries=3):
    """n0 following n1 in term 2, holding ``entries`` entries written by n1."""
    leader_store = DLedgerMemoryStore(data_file_size=1 << 16, suspect=None)
    leader_store.persist_term(2, "n1")
    leader_store.batch_append_as_leader([b"e%d" % i for i in range(entries)])
    store = DLedgerMemoryStore(data_file_size=1 << 16, suspect=None)
    store.persist_term(2, None)
    raw, _n = leader_store.get_raw_range(0, 1 << 20)
    store.batch_append_as_follower(raw, 2, "n1")
    node = Node(DLedgerConfig(self_id="n0", peers=PEERS, group="g").validate(), store, random.Random(1))
    node.take_ready()
    node.receive(0, Envelope("n1", "n0", 1, False, HeartBeatRequest(group="g", local_id="n1", remote_id="n0",
                                                                   leader_id="n1", term=2)))
    node.take_ready()
    assert node.role is Role.FOLLOWER
    return node, leader_store


def push(node, **kw):
    base = dict(group="g", local_id="n1", remote_id="n0", leader_id="n1", term=2, type=PushEntryType.APPEND)
    base.update(kw)
    node.receive(1, Envelope("n1", "n0", 7, False, PushEntryRequest(**base)))
    out = [m.msg for m in node.take_ready().messages if m.request_id == 7]
    return out[0] if out else None


@settings(max_examples=300, deadline=None)
@given(entries=st.binary(max_size=300), first=st.integers(-5, 10), count=st.integers(-2, 5),
       type_=st.sampled_from(list(PushEntryType)), pre=st.integers(-3, 10), pre_term=st.integers(-2, 4),
       commit=st.integers(-2, 20))
def test_random_pushes_never_raise_and_never_damage_the_log(entries, first, count, type_, pre, pre_term, commit):
    node, _leader = follower_with_log()
    before = [node.store.get_raw(i) for i in range(3)]
    resp = push(node, entries=entries, first_entry_index=first, count=count, type=type_, pre_log_index=pre,
                pre_log_term=pre_term, commit_index=commit)
    assert resp is None or isinstance(resp.code, int)
    # verified or committed entries are never lost; what remains is what the leader wrote
    assert node.committed_index <= node.store.ledger_end_index
    for i in range(min(3, node.store.ledger_end_index + 1)):
        assert node.store.get_raw(i) == before[i]


def test_a_push_with_a_corrupt_record_is_refused_and_nothing_is_written():
    node, leader = follower_with_log(3)
    leader.batch_append_as_leader([b"new"])
    raw = bytearray(leader.get_raw(3))
    raw[-1] ^= 1                                             # flip a body bit: CRC mismatch
    resp = push(node, entries=bytes(raw), first_entry_index=3, count=1, last_entry_term=2,
                pre_log_index=2, pre_log_term=2)
    assert resp.code == Code.INCONSISTENT_STATE and node.store.ledger_end_index == 2


def test_a_push_from_a_stranger_or_an_old_term_changes_nothing():
    node, leader = follower_with_log(3)
    leader.batch_append_as_leader([b"new"])
    raw = leader.get_raw(3)
    assert push(node, leader_id="n2", entries=raw, first_entry_index=3, count=1).code == Code.INCONSISTENT_LEADER
    assert push(node, term=1, entries=raw, first_entry_index=3, count=1).code == Code.EXPIRED_TERM
    assert node.store.ledger_end_index == 2 and node.term == 2


def test_vote_and_heartbeat_with_absurd_terms_from_strangers_are_refused_without_a_term_change():
    node, _ = follower_with_log(1)
    node.receive(5, Envelope("n9", "n0", 3, False, VoteRequest(group="g", local_id="n9", remote_id="n0",
                                                               leader_id="n9", term=(1 << 62),
                                                               ledger_end_index=99, ledger_end_term=99)))
    node.receive(5, Envelope("n9", "n0", 4, False, HeartBeatRequest(group="g", local_id="n9", remote_id="n0",
                                                                    leader_id="n9", term=(1 << 62))))
    assert node.term == 2
    codes = [m.msg for m in node.take_ready().messages if m.is_response]
    assert len(codes) == 2


def test_a_push_whose_overlapping_record_is_cut_short_is_answered_unexpected_argument_and_changes_nothing():
    node, _leader = follower_with_log(3)
    before = [node.store.get_raw(i) for i in range(3)]
    # entry 1 is held here: the push overlaps the log, and its bytes end before a record header
    resp = push(node, entries=b"\0", first_entry_index=1, count=1, pre_log_index=0, pre_log_term=2)
    assert isinstance(resp, PushEntryResponse) and resp.code == Code.UNEXPECTED_ARGUMENT and resp.term == 2
    assert [node.store.get_raw(i) for i in range(3)] == before and node.term == 2 and node.role is Role.FOLLOWER


def test_a_parked_push_cut_short_is_answered_itself_and_the_push_that_drains_it_gets_its_own_answer():
    node, leader = follower_with_log(2)
    leader.batch_append_as_leader([b"e2", b"e3"])
    # a push of entries 3.. parks (entry 2 is missing); its bytes are one byte
    node.receive(1, Envelope("n1", "n0", 8, False, PushEntryRequest(
        group="g", local_id="n1", remote_id="n0", leader_id="n1", term=2, type=PushEntryType.APPEND,
        entries=b"\0", first_entry_index=3, count=1, pre_log_index=2, pre_log_term=2)))
    assert not [m for m in node.take_ready().messages if m.request_id == 8]
    # entries 2 and 3 arrive: the parked push now overlaps the log and is drained
    node.receive(2, Envelope("n1", "n0", 9, False, PushEntryRequest(
        group="g", local_id="n1", remote_id="n0", leader_id="n1", term=2, type=PushEntryType.APPEND,
        entries=bytes(leader.get_raw(2)) + bytes(leader.get_raw(3)), first_entry_index=2, count=2,
        pre_log_index=1, pre_log_term=2, last_entry_term=2)))
    answers = {m.request_id: m.msg for m in node.take_ready().messages if m.is_response}
    assert answers[8].code == Code.UNEXPECTED_ARGUMENT and answers[8].index == 3
    assert answers[9].code == Code.SUCCESS and answers[9].index == 2
    assert node.store.ledger_end_index == 3 and not node.handler.waiting


@pytest.mark.parametrize("error", [ValueError("bug"), TypeError("bug"), IndexError("bug"), KeyError("bug")])
def test_a_builtin_exception_inside_a_handler_is_a_bug_and_reaches_the_caller(error):
    node, _ = follower_with_log(1)

    def broken(*_a, **_kw):
        raise error

    node.handler.handle_push = broken
    with pytest.raises(type(error)):
        node.receive(1, Envelope("n1", "n0", 7, False, PushEntryRequest(
            group="g", local_id="n1", remote_id="n0", leader_id="n1", term=2, type=PushEntryType.COMMIT)))


def test_a_peer_protocol_error_inside_a_handler_is_answered_unexpected_argument_with_the_own_term():
    node, _ = follower_with_log(1)

    def refuses(*_a, **_kw):
        raise PeerProtocolError("votes for nobody")

    node.elector.voting.admit = refuses
    node.receive(1, Envelope("n2", "n0", 5, False, VoteRequest(group="g", local_id="n2", remote_id="n0",
                                                               leader_id="n2", term=7)))
    answers = [m.msg for m in node.take_ready().messages if m.request_id == 5]
    assert len(answers) == 1 and answers[0].code == Code.UNEXPECTED_ARGUMENT and answers[0].term == 2
    assert node.term == 2


# -- installs (the leader moves a follower's log start, core.log_start) ------------------------------
def install(node, rid=9, **kw):
    from dledger.protocol import InstallSnapshotRequest
    base = dict(group="g", local_id="n1", remote_id="n0", leader_id="n1", term=2, last_included_index=10,
                last_included_term=2, next_pos=4096, commit_index=12)
    base.update(kw)
    node.receive(1, Envelope("n1", "n0", rid, False, InstallSnapshotRequest(**base)))
    out = [m.msg for m in node.take_ready().messages if m.request_id == rid]
    return out[0] if out else None


@pytest.mark.parametrize("bad", [dict(next_pos=-1), dict(last_included_index=-1), dict(last_included_term=-1),
                                 dict(next_pos=-7), dict(last_included_index=-2)])
def test_a_nonsense_install_is_the_peers_fault_and_changes_nothing(bad):
    node, _leader = follower_with_log()
    before = [node.store.get_raw(i) for i in range(3)]
    resp = install(node, **bad)
    assert resp.code == Code.UNEXPECTED_ARGUMENT
    assert (node.store.ledger_before_begin_index, node.store.ledger_end_index) == (-1, 2)
    assert [node.store.get_raw(i) for i in range(3)] == before


@pytest.mark.parametrize("who,term,code", [("n2", 2, Code.INCONSISTENT_LEADER), ("n1", 1, Code.EXPIRED_TERM),
                                           ("n1", 3, Code.NOT_FOLLOWER)])
def test_an_install_passes_the_term_gate_and_the_leader_check_as_a_push(who, term, code):
    node, _leader = follower_with_log()
    resp = install(node, leader_id=who, local_id=who, term=term)
    assert resp.code == code and node.store.ledger_end_index == 2 and node.term == 2


def test_an_install_moves_the_log_start_and_a_late_copy_changes_nothing():
    node, leader = follower_with_log()
    resp = install(node)
    assert resp.code == Code.SUCCESS and resp.end_index == 10
    store = node.store
    assert (store.ledger_before_begin_index, store.ledger_before_begin_term, store.ledger_end_index) == (10, 2, 10)
    assert node.committed_index == 10 and node.applied_index == 10
    assert install(node, rid=10).code == Code.SUCCESS                     # a duplicate: nothing to do
    assert (store.ledger_before_begin_index, store.ledger_end_index) == (10, 10)
    old = install(node, rid=11, last_included_index=5, next_pos=100)     # an older one: refused
    assert old.code == Code.INCONSISTENT_STATE and store.ledger_before_begin_index == 10
