"""Votes: the candidate's rounds and the voter's rules (DLedger's LeaderElector, vote part).

The candidate:
- asks every peer (and itself) for a vote; the answers are tallied in a ``VoteTally`` and
  parsed into DLedger's ``ParseResult`` (``parse_vote_tally``, a pure function with a table
  test): a round that reaches no quorum of *valid* answers keeps the term (so an isolated
  node does not inflate its term), a round answered but lost moves to the next term after a
  random delay from the injected ``random.Random``, ``REJECT_TERM_NOT_READY`` answers lead
  to an immediate revote; a node that learnt of a higher term (it was deposed by an answer
  carrying it) asks in that term, not again in its old one;
- a round that cannot pass any more, or has passed, is decided at once without waiting for
  the missing answers (``Majority.vote_result``); ``REJECT_ALREADY_HAS_LEADER`` delays the
  next round by half to one heartbeat interval only;
- "taking leadership" (a transferee) uses the short vote delays.

The voter applies DLedger's rules in DLedger's order (log check before term check). A voter
asked for a higher term first catches up its own term, durably, and answers
``REJECT_TERM_NOT_READY``; leader stickiness (``has_live_leader``) refuses higher terms while
it hears a leader, unless the request comes from a transferee. Every vote is made durable
through ``store.persist_term`` (``MemberState.set_vote_for``) before the answer is built.

Seams: member state, config, rng, ``send``, and callables ``become_leader(now, term)``,
``has_live_leader(now)`` and ``fail_reads(code)``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from dledger.core.member_state import MemberState, Role
from dledger.core.quorum import Majority, VoteOutcome
from dledger.errors import DLedgerError
from dledger.protocol import DLedgerResponseCode as Code, VoteRequest, VoteResponse, VoteResult

log = logging.getLogger(__name__)


class ParseResult(Enum):
    WAIT_TO_REVOTE = 0
    REVOTE_IMMEDIATELY = 1
    PASSED = 2
    WAIT_TO_VOTE_NEXT = 3


#: answers that let a round go on: a vote, or a voter that first has to catch up its term
_FAVOURABLE = (VoteResult.ACCEPT, VoteResult.REJECT_TERM_NOT_READY)


@dataclass(slots=True)
class VoteTally:
    """Answers to one vote round, counted as DLedger counts them."""

    term: int
    #: voter -> whether its answer lets the round go on (ACCEPT or REJECT_TERM_NOT_READY)
    responded: dict[str, bool] = field(default_factory=dict)
    valid: int = 0
    accepted: int = 0
    not_ready: int = 0
    bigger_ledger: int = 0
    already_has_leader: bool = False
    known_max_term: int = -1

    def add(self, voter: str, resp: VoteResponse | None) -> None:
        if voter in self.responded:
            return          # a duplicated answer counts once
        result = VoteResult.UNKNOWN if resp is None else resp.vote_result
        self.responded[voter] = result in _FAVOURABLE
        if result != VoteResult.UNKNOWN:
            self.valid += 1
        if result == VoteResult.ACCEPT:
            self.accepted += 1
        elif result == VoteResult.REJECT_TERM_NOT_READY:
            self.not_ready += 1
        elif result in (VoteResult.REJECT_EXPIRED_LEDGER_TERM, VoteResult.REJECT_SMALL_LEDGER_END_INDEX):
            self.bigger_ledger += 1
        elif result == VoteResult.REJECT_ALREADY_HAS_LEADER:
            self.already_has_leader = True
        elif result in (VoteResult.REJECT_EXPIRED_VOTE_TERM, VoteResult.REJECT_TERM_SMALL_THAN_LEDGER):
            self.known_max_term = max(self.known_max_term, self.term, resp.term)

    def decided(self, majority: Majority) -> bool:
        """Someone still hears a leader, or the round has passed, or it could not pass even
        if every voter still missing agreed."""
        return self.already_has_leader or majority.vote_result(self.responded) is not VoteOutcome.PENDING


def parse_vote_tally(t: VoteTally, majority: Majority) -> ParseResult:
    """DLedger's parse of a finished round as a pure function (first matching rule wins)."""
    is_quorum = majority.is_quorum
    if t.known_max_term > t.term:
        return ParseResult.WAIT_TO_VOTE_NEXT
    if t.already_has_leader:
        return ParseResult.WAIT_TO_REVOTE
    if not is_quorum(t.valid):
        return ParseResult.WAIT_TO_REVOTE
    if not is_quorum(t.valid - t.bigger_ledger):
        return ParseResult.WAIT_TO_REVOTE
    if is_quorum(t.accepted):
        return ParseResult.PASSED
    if is_quorum(t.accepted + t.not_ready):
        return ParseResult.REVOTE_IMMEDIATELY
    return ParseResult.WAIT_TO_VOTE_NEXT


class Voting:
    """The candidate's vote rounds and the voter's answers."""

    def __init__(self, member_state: MemberState, config, rng, *, now_ms: int,
                 send: Callable[[str, Any, Callable], int], become_leader: Callable[[int, int], None],
                 has_live_leader: Callable[[int], bool], fail_reads: Callable[[int], None]) -> None:
        self.member_state = member_state
        self.cfg = config
        self.rng = rng                          # the injected random.Random
        self._send = send
        self._become_leader = become_leader
        self._has_live_leader = has_live_leader
        self._fail_reads = fail_reads
        self.next_time_to_request_vote = now_ms + self.vote_delay()
        #: the next round takes a new term at once (this node learnt of a higher term)
        self.need_increase_term_immediately = False
        self.last_parse_result = ParseResult.WAIT_TO_REVOTE
        self.round: VoteTally | None = None
        self.round_deadline = 0

    # -- timing ----------------------------------------------------------------------------
    def vote_delay(self) -> int:
        """A random delay before the next round (one draw from the injected rng)."""
        c = self.cfg
        if self.member_state.is_taking_leadership():
            lo, hi = c.min_take_leadership_vote_interval_ms, c.max_take_leadership_vote_interval_ms
        else:
            lo, hi = c.min_vote_interval_ms, c.max_vote_interval_ms
        return lo + self.rng.randrange(hi - lo + 1)

    def deadline(self) -> int:
        return self.round_deadline if self.round is not None else self.next_time_to_request_vote

    # -- becoming a candidate, leaving candidacy --------------------------------------------
    def become_candidate(self, now: int, term: int) -> None:
        """Step down (or stay) as candidate, knowing ``term``; the next vote after a random delay."""
        self.member_state.change_to_candidate(term)
        self.round = None
        self.next_time_to_request_vote = now + self.vote_delay()

    def catch_up_term(self, now: int, term: int) -> None:
        """A higher ``term`` was seen: become its candidate; the term is taken at once."""
        self.become_candidate(now, term)
        self.need_increase_term_immediately = True

    def probe_now(self, now: int) -> None:
        """Start the next round at once (in the current term: it moves no term)."""
        self.next_time_to_request_vote = now

    def follow(self, term: int, leader_id: str) -> None:
        """A leader of this term spoke: stop any round and follow it."""
        self.round = None
        self.last_parse_result = ParseResult.WAIT_TO_REVOTE
        self.member_state.change_to_follower(term, leader_id)

    def on_role_change(self, change) -> None:
        if change.role is not Role.CANDIDATE:
            self.need_increase_term_immediately = False

    # -- the candidate ----------------------------------------------------------------------
    def maintain_forced(self) -> None:
        """Roles are forced (elector disabled), but a node still catches up a higher term it
        was told about."""
        if self.need_increase_term_immediately and self.member_state.role is Role.CANDIDATE:
            self.member_state.next_term()
            self.need_increase_term_immediately = False

    def maintain(self, now: int) -> None:
        member = self.member_state
        if self.round is not None:
            if now >= self.round_deadline:
                self._finish_round(now)
            return
        if now < self.next_time_to_request_vote and not self.need_increase_term_immediately:
            return
        if self.last_parse_result is ParseResult.WAIT_TO_VOTE_NEXT or self.need_increase_term_immediately \
                or member.known_max_term_in_group > member.curr_term:
            # a node that learnt of a higher term (a follower's answer deposed it) never asks
            # again in its old one: a leader of that term is deposed by the same answer again
            term = member.next_term()
            self.last_parse_result = ParseResult.WAIT_TO_REVOTE
        else:
            term = member.curr_term
        if self.need_increase_term_immediately:
            self.need_increase_term_immediately = False
            self.next_time_to_request_vote = now + self.vote_delay()
            return
        tally = VoteTally(term)
        self.round = tally
        self.round_deadline = now + self.cfg.heart_beat_time_interval_ms
        transfer = member.is_taking_leadership()
        for peer in member.peer_ids:
            req = VoteRequest(group=member.group, local_id=member.self_id, remote_id=peer, leader_id=member.self_id,
                              term=term, ledger_end_index=member.ledger_end_index,
                              ledger_end_term=member.ledger_end_term, leadership_transfer=transfer)
            if peer == member.self_id:
                tally.add(peer, self.handle_vote(now, req, self_vote=True))
            else:
                self._send(peer, req, lambda now_, src, resp, t=tally: self._on_response(now_, src, resp, t))
        if self.round is tally and tally.decided(member.majority):
            self._finish_round(now)

    def _on_response(self, now: int, voter: str, resp: VoteResponse | None, tally: VoteTally) -> None:
        if self.round is not tally:
            return
        tally.add(voter, resp)
        if tally.decided(self.member_state.majority):
            self._finish_round(now)

    def _finish_round(self, now: int) -> None:
        tally, self.round = self.round, None
        member = self.member_state
        if tally is None or member.role is not Role.CANDIDATE or member.curr_term != tally.term:
            return
        majority = member.majority
        result = parse_vote_tally(tally, majority)
        self.last_parse_result = result
        c = self.cfg
        if result is ParseResult.PASSED:
            self._become_leader(now, tally.term)
            return
        if result is ParseResult.REVOTE_IMMEDIATELY:
            self.next_time_to_request_vote = now
            return
        delay = self.vote_delay()
        if tally.known_max_term > tally.term:
            member.change_to_candidate(tally.known_max_term)
        elif tally.already_has_leader:
            # someone still hears a leader: probe again soon (a same-term round moves nothing)
            half = c.heart_beat_time_interval_ms // 2
            delay = half + self.rng.randrange(half + 1)
        elif majority.is_quorum(tally.valid) and not majority.is_quorum(tally.valid - tally.bigger_ledger):
            delay += c.max_vote_interval_ms
        self.next_time_to_request_vote = now + delay

    # -- the voter --------------------------------------------------------------------------
    def handle_vote(self, now: int, req: VoteRequest, self_vote: bool = False) -> VoteResponse:
        member = self.member_state
        candidate = req.leader_id

        def answer(result: VoteResult, term: int | None = None) -> VoteResponse:
            return VoteResponse(group=member.group, local_id=member.self_id, remote_id=req.local_id,
                                leader_id=candidate, term=member.curr_term if term is None else term,
                                vote_result=result)

        if not member.is_peer_member(candidate):
            return answer(VoteResult.REJECT_UNKNOWN_LEADER)
        if not self_vote and candidate == member.self_id:
            return answer(VoteResult.REJECT_UNEXPECTED_LEADER)
        if req.ledger_end_term < member.ledger_end_term:
            return answer(VoteResult.REJECT_EXPIRED_LEDGER_TERM)
        if req.ledger_end_term == member.ledger_end_term and req.ledger_end_index < member.ledger_end_index:
            return answer(VoteResult.REJECT_SMALL_LEDGER_END_INDEX)
        if req.term < member.curr_term:
            return answer(VoteResult.REJECT_EXPIRED_VOTE_TERM)
        if req.term == member.curr_term:
            vote = member.curr_vote_for
            if vote is not None and vote != candidate:
                return answer(VoteResult.REJECT_ALREADY_HAS_LEADER if member.leader_id is not None
                              else VoteResult.REJECT_ALREADY_VOTED)
        else:
            if not self_vote and not req.leadership_transfer and self._has_live_leader(now):
                return answer(VoteResult.REJECT_ALREADY_HAS_LEADER)
            self._fail_reads(Code.NOT_LEADER)
            self.catch_up_term(now, req.term)
            return answer(VoteResult.REJECT_TERM_NOT_READY)
        if req.term < member.ledger_end_term:
            return answer(VoteResult.REJECT_TERM_SMALL_THAN_LEDGER, member.ledger_end_term)
        if not self_vote and member.is_taking_leadership() and req.ledger_end_term == member.ledger_end_term \
                and member.ledger_end_index >= req.ledger_end_index:
            return answer(VoteResult.REJECT_TAKING_LEADERSHIP)
        try:
            member.set_vote_for(candidate)          # durable before the answer is built
        except DLedgerError as exc:
            log.error("%s: cannot persist the vote for %s in term %d: %s", member.self_id, candidate, req.term, exc)
            resp = answer(VoteResult.UNKNOWN)
            resp.code = exc.code
            return resp
        return answer(VoteResult.ACCEPT)
