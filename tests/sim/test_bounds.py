"""Bounds: terms, indexes, counts and positions near the int64 limits, sent by a peer, are
refused with an error answer before any state changes, and no message a peer can send leaves
the cluster without a leader: terms stay incrementable."""

from __future__ import annotations

from dataclasses import fields

import pytest
from hypothesis import given, settings, strategies as st

from dledger.core import Role
from dledger.protocol import (MAX_TERM, PEER_TERM_BOUND, DLedgerResponseCode as Code, Envelope, HeartBeatRequest,
                              LeadershipTransferRequest, PushEntryRequest, PushEntryType, VoteRequest, VoteResponse,
                              VoteResult, HeartBeatResponse, PushEntryResponse)
from core.wiring import Wired

INT64_MAX = (1 << 63) - 1
EXTREMES = [-(1 << 63), -2, -1, 0, 1, 2, 1 << 31, PEER_TERM_BOUND - 1, PEER_TERM_BOUND, PEER_TERM_BOUND + 1,
            MAX_TERM, MAX_TERM + 1, INT64_MAX - 1, INT64_MAX]
REQUESTS = [VoteRequest, HeartBeatRequest, PushEntryRequest, LeadershipTransferRequest]


def _elected(seed: int = 1) -> Wired:
    w = Wired(3, seed=seed)
    assert w.run_until(lambda: w.leader() is not None, 3000)
    return w


def _send(w: Wired, src: str, dst: str, msg, rid: int = 99_000) -> list:
    node = w.nodes[dst]
    node.receive(w.now, Envelope(src, dst, rid, False, msg))
    ready = node.take_ready()
    answers = [m.msg for m in ready.messages if m.is_response and m.request_id == rid]
    w.queue.extend(m for m in ready.messages if not (m.is_response and m.request_id == rid))
    for c in ready.completions:
        w.completions[c.token] = c
    w.role_changes[dst].extend(ready.role_changes)
    return answers


def _current_leader(w: Wired) -> str | None:
    """The leader of the highest term any node is in, if there is one."""
    top = max(n.term for n in w.nodes.values())
    leaders = [i for i, n in w.nodes.items() if n.role is Role.LEADER and n.term == top]
    return leaders[0] if len(leaders) == 1 else None


def _leader_elected_and_append_commits(w: Wired, token) -> None:
    """Within 20 s of virtual time, a leader of the highest term commits an append."""
    for attempt in range(40):
        if w.run_until(lambda: _current_leader(w) is not None, 500):
            tok = (token, attempt)
            w.propose(_current_leader(w), tok, [b"after"])
            w.run_until(lambda: tok in w.completions, 500)
            if tok in w.completions and w.completions[tok].response.code == Code.SUCCESS:
                return
    raise AssertionError({i: (n.role, n.term) for i, n in w.nodes.items()})


@pytest.mark.parametrize("term", [PEER_TERM_BOUND + 1, MAX_TERM, MAX_TERM + 1, INT64_MAX, INT64_MAX - 1])
@pytest.mark.parametrize("cls", [VoteRequest, HeartBeatRequest])
def test_vote_or_heartbeat_with_a_term_past_the_bound_is_refused_without_a_term_change(cls, term):
    w = _elected()
    lead = w.leader()
    follower = next(i for i in w.ids if i != lead)
    before = w.nodes[follower].term
    msg = cls(group="g", local_id=lead, remote_id=follower, leader_id=lead, term=term)
    answers = _send(w, lead, follower, msg)
    assert w.nodes[follower].term == before
    assert len(answers) == 1 and answers[0].code == Code.UNEXPECTED_ARGUMENT
    _leader_elected_and_append_commits(w, "t")


@pytest.mark.parametrize("term", [PEER_TERM_BOUND - 1, PEER_TERM_BOUND])
def test_a_cluster_moved_to_the_largest_accepted_term_still_elects_and_commits(term):
    w = _elected()
    lead = w.leader()
    for node_id in w.ids:
        if node_id != lead:
            _send(w, lead, node_id, VoteRequest(group="g", local_id=lead, remote_id=node_id, leader_id=lead,
                                                term=term, ledger_end_index=-1, ledger_end_term=-1,
                                                leadership_transfer=True))
    _leader_elected_and_append_commits(w, "t")
    assert all(n.term >= term for n in w.nodes.values())


@pytest.mark.parametrize("make", [
    lambda t: VoteResponse(group="g", code=200, term=t, vote_result=VoteResult.REJECT_EXPIRED_VOTE_TERM),
    lambda t: HeartBeatResponse(group="g", code=Code.EXPIRED_TERM, term=t),
    lambda t: PushEntryResponse(group="g", code=Code.EXPIRED_TERM, term=t, type=PushEntryType.APPEND),
])
def test_responses_with_a_term_past_the_bound_are_ignored(make):
    w = Wired(3, seed=2)

    def poison(env):
        if env.is_response and env.msg.term >= 0:
            msg = make(INT64_MAX)
            msg.local_id, msg.remote_id = env.msg.local_id, env.msg.remote_id
            if type(msg) is type(env.msg):
                env.msg = msg
        return False

    w.drop = poison
    w.run(2000)
    assert all(n.term <= PEER_TERM_BOUND for n in w.nodes.values())
    w.drop = None
    _leader_elected_and_append_commits(w, "t")


def _int_fields(cls):
    return [f.name for f in fields(cls) if f.type == "int" and f.name not in ("code", "type", "vote_result")]


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_extreme_values_in_any_field_never_stop_the_cluster(data):
    w = _elected(seed=data.draw(st.integers(1, 5), label="seed"))
    lead = w.leader()
    for k in range(data.draw(st.integers(1, 3), label="messages")):
        cls = data.draw(st.sampled_from(REQUESTS), label="type")
        src = data.draw(st.sampled_from(w.ids), label="src")
        dst = data.draw(st.sampled_from([i for i in w.ids if i != src]), label="dst")
        kw = dict(group="g", local_id=src, remote_id=dst, leader_id=data.draw(st.sampled_from([src, lead]), "leader"))
        for name in _int_fields(cls):
            kw[name] = data.draw(st.sampled_from(EXTREMES) | st.integers(-3, 5), label=name)
        if cls is PushEntryRequest:
            kw["type"] = data.draw(st.sampled_from(list(PushEntryType)), label="push type")
        if cls is LeadershipTransferRequest:
            kw["transfer_id"] = src
            kw["transferee_id"] = data.draw(st.sampled_from(w.ids), label="transferee")
        if cls is VoteRequest:
            kw["leadership_transfer"] = data.draw(st.booleans(), label="transfer")
        answers = _send(w, src, dst, cls(**kw), rid=90_000 + k)
        assert all(w.nodes[i].term <= PEER_TERM_BOUND + 1 for i in w.ids)
        assert len(answers) <= 1
        w.deliver()
    _leader_elected_and_append_commits(w, "after")
