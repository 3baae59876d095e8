"""Protocol-aware recovery in the core (``core.rejoin``), one node stepped by hand.

A member whose store is suspect votes in no round but a unanimous one (and only once its term
is known), persists nothing when it refuses, relearns a lost term from the others before it
answers any leader, marks its answers ``recovering`` and clears the flag, durably, only after
verifying the leader's log up to the leader's commit index and an entry of the leader's term,
in a push naming its incarnation.
Also here: a failed store stands down, and a role change is told with the term it is in.
"""

from __future__ import annotations

import random

import pytest

from core.wiring import Wired
from dledger.config import DLedgerConfig
from dledger.core import Node, Role, RoleChange, RoleEvent
from dledger.core.heartbeat import election_timeout_ms
from dledger.core.quorum import Majority
from dledger.core.rejoin import NO_MEMBER
from dledger.core.vote import ParseResult, VoteTally, parse_vote_tally
from dledger.protocol import (DLedgerResponseCode as Code, Envelope, HeartBeatRequest, HeartBeatResponse,
                              MetadataRequest, MetadataResponse, PushEntryRequest, PushEntryResponse, PushEntryType,
                              VoteRequest, VoteResponse,
                              VoteResult as R)
from dledger.store import DLedgerMemoryStore
from dledger.store.suspect import SuspectReason

PEERS = "n0-h:1;n1-h:2;n2-h:3"
PEERS5 = PEERS + ";n3-h:4;n4-h:5"


def node_with(suspect, *, term=5, vote=None, entries=0, entry_term=None, now=0, peers=PEERS):
    store = DLedgerMemoryStore(data_file_size=1 << 20, suspect=None)
    if entries:
        store.persist_term(entry_term if entry_term is not None else term, None)
        store.batch_append_as_leader([b"x"] * entries)
    if term >= store.current_term:
        store.persist_term(term, vote)
    else:                                   # the term file was lost: the term reads lower
        store._term, store._vote = term, vote
    store.suspect = suspect
    node = Node(DLedgerConfig(self_id="n0", peers=peers, group="g").validate(), store, random.Random(1), now_ms=now)
    return node


def ask(node, msg, now=0):
    node.receive(now, Envelope(msg.local_id, "n0", 99, False, msg))
    out = [m for m in node.take_ready().messages if m.is_response and m.request_id == 99]
    assert len(out) == 1
    return out[0].msg


def vote(node, candidate="n1", term=5, end_index=-1, end_term=-1, now=10_000, unanimous=False):
    return ask(node, VoteRequest(group="g", local_id=candidate, remote_id="n0", leader_id=candidate, term=term,
                                 ledger_end_index=end_index, ledger_end_term=end_term, unanimous=unanimous), now)


def hb(node, leader, term, now=0, commit=-1):
    return ask(node, HeartBeatRequest(group="g", local_id=leader, remote_id="n0", leader_id=leader, term=term,
                                      commit_index=commit), now)


def push(node, leader="n1", term=5, now=0, **kw):
    return ask(node, PushEntryRequest(group="g", local_id=leader, remote_id="n0", leader_id=leader, term=term,
                                      **kw), now)


def metadata_queries(node):
    """The MetadataRequests ``node`` has queued, by destination."""
    return {m.dst: m for m in node.take_ready().messages if isinstance(m.msg, MetadataRequest)}


def answer_metadata(node, query: Envelope, *, term, end=-1, vote_for=None, leader_id=None, now=0):
    node.receive(now, Envelope(query.dst, "n0", query.request_id, True,
                               MetadataResponse(group="g", local_id=query.dst, remote_id="n0", term=term,
                                                ledger_end_index=end, vote_for=vote_for, leader_id=leader_id)))


# -- voting ---------------------------------------------------------------------------------
@pytest.mark.parametrize("reason", list(SuspectReason))
def test_a_recovering_voter_refuses_every_plain_round_and_persists_nothing(reason):
    node = node_with(reason, term=5)
    for term in (5, 7):
        r = vote(node, term=term, end_index=10, end_term=5)
        assert r.vote_result == R.REJECT_RECOVERING
    assert (node.store.current_term, node.store.vote_for) == (5, None)


def test_a_recovering_voter_grants_a_unanimous_round_only_under_the_election_restriction():
    node = node_with(SuspectReason.UNCLEAN_SHUTDOWN, term=5, entries=3)
    assert vote(node, term=5, end_index=1, end_term=5, unanimous=True).vote_result == R.REJECT_SMALL_LEDGER_END_INDEX
    assert vote(node, term=5, end_index=2, end_term=5, unanimous=True).vote_result == R.ACCEPT
    assert node.store.vote_for == "n1"
    assert vote(node, "n2", term=5, end_index=9, end_term=5, unanimous=True).vote_result == R.REJECT_ALREADY_VOTED


def test_a_node_whose_term_is_lost_refuses_even_a_unanimous_round_until_it_relearnt_it():
    node = node_with(SuspectReason.TERM_LOST, term=0)
    assert vote(node, term=3, unanimous=True).vote_result == R.REJECT_RECOVERING
    assert node.store.current_term == 0


def test_a_recovering_candidate_counts_its_own_vote_only_in_a_unanimous_round():
    """Its plain round passes with a quorum of the others' votes, not with its own."""
    node = node_with(SuspectReason.UNCLEAN_SHUTDOWN, term=5)
    node.tick(10_000)
    asks = [m for m in node.take_ready().messages if isinstance(m.msg, VoteRequest)]
    assert asks and not any(m.msg.unanimous for m in asks)
    node.receive(10_001, Envelope("n1", "n0", asks[0].request_id, True, _vote_answer(asks[0], R.ACCEPT)))
    assert node.role is Role.CANDIDATE                       # its own vote and one other: no
    node.receive(10_001, Envelope("n2", "n0", asks[1].request_id, True, _vote_answer(asks[1], R.ACCEPT)))
    assert node.role is Role.LEADER and node.store.suspect is None


def test_a_sound_candidate_asks_for_a_unanimous_round_after_more_than_a_minority_answered_recovering():
    node = node_with(None, term=5)
    node.tick(10_000)
    asks = [m for m in node.take_ready().messages if isinstance(m.msg, VoteRequest)]
    assert asks and not any(m.msg.unanimous for m in asks)
    for m in asks:
        node.receive(10_000, Envelope(m.dst, "n0", m.request_id, True, _vote_answer(m, R.REJECT_RECOVERING)))
    node.take_ready()
    node.tick(20_000)
    again = [m.msg for m in node.take_ready().messages if isinstance(m.msg, VoteRequest)]
    assert again and all(r.unanimous for r in again)


def _vote_answer(m, result):
    return VoteResponse(group="g", local_id=m.dst, remote_id="n0", leader_id="n0", term=m.msg.term,
                        vote_result=result)


def test_a_unanimous_round_that_a_more_up_to_date_member_refused_backs_off_in_its_term():
    """One member is ahead of this candidate: it cannot win a unanimous round, so it keeps
    its term and waits longer, letting that member win (else two candidates outbid each
    other's terms forever: swarm seeds 2049, 2099)."""
    majority = Majority(["n0", "n1", "n2"])
    tally = VoteTally(4, unanimous=True)
    tally.add("n0", _vote_answer_of(R.ACCEPT))
    tally.add("n1", _vote_answer_of(R.ACCEPT))
    tally.add("n2", _vote_answer_of(R.REJECT_EXPIRED_LEDGER_TERM))
    assert parse_vote_tally(tally, majority) is ParseResult.WAIT_TO_REVOTE
    plain = VoteTally(4)
    for voter, result in (("n0", R.ACCEPT), ("n1", R.ACCEPT), ("n2", R.REJECT_EXPIRED_LEDGER_TERM)):
        plain.add(voter, _vote_answer_of(result))
    assert parse_vote_tally(plain, majority) is ParseResult.PASSED


def _vote_answer_of(result):
    return VoteResponse(group="g", local_id="n1", remote_id="n0", leader_id="n0", term=4, vote_result=result,
                        recovering=True)


# -- relearning a lost term -----------------------------------------------------------------
def test_a_lost_term_is_relearnt_from_the_others_with_a_vote_for_no_member():
    node = node_with(SuspectReason.TERM_LOST, term=0, entries=2, entry_term=3)
    queries = metadata_queries(node)
    assert set(queries) == {"n1", "n2"}
    assert hb(node, "n1", 5).code == Code.TERM_NOT_READY          # answers no leader yet
    answer_metadata(node, queries["n1"], term=5, end=1)
    assert node.store.current_term == 0                          # one answer of two: not yet
    answer_metadata(node, queries["n2"], term=4, end=1)
    assert (node.store.current_term, node.store.vote_for) == (5, NO_MEMBER)
    # it may have voted in term 5: it never votes there, and votes again only above it
    assert vote(node, term=5, end_index=9, end_term=5, unanimous=True).vote_result == R.REJECT_ALREADY_VOTED
    assert node.store.suspect is SuspectReason.TERM_LOST          # its log is caught up from a leader


def _stands(node, now) -> bool:
    """Whether ``node``, ticked at ``now``, sends vote requests."""
    node.tick(now)
    return any(isinstance(m.msg, VoteRequest) for m in node.take_ready().messages)


@pytest.mark.parametrize("answers, waits", [
    (({"vote_for": "n1"}, {"vote_for": "n1"}), True),                     # an election under way
    (({"vote_for": "n1", "leader_id": "n1"}, {"vote_for": "n1"}), True),  # an election won
    (({"leader_id": "n1"}, {}), True),                                    # a leader named alone
    (({"vote_for": NO_MEMBER}, {}), False),     # no election: a member that relearnt its own term
])
def test_a_relearnt_term_is_heard_out_for_an_election_timeout_only_when_the_answers_showed_an_election(answers,
                                                                                                       waits):
    """Standing above the relearnt term at once would depose the leader the answers named, or cut
    short the election they showed under way; with neither, nothing is lost by standing at once."""
    node = node_with(SuspectReason.TERM_LOST, term=0, entries=2, entry_term=3)
    queries = metadata_queries(node)
    for peer, fields in zip(("n1", "n2"), answers):
        answer_metadata(node, queries[peer], term=3, end=1, **fields)
    assert (node.store.current_term, node.store.vote_for) == (3, NO_MEMBER)
    first_round = next(now for now in range(0, 2_000, 10) if _stands(node, now))
    assert (first_round > node.config.max_vote_interval_ms) == waits, first_round
    if waits:
        assert first_round >= election_timeout_ms(node.config)
    assert node.term == 4                       # it stands above the relearnt term


def test_with_a_member_silent_the_term_is_relearnt_only_from_answers_after_an_election_timeout():
    """5 nodes: n - q + 1 = 3 answers are enough, but only to queries sent once every vote
    round that could still count a vote of this node's earlier life has ended."""
    node = node_with(SuspectReason.TERM_LOST, term=0, peers=PEERS5)
    early = metadata_queries(node)
    for peer in ("n1", "n2", "n3"):
        answer_metadata(node, early[peer], term=2)
    assert node.store.current_term == 0
    node.tick(300)
    late = metadata_queries(node)
    assert set(late) == {"n1", "n2", "n3", "n4"}
    for peer in ("n1", "n2", "n3"):
        answer_metadata(node, late[peer], term=4, now=300)
    assert (node.store.current_term, node.store.vote_for) == (4, NO_MEMBER)


def test_a_new_cluster_keeps_term_zero_and_clears_at_once():
    node = node_with(SuspectReason.FRESH, term=0)
    queries = metadata_queries(node)
    for peer, q in queries.items():
        answer_metadata(node, q, term=0)
    assert (node.store.current_term, node.store.vote_for, node.store.suspect) == (0, None, None)


def test_a_wiped_node_in_a_running_cluster_relearns_the_term_but_waits_for_a_leader():
    node = node_with(SuspectReason.FRESH, term=0)
    queries = metadata_queries(node)
    answer_metadata(node, queries["n1"], term=3, end=7, vote_for="n1")
    answer_metadata(node, queries["n2"], term=3, end=7, vote_for="n1")
    assert (node.store.current_term, node.store.vote_for) == (3, NO_MEMBER)
    assert node.store.suspect is SuspectReason.FRESH


# -- following and clearing -----------------------------------------------------------------
def _leader_records(term, count, start=0):
    leader = DLedgerMemoryStore(data_file_size=1 << 20, suspect=None)
    leader.persist_term(term, "n1")
    leader.batch_append_as_leader([b"e%d" % i for i in range(start + count)])
    return leader


def test_a_recovering_follower_answers_recovering_until_it_verified_an_entry_of_the_leaders_term():
    node = node_with(SuspectReason.UNCLEAN_SHUTDOWN, term=5)
    r = hb(node, "n1", 5)
    assert r.code == Code.SUCCESS and r.recovering and r.incarnation != 0
    inc = r.incarnation                     # the leader's pushes echo it from now on
    r = push(node, type=PushEntryType.COMPARE, pre_log_index=-1, pre_log_term=-1, incarnation=inc)
    assert r.recovering and r.incarnation == inc
    leader = _leader_records(5, 3)
    # the leader says index 2 is committed: verifying 0..1 is not enough
    r = push(node, type=PushEntryType.APPEND, entries=leader.get_raw_range(0, 1 << 20, 2)[0], first_entry_index=0,
             count=2, pre_log_index=-1, pre_log_term=-1, last_entry_term=5, commit_index=2, incarnation=inc)
    assert r.code == Code.SUCCESS and r.recovering and node.store.suspect is SuspectReason.UNCLEAN_SHUTDOWN
    r = push(node, type=PushEntryType.APPEND, entries=leader.get_raw_range(2, 1 << 20)[0], first_entry_index=2,
             count=1, pre_log_index=1, pre_log_term=5, last_entry_term=5, commit_index=2, incarnation=inc)
    assert r.code == Code.SUCCESS and not r.recovering and node.store.suspect is None
    assert r.incarnation == 0 and hb(node, "n1", 5).incarnation == 0


@pytest.mark.parametrize("named", ["none", "an earlier incarnation"])
def test_a_push_that_does_not_name_this_incarnation_never_ends_the_recovery(named):
    """Swarm seed 90058: a frame of the leader of this term sent before it heard this node
    say ``recovering`` (here replayed after the restart) carries a commit index from then;
    entries the leader committed later with this node's acknowledgement (lost with its page
    cache) are above it. Verifying that push's commit index and an entry of its term proves
    nothing: only a push naming this process's incarnation (sent after the leader forgot this
    node's water mark) may end the recovery."""
    node = node_with(SuspectReason.UNCLEAN_SHUTDOWN, term=5)
    inc = hb(node, "n1", 5).incarnation
    stale = 0 if named == "none" else inc + 1
    leader = _leader_records(5, 3)
    assert push(node, type=PushEntryType.COMPARE, pre_log_index=-1, pre_log_term=-1, incarnation=stale).recovering
    r = push(node, type=PushEntryType.APPEND, entries=leader.get_raw_range(0, 1 << 20)[0], first_entry_index=0,
             count=3, pre_log_index=-1, pre_log_term=-1, last_entry_term=5, commit_index=1, incarnation=stale)
    assert r.code == Code.SUCCESS and r.recovering and node.store.suspect is SuspectReason.UNCLEAN_SHUTDOWN
    r = push(node, type=PushEntryType.COMMIT, commit_index=1, incarnation=stale)
    assert r.code == Code.SUCCESS and r.recovering and node.store.suspect is SuspectReason.UNCLEAN_SHUTDOWN
    assert vote(node, "n2", term=5, end_index=1, end_term=5, now=0).vote_result == R.REJECT_RECOVERING
    # the leader's next push, sent once it heard the answer above, names the incarnation
    r = push(node, type=PushEntryType.COMMIT, commit_index=2, incarnation=inc)
    assert r.code == Code.SUCCESS and not r.recovering and node.store.suspect is None


def test_entries_of_older_terms_alone_do_not_clear_the_flag():
    node = node_with(SuspectReason.UNCLEAN_SHUTDOWN, term=6)
    older = _leader_records(5, 3)
    inc = hb(node, "n1", 6).incarnation
    assert push(node, term=6, type=PushEntryType.COMPARE, pre_log_index=-1, pre_log_term=-1,
                incarnation=inc).code == Code.SUCCESS
    r = push(node, term=6, type=PushEntryType.APPEND, entries=older.get_raw_range(0, 1 << 20)[0],
             first_entry_index=0, count=3, pre_log_index=-1, pre_log_term=-1, last_entry_term=5, commit_index=-1,
             incarnation=inc)
    assert r.code == Code.SUCCESS and r.recovering
    assert node.store.suspect is SuspectReason.UNCLEAN_SHUTDOWN


# -- a failed store ------------------------------------------------------------------------
def test_a_failed_store_grants_no_vote_and_stands_for_nothing():
    node = node_with(None, term=5)
    node.store.failed = "injected: msync failed"
    r = vote(node, term=6)
    assert (r.vote_result, r.code) == (R.UNKNOWN, Code.DISK_ERROR) and node.store.current_term == 5
    node.tick(10_000)
    assert not [m for m in node.take_ready().messages if isinstance(m.msg, VoteRequest)]


# -- the term a role change is told with ---------------------------------------------------
def test_a_voter_that_joins_a_higher_term_is_told_as_candidate_of_that_term():
    """The role change is told once the term is durable, with that term (it used to be told
    with the term the node was leaving)."""
    node = node_with(None, term=5)
    node.take_ready()
    hb(node, "n1", 5)
    node.receive(10_000, Envelope("n2", "n0", 7, False, VoteRequest(
        group="g", local_id="n2", remote_id="n0", leader_id="n2", term=7)))
    ready = node.take_ready()
    assert ready.role_changes == [RoleChange(7, Role.CANDIDATE, None, RoleEvent.HIGHER_TERM_SEEN)]
    assert node.store.current_term == 7
    # and the higher term seen through a heartbeat is told the same way
    node.receive(10_001, Envelope("n1", "n0", 8, False, HeartBeatRequest(
        group="g", local_id="n1", remote_id="n0", leader_id="n1", term=9)))
    assert node.take_ready().role_changes == [RoleChange(9, Role.CANDIDATE, None, RoleEvent.HIGHER_TERM_SEEN)]


# -- the leader's side ---------------------------------------------------------------------
def test_a_leader_counts_no_water_mark_of_a_follower_that_says_it_is_recovering():
    """The only follower in reach acknowledges an append but says it is recovering: nothing
    commits. Once its answers come without the flag, its water mark counts again."""
    w = Wired(3, seed=1)
    assert w.run_until(lambda: w.leader() is not None)
    lead = w.leader()
    f, other = [i for i in w.ids if i != lead]
    w.run(200)
    w.cut.add(other)
    before = w.nodes[lead].committed_index

    def recovering(env) -> bool:
        if env.src == f and isinstance(env.msg, (PushEntryResponse, HeartBeatResponse)):
            env.msg.recovering = True
        return False

    w.drop = recovering
    w.propose(lead, "t1", [b"x"])
    w.run(300)
    progress = w.nodes[lead].pusher.progress[f]
    assert progress.recovering and progress.match == w.nodes[lead].store.ledger_end_index
    assert w.nodes[lead].committed_index == before and "t1" not in w.completions
    w.drop = None
    w.run(w.nodes[lead].config.max_push_timeout_ms + 100)      # the next push (idle: a keepalive)
    assert not progress.recovering and w.nodes[lead].committed_index > before
    assert w.completions["t1"].response.code == Code.SUCCESS


def test_a_leader_names_a_recovering_followers_incarnation_in_its_pushes_and_starts_again_for_a_new_one():
    """The follower restarts suspect: the leader hears its incarnation with ``recovering``,
    forgets its water mark and names that incarnation in every push until it clears. It
    restarts again before clearing: the new incarnation starts the recovery anew (new epoch),
    and only a push naming it ends the recovery."""
    w = Wired(3, seed=1)
    assert w.run_until(lambda: w.leader() is not None)
    lead = w.leader()
    f = next(i for i in w.ids if i != lead)
    w.propose(lead, "t1", [b"x"])
    w.run(200)
    pr = w.nodes[lead].pusher.progress[f]
    epoch = pr.epoch
    pushes: list = []

    def restart(incarnation: int) -> None:
        w.stop(f)
        w.stores[f].suspect = SuspectReason.UNCLEAN_SHUTDOWN
        w.start(f).recovery.incarnation = incarnation

    restart(111)
    # the follower's heartbeat answers get through, the pushes to it do not
    w.drop = lambda env: env.dst == f and isinstance(env.msg, PushEntryRequest) and not pushes.append(env.msg)
    w.run(300)
    assert (pr.recovering, pr.incarnation, pr.epoch) == (True, 111, epoch + 1)
    assert pushes and all(m.incarnation == 111 for m in pushes)
    assert w.stores[f].suspect is SuspectReason.UNCLEAN_SHUTDOWN
    restart(222)
    pushes.clear()
    w.drop = lambda env: env.dst == f and isinstance(env.msg, PushEntryRequest) and pushes.append(env.msg)
    assert w.run_until(lambda: w.stores[f].suspect is None, 2_000)
    assert (pr.incarnation, pr.epoch) == (222, epoch + 2)
    assert {m.incarnation for m in pushes} <= {0, 222} and pushes[0].incarnation == 222
    w.run(300)
    assert not pr.recovering and pr.match == w.nodes[lead].store.ledger_end_index


def test_a_new_five_node_cluster_with_a_member_down_still_starts_after_the_wait():
    """Three late answers (n - q + 1) all saying term 0, no vote, an empty log: no leader was
    ever elected (its quorum would meet them), so the new node clears and keeps term 0."""
    node = node_with(SuspectReason.FRESH, term=0, peers=PEERS5)
    metadata_queries(node)
    node.tick(300)
    late = metadata_queries(node)
    for peer in ("n1", "n2", "n3"):
        answer_metadata(node, late[peer], term=0, now=300)
    assert (node.store.current_term, node.store.vote_for, node.store.suspect) == (0, None, None)


def test_a_member_that_voted_is_no_new_cluster():
    node = node_with(SuspectReason.FRESH, term=0, peers=PEERS5)
    metadata_queries(node)
    node.tick(300)
    late = metadata_queries(node)
    for peer, vote_for in (("n1", None), ("n2", "n4"), ("n3", None)):
        answer_metadata(node, late[peer], term=0, vote_for=vote_for, now=300)
    assert (node.store.current_term, node.store.vote_for) == (0, NO_MEMBER)
    assert node.store.suspect is SuspectReason.FRESH


# -- the wire --------------------------------------------------------------------------------
@pytest.mark.parametrize("msg", [
    VoteRequest(group="g", local_id="n1", remote_id="n0", term=3, unanimous=True),
    VoteResponse(group="g", local_id="n1", remote_id="n0", term=3, vote_result=R.REJECT_RECOVERING, recovering=True),
    HeartBeatResponse(group="g", local_id="n1", remote_id="n0", term=3, recovering=True, incarnation=1 << 40),
    PushEntryResponse(group="g", local_id="n1", remote_id="n0", term=3, recovering=True, incarnation=1 << 40),
    PushEntryRequest(group="g", local_id="n1", remote_id="n0", term=3, commit_index=4, incarnation=1 << 40),
    MetadataResponse(group="g", local_id="n1", remote_id="n0", term=3, ledger_end_index=7, vote_for="n2"),
])
def test_the_recovery_fields_travel_and_a_frame_without_them_decodes_with_defaults(msg):
    import zlib

    import msgpack

    from dledger import protocol
    env = Envelope("n1", "n0", 5, True, msg)
    assert protocol.decode_envelope(protocol.encode_envelope(env)).msg == msg
    added = protocol._ADDED_FIELDS[type(msg)]
    values = [getattr(msg, name) for name, _check in protocol._SCHEMA[type(msg)]][:-len(added)]
    body = msgpack.packb([protocol.WIRE_VERSION, "n1", "n0", 5, True, protocol._TAG_OF[type(msg)], values],
                         use_bin_type=True)
    old = protocol.decode_envelope(body + zlib.crc32(body).to_bytes(protocol.CRC_BYTES, "big")).msg
    assert all(getattr(old, name) == getattr(type(msg)(), name) for name in added)
    shorter = msgpack.packb([protocol.WIRE_VERSION, "n1", "n0", 5, True, protocol._TAG_OF[type(msg)], values[:-1]],
                           use_bin_type=True)
    with pytest.raises(protocol.FrameError):
        protocol.decode_envelope(shorter + zlib.crc32(shorter).to_bytes(protocol.CRC_BYTES, "big"))
