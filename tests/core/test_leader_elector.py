"""LeaderElector rules, with nodes stepped directly (explicit now_ms, crafted messages)."""

import random

import pytest

from core.wiring import Wired
from dledger.config import DLedgerConfig
from dledger.core import Node, Role, RoleChange, RoleEvent
from dledger.core import vote as vote_module
from dledger.core.leader_elector import ParseResult, VoteTally, parse_vote_tally
from dledger.core.member_state import MemberState
from dledger.core.quorum import Majority
from dledger.protocol import (DLedgerResponseCode as Code, Envelope, HeartBeatRequest, LeadershipTransferRequest,
                              VoteRequest, VoteResult as R)
from dledger.store import DLedgerMemoryStore

PEERS = "n0-h:1;n1-h:2;n2-h:3"


def lone(term=5, vote=None, leader=None, entries=0, entry_term=None, now=0, store_cls=DLedgerMemoryStore):
    """n0 of a 3-node group (an established member: its store is not suspect), stepped by
    hand; optionally a follower of ``leader``."""
    store = store_cls(data_file_size=1 << 20, suspect=None)
    if entries:
        store.persist_term(entry_term if entry_term is not None else term, None)
        store.batch_append_as_leader([b"x"] * entries)
    store.persist_term(term, vote)
    node = Node(DLedgerConfig(self_id="n0", peers=PEERS, group="g").validate(), store, random.Random(1), now_ms=now)
    node.take_ready()
    if leader is not None:
        hb(node, leader, term, now=now)
    return node


def ask(node, msg, now=0):
    node.receive(now, Envelope(msg.local_id, "n0", 99, False, msg))
    out = [m for m in node.take_ready().messages if m.is_response and m.request_id == 99]
    assert len(out) == 1
    return out[0].msg


def hb(node, leader, term, now=0, commit=-1):
    return ask(node, HeartBeatRequest(group="g", local_id=leader, remote_id="n0", leader_id=leader, term=term,
                                      commit_index=commit), now)


def vote(node, candidate="n1", term=5, end_index=-1, end_term=-1, now=10_000, transfer=False):
    return ask(node, VoteRequest(group="g", local_id=candidate, remote_id="n0", leader_id=candidate, term=term,
                                 ledger_end_index=end_index, ledger_end_term=end_term,
                                 leadership_transfer=transfer), now)


# -- vote handling, in DLedger's order of checks --------------------------------------------
def test_vote_for_an_unknown_candidate_is_rejected():
    assert vote(lone(), candidate="n7").vote_result == R.REJECT_UNKNOWN_LEADER


def test_a_remote_request_naming_me_as_candidate_is_rejected():
    assert vote(lone(), candidate="n0").vote_result == R.REJECT_UNEXPECTED_LEADER


def test_log_check_comes_before_the_term_check():
    node = lone(term=5, entries=3, entry_term=4)
    r = vote(node, term=9, end_index=9, end_term=3)
    assert r.vote_result == R.REJECT_EXPIRED_LEDGER_TERM
    assert node.term == 5                      # a stale candidate does not move our term
    assert vote(node, term=9, end_index=1, end_term=4).vote_result == R.REJECT_SMALL_LEDGER_END_INDEX


def test_lower_term_is_rejected_with_my_term():
    r = vote(lone(term=5), term=4)
    assert (r.vote_result, r.term) == (R.REJECT_EXPIRED_VOTE_TERM, 5)


class RecordingStore(DLedgerMemoryStore):
    """A store that writes down, in ``events``, every ``persist_term`` call as it happens."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.events: list[tuple] = []

    def persist_term(self, term, vote_for) -> None:
        self.events.append(("persist_term", term, vote_for))
        super().persist_term(term, vote_for)


def recorded_vote(monkeypatch, *, persist_late=False):
    """n0 answers n1's vote request of its own term; returns (answer, events) where events
    are, in order: the store's ``persist_term`` calls, every vote answer as it is built, and
    the ``take_ready`` that hands the answers out. ``persist_late`` is the mutation the test
    must catch: the vote is written only when the Ready is taken, after the answer."""
    node = lone(term=5, store_cls=RecordingStore)
    events = node.store.events
    events.clear()
    real_response = vote_module.VoteResponse

    def build_response(**kw):
        events.append(("answer", kw["leader_id"], kw["vote_result"]))
        return real_response(**kw)

    monkeypatch.setattr(vote_module, "VoteResponse", build_response)
    late: list = []
    if persist_late:
        monkeypatch.setattr(MemberState, "set_vote_for", lambda member, candidate: late.append((member, candidate)))
    real_take = node.take_ready

    def take_ready():
        for member, candidate in late:
            member.store.persist_term(member.curr_term, candidate)
        late.clear()
        events.append(("take_ready",))
        return real_take()

    node.take_ready = take_ready
    return vote(node, candidate="n1", term=5, now=0), node, events   # before n0 stands itself


def persisted_before_answered(events, candidate="n1") -> bool:
    """The vote for ``candidate`` was written before its ACCEPT was built and handed out."""
    persist = events.index(("persist_term", 5, candidate)) if ("persist_term", 5, candidate) in events else None
    answer = events.index(("answer", candidate, R.ACCEPT))
    ready = events.index(("take_ready",))
    return persist is not None and persist < answer < ready


def test_same_term_vote_is_given_once_and_persisted_before_the_answer(monkeypatch):
    r, node, events = recorded_vote(monkeypatch)
    assert r.vote_result == R.ACCEPT and node.store.vote_for == "n1"
    assert persisted_before_answered(events), events
    assert vote(node, candidate="n1", term=5).vote_result == R.ACCEPT      # same candidate again
    assert vote(node, candidate="n2", term=5).vote_result == R.REJECT_ALREADY_VOTED


def test_the_order_check_catches_a_vote_persisted_after_its_answer(monkeypatch):
    r, node, events = recorded_vote(monkeypatch, persist_late=True)
    assert r.vote_result == R.ACCEPT and node.store.vote_for == "n1"      # the end state looks right
    assert not persisted_before_answered(events), events                  # the order does not


def test_same_term_vote_when_a_leader_is_known_is_already_has_leader():
    node = lone(term=5, leader="n1")
    assert node.role is Role.FOLLOWER
    node.store.persist_term(5, "n1")
    assert vote(node, candidate="n2", term=5, now=0).vote_result == R.REJECT_ALREADY_HAS_LEADER


def test_higher_term_makes_the_voter_catch_up_durably_then_vote():
    node = lone(term=5)
    r = vote(node, term=7)
    assert (r.vote_result, r.term) == (R.REJECT_TERM_NOT_READY, 5)
    assert node.term == 7 and node.store.current_term == 7 and node.role is Role.CANDIDATE
    assert vote(node, term=7).vote_result == R.ACCEPT


def test_term_smaller_than_my_last_entry_term_is_rejected_with_that_term():
    node = lone(term=5, entries=2, entry_term=5)
    node.store.persist_term(6, None)
    r = vote(node, term=6, end_index=5, end_term=6)
    assert r.vote_result == R.ACCEPT
    node2 = lone(term=3, entries=2, entry_term=3)
    node2.store._term = 2   # a store that lost its term (memory store test hook)
    r = vote(node2, term=2, end_index=5, end_term=3)
    assert (r.vote_result, r.term) == (R.REJECT_TERM_SMALL_THAN_LEDGER, 3)


def test_a_follower_with_a_live_leader_refuses_higher_terms_unless_transferring():
    node = lone(term=5, leader="n1", now=10_000)
    r = vote(node, candidate="n2", term=6, now=10_050)
    assert r.vote_result == R.REJECT_ALREADY_HAS_LEADER and node.term == 5
    r = vote(node, candidate="n2", term=6, now=10_060, transfer=True)
    assert r.vote_result == R.REJECT_TERM_NOT_READY and node.term == 6


def test_stickiness_does_not_hold_against_the_leader_itself_asking_in_a_higher_term():
    """A leader that asks for votes in a higher term has stopped leading: the follower joins
    the term and votes in the revote (swarm seed 1601237: replayed pushes of the leader's
    earlier process kept the follower's lease alive, and it refused its own leader for 10 s)."""
    node = lone(term=5, leader="n1", now=10_000)
    r = vote(node, candidate="n1", term=6, now=10_050)
    assert (r.vote_result, r.term) == (R.REJECT_TERM_NOT_READY, 5) and node.term == 6
    assert vote(node, candidate="n1", term=6, now=10_051).vote_result == R.ACCEPT


# -- heartbeats (with the commit index) -----------------------------------------------------
def test_heartbeat_codes():
    node = lone(term=5)
    assert hb(node, "n7", 5).code == Code.UNKNOWN_MEMBER
    assert hb(node, "n0", 5).code == Code.UNEXPECTED_MEMBER
    r = hb(node, "n1", 4)
    assert (r.code, r.term) == (Code.EXPIRED_TERM, 5)
    assert hb(node, "n1", 5).code == Code.SUCCESS and node.role is Role.FOLLOWER and node.leader_id == "n1"
    assert hb(node, "n2", 5).code == Code.INCONSISTENT_LEADER
    r = hb(node, "n1", 6)
    assert r.code == Code.TERM_NOT_READY and node.term == 6 and node.role is Role.CANDIDATE
    assert hb(node, "n1", 6).code == Code.SUCCESS and node.role is Role.FOLLOWER


def test_request_for_another_member_or_group_is_refused():
    node = lone()
    r = ask(node, HeartBeatRequest(group="g", local_id="n1", remote_id="n2", leader_id="n1", term=5))
    assert r.code == Code.UNKNOWN_MEMBER
    r = ask(node, HeartBeatRequest(group="other", local_id="n1", remote_id="n0", leader_id="n1", term=5))
    assert r.code == Code.UNKNOWN_GROUP and node.term == 5


# -- the ParseResult table (DLedger's vote-round outcomes) ---------------------------------------------------------
@pytest.mark.parametrize("counts,expected", [
    (dict(valid=3, accepted=2), ParseResult.PASSED),
    (dict(valid=3, accepted=1, not_ready=1), ParseResult.REVOTE_IMMEDIATELY),
    (dict(valid=1, accepted=1), ParseResult.WAIT_TO_REVOTE),                 # no quorum of answers
    (dict(valid=3, accepted=1, bigger_ledger=2), ParseResult.WAIT_TO_REVOTE),
    (dict(valid=3, accepted=2, already_has_leader=True), ParseResult.WAIT_TO_REVOTE),
    (dict(valid=3, accepted=1, higher_term=9), ParseResult.WAIT_TO_VOTE_NEXT),
    (dict(valid=3, accepted=1), ParseResult.WAIT_TO_VOTE_NEXT),
])
def test_parse_vote_tally(counts, expected):
    t = VoteTally(term=5, **counts)
    assert parse_vote_tally(t, Majority(["n0", "n1", "n2"])) is expected


def test_a_round_that_too_many_voters_refused_for_having_voted_moves_to_the_next_term():
    """Four voters, one down for good, two that voted for it in this term: two answers only, fewer
    than a quorum, yet nobody can win the term any more (seed 20001 held it for ever)."""
    four = Majority(["n0", "n1", "n2", "n3"])
    assert parse_vote_tally(VoteTally(term=5, valid=2, already_voted=2), four) is ParseResult.WAIT_TO_VOTE_NEXT
    assert parse_vote_tally(VoteTally(term=5, valid=2, already_voted=1, accepted=1), four) \
        is ParseResult.WAIT_TO_REVOTE                              # a quorum may still say yes


def _vote_round_terms(suspect, answers, until_ms=1_500):
    """n0 of three, its store ``suspect`` (None: sound), standing alone with the vote answers
    ``answers`` (voter -> VoteResult; the others never answer): the term of each round."""
    from dledger.protocol import VoteResponse
    store = DLedgerMemoryStore(data_file_size=1 << 20, suspect=suspect)
    store.persist_term(5, None)
    node = Node(DLedgerConfig(self_id="n0", peers=PEERS, group="g").validate(), store, random.Random(1), now_ms=0)
    node.take_ready()
    terms = []
    for now in range(0, until_ms, 5):
        node.tick(now)
        for m in node.take_ready().messages:
            if isinstance(m.msg, VoteRequest) and m.dst == "n1":
                terms.append(m.msg.term)
            if isinstance(m.msg, VoteRequest) and m.dst in answers:
                node.receive(now + 1, Envelope(m.dst, "n0", m.request_id, True, VoteResponse(
                    group="g", local_id=m.dst, remote_id="n0", term=m.msg.term, vote_result=answers[m.dst])))
    return terms


def test_a_recovering_candidate_that_can_no_longer_win_its_term_asks_in_the_next():
    """A recovering candidate's own vote counts in no plain round: with n1 having voted for
    another in the term and n2 silent, no round of the term can pass for it, so each goes to
    the next term (seed 1510600 of the swarm with snapshots and membership: kept in its term,
    it never got ahead of the candidates that voted for themselves first). Alone, with no
    answer at all, it keeps its term: n1 and n2 could still both vote for it there, and an
    isolated node must not inflate its term."""
    from dledger.store.suspect import SuspectReason
    recovering = _vote_round_terms(SuspectReason.UNCLEAN_SHUTDOWN, {"n1": R.REJECT_ALREADY_VOTED})
    assert len(recovering) >= 4 and recovering == list(range(5, 5 + len(recovering))), recovering
    alone = _vote_round_terms(SuspectReason.UNCLEAN_SHUTDOWN, {})
    assert len(alone) >= 4 and set(alone) == {5}, alone


def test_duplicated_vote_answers_count_once():
    t = VoteTally(term=5)
    from dledger.protocol import VoteResponse
    for _ in range(3):
        t.add("n1", VoteResponse(vote_result=R.ACCEPT))
    assert t.accepted == 1


# -- elections among wired nodes ---------------------------------------------------------------
def test_single_node_becomes_leader_and_keeps_its_term_after_restart():
    w = Wired(1)
    assert w.run_until(lambda: w.leader() == "n0", 1000)
    term = w.nodes["n0"].term
    w.stop("n0")
    w.start("n0")
    assert w.run_until(lambda: w.leader() == "n0", 1000)
    assert w.nodes["n0"].term == term


@pytest.mark.parametrize("seed", range(5))
def test_three_nodes_elect_exactly_one_leader_quickly(seed):
    w = Wired(3, seed=seed)
    assert w.run_until(lambda: w.leader() is not None, 2000)
    w.run(1000)
    assert len(w.leaders()) == 1
    lead = w.leader()
    assert all(n.leader_id == lead for n in w.nodes.values())


def test_failover_after_the_leader_dies_takes_well_under_a_second():
    w = Wired(3, seed=3)
    assert w.run_until(lambda: w.leader() is not None, 2000)
    old = w.leader()
    w.stop(old)
    t0 = w.now
    assert w.run_until(lambda: w.leader() not in (None, old), 2000)
    assert w.now - t0 < 1000


def test_leader_cut_off_from_a_quorum_steps_down_by_check_quorum():
    w = Wired(3, seed=2)
    assert w.run_until(lambda: w.leader() is not None, 2000)
    old = w.leader()
    old_term = w.nodes[old].term
    w.cut.add(old)
    assert w.run_until(lambda: w.nodes[old].role is Role.CANDIDATE, 1000)
    assert w.nodes[old].term == old_term          # an isolated node does not inflate its term
    assert w.run_until(lambda: any(n.role is Role.LEADER for i, n in w.nodes.items() if i != old), 2000)


def test_isolated_follower_rejoins_without_deposing_the_leader():
    w = Wired(3, seed=4)
    assert w.run_until(lambda: w.leader() is not None, 2000)
    lead = w.leader()
    follower = next(i for i in w.ids if i != lead)
    w.cut.add(follower)
    w.run(5000)
    assert w.nodes[follower].term == w.nodes[lead].term
    w.cut.clear()
    w.run(2000)
    assert w.leader() == lead


def test_role_changes_reach_the_host_once_in_term_order():
    w = Wired(3, seed=5)
    assert w.run_until(lambda: w.leader() is not None, 2000)
    w.stop(w.leader())
    w.run(3000)
    for changes in w.role_changes.values():
        keys = [(c.term, c.role) for c in changes]
        assert all(a != b for a, b in zip(keys, keys[1:]))     # no transition told twice
        assert [c.term for c in changes] == sorted(c.term for c in changes)
        assert changes[0].event is RoleEvent.START and all(c.event is not None for c in changes)
    # the leader that was stopped is not told; the others lost it and say so
    assert any(c.event is RoleEvent.ELECTION_TIMEOUT for cs in w.role_changes.values() for c in cs)


def test_a_transfer_naming_the_leader_as_its_own_transferee_makes_it_stand_and_never_raises():
    """A peer's request that names the leader both as the transferring leader and as the
    transferee takes the leader along its TAKE_LEADERSHIP edge (the role table holds it, so
    that no request raises IllegalTransition)."""
    node = lone(term=5, vote="n0")
    node.force_role(0, "n0")
    node.take_ready()
    assert node.role is Role.LEADER
    node.receive(10, Envelope("n1", "n0", 5, False, LeadershipTransferRequest(
        group="g", local_id="n1", remote_id="n0", leader_id="n0", term=5, transfer_id="n0",
        transferee_id="n0", take_leadership_ledger_index=-1)))
    changes = node.take_ready().role_changes
    assert node.role is Role.CANDIDATE and node.term == 6
    assert changes[0] == RoleChange(6, Role.CANDIDATE, None, RoleEvent.TAKE_LEADERSHIP)


def test_leadership_transfer_moves_the_leader_to_the_target():
    w = Wired(3, seed=6)
    assert w.run_until(lambda: w.leader() is not None, 2000)
    lead = w.leader()
    target = next(i for i in w.ids if i != lead)
    w.nodes[lead].transfer_leadership(w.now, "t", target)
    w._collect(w.nodes[lead])
    assert w.run_until(lambda: "t" in w.completions, 3000)
    assert w.completions["t"].response.code == Code.SUCCESS
    assert w.leader() == target


def test_leadership_transfer_to_a_stranger_is_refused():
    w = Wired(3, seed=6)
    assert w.run_until(lambda: w.leader() is not None, 2000)
    lead = w.leader()
    w.nodes[lead].transfer_leadership(w.now, "t", "n9")
    w._collect(w.nodes[lead])
    assert w.completions["t"].response.code == Code.UNKNOWN_MEMBER


def test_preferred_leader_takes_over():
    w = Wired(3, seed=7, preferred_leader_ids="n2")
    assert w.run_until(lambda: w.leader() == "n2", 5000)
    w.stop("n2")
    assert w.run_until(lambda: w.leader() in ("n0", "n1"), 3000)
    w.start("n2")
    assert w.run_until(lambda: w.leader() == "n2", 5000)


def test_transfer_to_the_leader_itself_is_an_immediate_success():
    w = Wired(3, seed=6)
    assert w.run_until(lambda: w.leader() is not None, 2000)
    lead = w.leader()
    w.nodes[lead].transfer_leadership(w.now, "self", lead)
    w._collect(w.nodes[lead])
    assert w.completions["self"].response.code == Code.SUCCESS and w.leader() == lead


def test_stopping_a_node_answers_every_waiting_operation():
    w = Wired(3, seed=8)
    assert w.run_until(lambda: w.leader() is not None, 2000)
    lead = w.leader()
    w.cut.add(lead)                          # nothing will ever be answered
    node = w.nodes[lead]
    node.propose(w.now, "append", [b"x"])
    node.read(w.now, "read", 2)              # READ_INDEX_READ waits for a heartbeat round
    target = next(i for i in w.ids if i != lead)
    node.transfer_leadership(w.now, "transfer", target)
    w._collect(node)
    node.stop()
    w._collect(node)
    assert {"append", "read", "transfer"} <= set(w.completions)


from hypothesis import given, strategies as st  # noqa: E402

from dledger.core.quorum import is_quorum  # noqa: E402
from dledger.protocol import VoteResponse  # noqa: E402


@given(answers=st.lists(st.tuples(st.sampled_from(["n0", "n1", "n2", "n3", "n4"]),
                                  st.none() | st.sampled_from(list(R))), max_size=8),
       n=st.sampled_from([1, 2, 3, 4, 5]))
def test_a_round_is_decided_exactly_when_dledgers_counts_say_so(answers, n):
    """``VoteTally.decided`` asks the Majority; it agrees with the counts DLedger keeps."""
    voters = [f"n{i}" for i in range(n)]
    t = VoteTally(term=5)
    for voter, result in answers:
        if voter in voters:
            t.add(voter, None if result is None else VoteResponse(vote_result=result, term=5))
    outstanding = n - len(t.responded)
    q = lambda c: is_quorum(c, n)  # noqa: E731
    by_counts = (t.already_has_leader or q(t.accepted) or q(t.accepted + t.not_ready) or outstanding <= 0
                 or not q(t.accepted + t.not_ready + outstanding))
    assert t.decided(Majority(voters)) == by_counts
