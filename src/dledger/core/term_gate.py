"""The term gate: the one place where a term a peer sent is compared with this node's.

Every Raft message from a peer passes here once, as the first step of ``Node.step`` after the
checks of who sent it (etcd-raft's ``Step`` begins the same way). The gate decides what a
term other than this node's means; a request of this node's term goes on to the step
function of the node's role (``core.step``).

Requests (``judge``), with DLedger's own rules named where they differ from plain Raft:

==========================  ===============================  ==================================================
request                     lower term                       higher term
==========================  ===============================  ==================================================
``HeartBeatRequest``        EXPIRED_TERM, with this term     join the term as candidate (durably, no vote),
                                                             answer TERM_NOT_READY: DLedger's leader resends
                                                             at once and the next heartbeat finds a follower
``VoteRequest``             REJECT_EXPIRED_VOTE_TERM         *leader stickiness*: REJECT_ALREADY_HAS_LEADER
                                                             while a leader is heard, unless the candidate
                                                             takes leadership (a transfer) or is that
                                                             leader itself; else fail the reads, join the
                                                             term, answer
                                                             REJECT_TERM_NOT_READY with the term it had
                                                             (DLedger's voter catches up first, votes in the
                                                             candidate's immediate revote)
``PushEntryRequest``        EXPIRED_TERM, with this term     NOT_FOLLOWER: a push moves no term (DLedger
                                                             learns terms from heartbeats and votes)
``LeadershipTransferReq.``  INCONSISTENT_TERM                INCONSISTENT_TERM: a transfer moves no term
``InstallSnapshotRequest``  EXPIRED_TERM, with this term     NOT_FOLLOWER: as a push (it moves a follower's
                                                             log start, ``core.entry_handler``)
==========================  ===============================  ==================================================

A vote request is judged on its candidate and its log before its term (DLedger's voter checks
the log first: ``vote.Voting.admit``), a heartbeat on its leader and on whether this node may
answer a leader at all (``heartbeat.Heartbeats.admit``), a transfer on who it names; those
checks change nothing. The transferee of a transfer judges the term when its log has caught up
(``same``), since the term may still move while it waits. Repair pulls, metadata queries and
clients' requests carry no claim to a term and are not gated.

Answers (``higher_term``): an answer that says this node is behind carries the higher term:
EXPIRED_TERM to a heartbeat, a push or an install, REJECT_EXPIRED_VOTE_TERM or
REJECT_TERM_SMALL_THAN_LEDGER to a vote. The gate names that term; the part whose request it
answers acts on it where DLedger does: a push of this leadership at once, a heartbeat round
while it runs, a vote round when it ends (a round that learnt of a higher term joins it,
``parse_vote_tally``). Other answers carry their own meaning in ``term`` (a voter's old term
with REJECT_TERM_NOT_READY) and claim nothing.

The gate is pure: it returns a ``Verdict`` (the answer, and the intents the node applies
before it builds the answer) and never changes state. ``tests/core/test_core_shape.py`` keeps
every comparison of a term from a peer in this module.
"""

from __future__ import annotations

from enum import Enum
from typing import Any, NamedTuple

from dledger.core.intents import FailReads, JoinTerm
from dledger.core.member_state import RoleEvent
from dledger.protocol import (DLedgerResponseCode as Code, HeartBeatRequest, HeartBeatResponse,
                              InstallSnapshotRequest, InstallSnapshotResponse, LeadershipTransferRequest,
                              PushEntryRequest, PushEntryResponse, VoteRequest, VoteResponse, VoteResult)


class Order(Enum):
    """How a peer's term stands to this node's."""

    LOWER = "lower"
    SAME = "same"
    HIGHER = "higher"


def order(theirs: int, mine: int) -> Order:
    """How the term ``theirs`` stands to ``mine``."""
    if theirs < mine:
        return Order.LOWER
    if theirs > mine:
        return Order.HIGHER
    return Order.SAME


def same(theirs: int, mine: int) -> bool:
    """Whether a term a peer sent is this node's term."""
    return theirs == mine


def below(theirs: int, mine: int) -> bool:
    """Whether a term a peer sent is below ``mine`` (this node's term, or its log's last)."""
    return theirs < mine


class Verdict(NamedTuple):
    """What the gate decided for a request: ``answer`` None lets it through to the step function
    of the node's role; otherwise the request is answered with ``answer`` (a response code, or a
    ``VoteResult`` for a vote) and ``term`` (None: the node's term when the answer is built),
    after the node applied ``intents``."""

    answer: int | None
    term: int | None = None
    intents: tuple = ()


PASS = Verdict(None)

#: the answers a request of a lower term gets (and with which term: None is the node's own)
_LOWER: dict[type, int] = {
    HeartBeatRequest: Code.EXPIRED_TERM,
    VoteRequest: VoteResult.REJECT_EXPIRED_VOTE_TERM,
    PushEntryRequest: Code.EXPIRED_TERM,
    InstallSnapshotRequest: Code.EXPIRED_TERM,
    LeadershipTransferRequest: Code.INCONSISTENT_TERM,
}


def judge(req: Any, mine: int, *, live_leader: bool = False, leader: str | None = None) -> Verdict:
    """The gate for a Raft request of a peer, to a node in term ``mine``. ``live_leader``: this
    node hears a leader (leader stickiness, asked for vote requests only); ``leader``: the
    leader it follows, against whom stickiness does not hold (asking for votes in a higher
    term, it has stopped leading: swarm seed 1601237, where replayed pushes of its earlier
    process kept a follower's lease alive for 10 s)."""
    o = order(req.term, mine)
    if o is Order.SAME:
        return PASS
    kind = type(req)
    if o is Order.LOWER:
        return Verdict(_LOWER[kind], mine if kind is HeartBeatRequest else None)
    why = f"{req.local_id}'s {kind.__name__} in term {req.term}"
    if kind is HeartBeatRequest:
        return Verdict(Code.TERM_NOT_READY, -1, (JoinTerm(req.term, RoleEvent.HIGHER_TERM_SEEN, why),))
    if kind is VoteRequest:
        if not req.leadership_transfer and live_leader and req.leader_id != leader:
            return Verdict(VoteResult.REJECT_ALREADY_HAS_LEADER)
        # as DLedger: catch up first, answer with the term it had
        return Verdict(VoteResult.REJECT_TERM_NOT_READY, mine,
                       (FailReads(Code.NOT_LEADER), JoinTerm(req.term, RoleEvent.HIGHER_TERM_SEEN, why)))
    if kind is PushEntryRequest or kind is InstallSnapshotRequest:
        return Verdict(Code.NOT_FOLLOWER)
    return Verdict(Code.INCONSISTENT_TERM)


#: vote results that say the candidate is behind, carrying the voter's higher term
_VOTE_BEHIND = (VoteResult.REJECT_EXPIRED_VOTE_TERM, VoteResult.REJECT_TERM_SMALL_THAN_LEDGER)


def higher_term(resp: Any, mine: int) -> int | None:
    """The term above ``mine`` that an answer says this node is behind on, or None."""
    kind = type(resp)
    if kind is HeartBeatResponse or kind is PushEntryResponse or kind is InstallSnapshotResponse:
        claims = resp.code == Code.EXPIRED_TERM
    elif kind is VoteResponse:
        claims = resp.vote_result in _VOTE_BEHIND
    else:
        return None
    return resp.term if claims and resp.term > mine else None
