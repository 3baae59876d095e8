"""LeaderElector (SPEC §4): votes, heartbeats, check-quorum, leadership transfer.

DLedger's rules, stepped with ``now_ms`` instead of a thread that polls every 10 ms:
- a candidate asks every peer (and itself) for a vote; the tally is parsed into DLedger's
  ``ParseResult`` (table of SPEC §4.5): a round that reaches no quorum of *valid* answers keeps
  the term (so an isolated node does not inflate its term), a round answered but lost moves to
  the next term after a random delay from the injected ``random.Random``;
- the vote rules of SPEC §4.6, in DLedger's order (log check before term check); a voter
  asked for a higher term first catches up its own term (durably) and answers
  ``REJECT_TERM_NOT_READY``; the candidate then revotes at once (the pre-vote-like variant);
- every vote and term change is made durable through ``store.persist_term`` before the answer
  is built;
- the leader sends heartbeats every ``heart_beat_time_interval_ms``, carrying its commit
  index; it steps down (check-quorum) when no round reached a quorum for
  ``max_heart_beat_leak`` intervals, and when a peer reports a higher term;
- a follower stands for election after ``max_heart_beat_leak`` intervals without heartbeats.

Changes from Java, on purpose (see docs/architecture.md):
- leader stickiness: a follower that heard its leader within the election timeout, a leader
  whose last heartbeat round reached a quorum within it, and a node that started less than
  one election timeout ago refuse higher-term vote requests with
  ``REJECT_ALREADY_HAS_LEADER`` instead of joining the new term. A transferee's requests are
  marked ``leadership_transfer`` and bypass it. This keeps a rejoining node from deposing a
  healthy leader and makes LEASE_READ sound;
- a new leader counts its election as a successful heartbeat round (fixes SPEC §11.6);
- a follower that lost its leader probes at once in its current term, a round that cannot
  pass any more is decided without waiting for the missing answers, and
  REJECT_ALREADY_HAS_LEADER delays the next round by half to one heartbeat interval only
  (DLedger adds the whole election timeout): together with the faster timing this gives failover in
  about half a second instead of DLedger's six-plus;
- "taking leadership" (short vote delays, REJECT_TAKING_LEADERSHIP) applies to any
  transferee, not only to ids listed in ``preferred_leader_ids`` (fixes the §4.7 quirk).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Callable

from dledger.core.member_state import Role
from dledger.errors import DLedgerError
from dledger.protocol import (DLedgerResponseCode as Code, HeartBeatRequest, HeartBeatResponse,
                              LeadershipTransferRequest, LeadershipTransferResponse, VoteRequest,
                              VoteResponse, VoteResult)

log = logging.getLogger(__name__)

Reply = Callable[[Any], None]


class ParseResult(Enum):
    WAIT_TO_REVOTE = 0
    REVOTE_IMMEDIATELY = 1
    PASSED = 2
    WAIT_TO_VOTE_NEXT = 3


@dataclass(slots=True)
class VoteTally:
    """Answers to one vote round (counts as in SPEC §4.5 step 5)."""

    term: int
    peers: int
    responded: set = field(default_factory=set)
    valid: int = 0
    accepted: int = 0
    not_ready: int = 0
    bigger_ledger: int = 0
    already_has_leader: bool = False
    known_max_term: int = -1

    def add(self, voter: str, resp: VoteResponse | None) -> None:
        if voter in self.responded:
            return          # a duplicated answer counts once
        self.responded.add(voter)
        result = VoteResult.UNKNOWN if resp is None else resp.vote_result
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

    def decided(self, is_quorum: Callable[[int], bool]) -> bool:
        outstanding = self.peers - len(self.responded)
        return (self.already_has_leader or is_quorum(self.accepted)
                or is_quorum(self.accepted + self.not_ready) or outstanding <= 0
                # even if every outstanding voter agreed, the round could not pass
                or not is_quorum(self.accepted + self.not_ready + outstanding))


def parse_vote_tally(t: VoteTally, is_quorum: Callable[[int], bool]) -> ParseResult:
    """SPEC §4.5 step 6 as a pure function (first matching rule wins)."""
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


@dataclass(slots=True)
class _HeartbeatRound:
    term: int
    sent_at: int
    peers: int
    responded: set = field(default_factory=set)
    succ: int = 1
    not_ready: int = 0
    max_term: int = -1
    inconsistent_leader: bool = False
    quorum_reached: bool = False
    finished: bool = False


@dataclass(slots=True)
class _ReadWaiter:
    token: Any
    read_index: int
    registered_at: int


class LeaderElector:
    def __init__(self, node) -> None:
        self.node = node
        self.ms = node.ms
        self.cfg = node.config
        self.rng = node.rng
        self.started_ms = node.now_ms
        self.last_leader_heartbeat_ms = node.now_ms
        self.last_send_heartbeat_ms = -1
        self.last_succ_heartbeat_ms = -1
        self.next_time_to_request_vote = node.now_ms + self._vote_delay()
        self.need_increase_term_immediately = False
        self.last_parse_result = ParseResult.WAIT_TO_REVOTE
        self.vote_round: VoteTally | None = None
        self.vote_round_deadline = 0
        self.hb_round: _HeartbeatRound | None = None
        self.take_leadership_task: tuple[Reply | None, int] | None = None
        self.transfer_wait: tuple[LeadershipTransferRequest, Reply | None, int] | None = None
        self.read_waiters: list[_ReadWaiter] = []
        self.contact: dict[str, int] = {}
        self.next_preferred_check_ms = node.now_ms + self.cfg.preferred_leader_check_interval_ms
        #: after a store error (the term file could not be written) wait before retrying
        self.backoff_until = -1

    # =====================================================================================
    # timing
    # =====================================================================================
    @property
    def election_timeout_ms(self) -> int:
        return self.cfg.max_heart_beat_leak * self.cfg.heart_beat_time_interval_ms

    def is_taking_leadership(self) -> bool:
        return self.ms.term_to_take_leadership == self.ms.curr_term and self.ms.term_to_take_leadership >= 0

    def _vote_delay(self) -> int:
        c = self.cfg
        if self.is_taking_leadership():
            lo, hi = c.min_take_leadership_vote_interval_ms, c.max_take_leadership_vote_interval_ms
        else:
            lo, hi = c.min_vote_interval_ms, c.max_vote_interval_ms
        return lo + self.rng.randrange(hi - lo + 1)

    def note_contact(self, peer: str, sent_ms: int) -> None:
        """A request sent at ``sent_ms`` in this leadership was answered SUCCESS by ``peer``.

        Any such answer (heartbeat or push) proves the peer followed this leader at
        ``sent_ms``; once a quorum has, leadership is confirmed as of the quorum's oldest
        such time (check-quorum and the read lease count from there). Under load, pushes
        keep the leader confirmed even when heartbeat answers queue behind them.
        """
        contact = self.contact
        if sent_ms > contact.get(peer, -1):
            contact[peer] = sent_ms
            times = sorted(contact.values(), reverse=True)
            need = self.ms.quorum_size() - 1            # this node counts itself
            if 0 < need <= len(times) and times[need - 1] > self.last_succ_heartbeat_ms:
                self.last_succ_heartbeat_ms = times[need - 1]

    def lease_valid(self, now: int) -> bool:
        return (self.ms.role is Role.LEADER and self.last_succ_heartbeat_ms >= 0
                and now < self.last_succ_heartbeat_ms + int(self.cfg.lease_ratio * self.election_timeout_ms))

    def has_live_leader(self, now: int) -> bool:
        ms = self.ms
        if now - self.started_ms < self.election_timeout_ms:
            return True
        if ms.role is Role.FOLLOWER:
            return ms.leader_id is not None and now - self.last_leader_heartbeat_ms < self.election_timeout_ms
        if ms.role is Role.LEADER:
            return now - self.last_succ_heartbeat_ms < self.election_timeout_ms
        return False

    def next_deadline(self, now: int) -> int | None:
        ms = self.ms
        if not self.cfg.enable_leader_elector:
            return now if self.need_increase_term_immediately else None
        out = []
        if now < self.backoff_until:
            return self.backoff_until
        if self.need_increase_term_immediately and ms.role is Role.CANDIDATE:
            return now
        if ms.role is Role.LEADER:
            out.append(now if self.last_send_heartbeat_ms < 0
                       else self.last_send_heartbeat_ms + self.cfg.heart_beat_time_interval_ms)
            out.append(self.last_succ_heartbeat_ms + self.election_timeout_ms + 1)
            if self.cfg.preferred_leader_ids:
                out.append(self.next_preferred_check_ms)
        elif ms.role is Role.FOLLOWER:
            out.append(self.last_leader_heartbeat_ms + self.election_timeout_ms + 1)
        else:
            out.append(self.vote_round_deadline if self.vote_round is not None
                       else self.next_time_to_request_vote)
        if self.transfer_wait is not None:
            out.append(self.transfer_wait[2])
        return min(out)

    # =====================================================================================
    # the state maintainer (one step)
    # =====================================================================================
    def maintain(self, now: int) -> None:
        if now < self.backoff_until:
            return
        try:
            self._maintain(now)
        except DLedgerError as exc:
            # the term file could not be written: nothing was answered on the unsaved state;
            # try again after a heartbeat interval
            log.error("%s: election step failed: %s; retrying", self.ms.self_id, exc)
            self.backoff_until = now + self.cfg.heart_beat_time_interval_ms

    def _maintain(self, now: int) -> None:
        if self.transfer_wait is not None:
            self._check_transfer_wait(now)
        if not self.cfg.enable_leader_elector:
            # roles are forced, but a node still catches up a higher term it was told about
            if self.need_increase_term_immediately and self.ms.role is Role.CANDIDATE:
                self.ms.next_term()
                self.need_increase_term_immediately = False
            return
        role = self.ms.role
        if role is Role.LEADER:
            self._maintain_as_leader(now)
        elif role is Role.FOLLOWER:
            self._maintain_as_follower(now)
        else:
            self._maintain_as_candidate(now)

    def become_candidate(self, now: int, term: int) -> None:
        """Step down (or stay) as candidate, knowing ``term``; the next vote after a random delay."""
        self.ms.change_to_candidate(term)
        self.vote_round = None
        self.next_time_to_request_vote = now + self._vote_delay()

    # -- leader ---------------------------------------------------------------------------
    def _maintain_as_leader(self, now: int) -> None:
        interval = self.cfg.heart_beat_time_interval_ms
        hb = self.hb_round
        if hb is not None and not hb.finished and now >= hb.sent_at + interval:
            self._finish_heartbeat_round(now, hb)
            if self.ms.role is not Role.LEADER:
                return
        if now - self.last_succ_heartbeat_ms > self.election_timeout_ms:
            self.become_candidate(now, self.ms.curr_term)       # check-quorum
            return
        if self.last_send_heartbeat_ms < 0 or now - self.last_send_heartbeat_ms >= interval:
            self._send_heartbeats(now)
        if self.cfg.preferred_leader_ids and now >= self.next_preferred_check_ms:
            self.next_preferred_check_ms = now + self.cfg.preferred_leader_check_interval_ms
            self._check_preferred_leader(now)

    def _send_heartbeats(self, now: int) -> None:
        ms = self.ms
        self.last_send_heartbeat_ms = now
        rnd = _HeartbeatRound(ms.curr_term, now, len(ms.peer_ids))
        rnd.responded.add(ms.self_id)
        self.hb_round = rnd
        for peer in ms.remote_peer_ids:
            req = HeartBeatRequest(group=ms.group, local_id=ms.self_id, remote_id=peer, leader_id=ms.self_id,
                                   term=rnd.term, commit_index=ms.committed_index)
            self.node.send(peer, req, lambda now_, src, resp, rnd=rnd: self._on_heartbeat_response(now_, src, resp, rnd))
        self._heartbeat_progress(now, rnd)

    def _on_heartbeat_response(self, now: int, peer: str, resp: HeartBeatResponse | None,
                               rnd: _HeartbeatRound) -> None:
        if rnd.finished or peer in rnd.responded or self.ms.role is not Role.LEADER \
                or self.ms.curr_term != rnd.term:
            return
        rnd.responded.add(peer)
        code = Code.NETWORK_ERROR if resp is None else resp.code
        self.ms.peers_live[peer] = code != Code.NETWORK_ERROR
        if code == Code.SUCCESS:
            rnd.succ += 1
        elif code == Code.EXPIRED_TERM:
            rnd.max_term = max(rnd.max_term, resp.term)
        elif code == Code.INCONSISTENT_LEADER:
            rnd.inconsistent_leader = True
        elif code == Code.TERM_NOT_READY:
            rnd.not_ready += 1
        self._heartbeat_progress(now, rnd)
        if len(rnd.responded) >= rnd.peers or rnd.max_term > rnd.term:
            self._finish_heartbeat_round(now, rnd)

    def _heartbeat_progress(self, now: int, rnd: _HeartbeatRound) -> None:
        if not rnd.quorum_reached and self.ms.is_quorum(rnd.succ):
            rnd.quorum_reached = True
            self.last_succ_heartbeat_ms = max(self.last_succ_heartbeat_ms, rnd.sent_at)
            self._complete_reads(now, rnd.sent_at)

    def _finish_heartbeat_round(self, now: int, rnd: _HeartbeatRound) -> None:
        rnd.finished = True
        if not self.cfg.enable_leader_elector:
            return                              # roles are forced: nobody steps down
        if rnd.max_term > rnd.term:
            self._fail_reads(Code.NOT_LEADER)
            self.become_candidate(now, rnd.max_term)
        elif rnd.quorum_reached:
            return
        elif self.ms.is_quorum(rnd.succ + rnd.not_ready):
            self.last_send_heartbeat_ms = -1                      # resend at once
        elif rnd.inconsistent_leader or now - self.last_succ_heartbeat_ms > self.election_timeout_ms:
            self.become_candidate(now, rnd.term)

    # -- follower -------------------------------------------------------------------------
    def _maintain_as_follower(self, now: int) -> None:
        if now - self.last_leader_heartbeat_ms > self.election_timeout_ms:
            self.become_candidate(now, self.ms.curr_term)
            # probe at once in the current term: it moves no term, and the answers tell
            # whether the others lost the leader too (then the next round takes a new term)
            self.next_time_to_request_vote = now

    # -- candidate ------------------------------------------------------------------------
    def _maintain_as_candidate(self, now: int) -> None:
        ms = self.ms
        if self.vote_round is not None:
            if now >= self.vote_round_deadline:
                self._finish_vote_round(now)
            return
        if now < self.next_time_to_request_vote and not self.need_increase_term_immediately:
            return
        if self.last_parse_result is ParseResult.WAIT_TO_VOTE_NEXT or self.need_increase_term_immediately:
            term = ms.next_term()
            self.last_parse_result = ParseResult.WAIT_TO_REVOTE
        else:
            term = ms.curr_term
        if self.need_increase_term_immediately:
            self.need_increase_term_immediately = False
            self.next_time_to_request_vote = now + self._vote_delay()
            return
        tally = VoteTally(term, len(ms.peer_ids))
        self.vote_round = tally
        self.vote_round_deadline = now + self.cfg.heart_beat_time_interval_ms
        transfer = self.is_taking_leadership()
        for peer in ms.peer_ids:
            req = VoteRequest(group=ms.group, local_id=ms.self_id, remote_id=peer, leader_id=ms.self_id,
                              term=term, ledger_end_index=ms.ledger_end_index,
                              ledger_end_term=ms.ledger_end_term, leadership_transfer=transfer)
            if peer == ms.self_id:
                tally.add(peer, self.handle_vote(now, req, self_vote=True))
            else:
                self.node.send(peer, req, lambda now_, src, resp, t=tally: self._on_vote_response(now_, src, resp, t))
        if self.vote_round is tally and tally.decided(ms.is_quorum):
            self._finish_vote_round(now)

    def _on_vote_response(self, now: int, voter: str, resp: VoteResponse | None, tally: VoteTally) -> None:
        if self.vote_round is not tally:
            return
        tally.add(voter, resp)
        if tally.decided(self.ms.is_quorum):
            self._finish_vote_round(now)

    def _finish_vote_round(self, now: int) -> None:
        tally, self.vote_round = self.vote_round, None
        ms = self.ms
        if tally is None or ms.role is not Role.CANDIDATE or ms.curr_term != tally.term:
            return
        result = parse_vote_tally(tally, ms.is_quorum)
        self.last_parse_result = result
        c = self.cfg
        if result is ParseResult.PASSED:
            self._become_leader(now, tally.term)
            return
        if result is ParseResult.REVOTE_IMMEDIATELY:
            self.next_time_to_request_vote = now
            return
        delay = self._vote_delay()
        if tally.known_max_term > tally.term:
            ms.change_to_candidate(tally.known_max_term)
        elif tally.already_has_leader:
            # someone still hears a leader: probe again soon (a same-term round moves nothing)
            half = c.heart_beat_time_interval_ms // 2
            delay = half + self.rng.randrange(half + 1)
        elif ms.is_quorum(tally.valid) and not ms.is_quorum(tally.valid - tally.bigger_ledger):
            delay += c.max_vote_interval_ms
        self.next_time_to_request_vote = now + delay

    def _become_leader(self, now: int, term: int) -> None:
        self.contact = {}
        self.ms.change_to_leader(term)
        self.last_send_heartbeat_ms = -1
        self.last_succ_heartbeat_ms = now
        self.hb_round = None
        self.next_preferred_check_ms = now + self.cfg.preferred_leader_check_interval_ms
        self._send_heartbeats(now)

    # =====================================================================================
    # handlers
    # =====================================================================================
    def handle_vote(self, now: int, req: VoteRequest, self_vote: bool = False) -> VoteResponse:
        ms = self.ms
        candidate = req.leader_id

        def answer(result: VoteResult, term: int | None = None) -> VoteResponse:
            return VoteResponse(group=ms.group, local_id=ms.self_id, remote_id=req.local_id, leader_id=candidate,
                                term=ms.curr_term if term is None else term, vote_result=result)

        if not ms.is_peer_member(candidate):
            return answer(VoteResult.REJECT_UNKNOWN_LEADER)
        if not self_vote and candidate == ms.self_id:
            return answer(VoteResult.REJECT_UNEXPECTED_LEADER)
        if req.ledger_end_term < ms.ledger_end_term:
            return answer(VoteResult.REJECT_EXPIRED_LEDGER_TERM)
        if req.ledger_end_term == ms.ledger_end_term and req.ledger_end_index < ms.ledger_end_index:
            return answer(VoteResult.REJECT_SMALL_LEDGER_END_INDEX)
        if req.term < ms.curr_term:
            return answer(VoteResult.REJECT_EXPIRED_VOTE_TERM)
        if req.term == ms.curr_term:
            vote = ms.curr_vote_for
            if vote is not None and vote != candidate:
                return answer(VoteResult.REJECT_ALREADY_HAS_LEADER if ms.leader_id is not None
                              else VoteResult.REJECT_ALREADY_VOTED)
        else:
            if not self_vote and not req.leadership_transfer and self.has_live_leader(now):
                return answer(VoteResult.REJECT_ALREADY_HAS_LEADER)
            self._fail_reads(Code.NOT_LEADER)
            self.become_candidate(now, req.term)
            self.need_increase_term_immediately = True
            return answer(VoteResult.REJECT_TERM_NOT_READY)
        if req.term < ms.ledger_end_term:
            return answer(VoteResult.REJECT_TERM_SMALL_THAN_LEDGER, ms.ledger_end_term)
        if not self_vote and self.is_taking_leadership() and req.ledger_end_term == ms.ledger_end_term \
                and ms.ledger_end_index >= req.ledger_end_index:
            return answer(VoteResult.REJECT_TAKING_LEADERSHIP)
        try:
            ms.set_vote_for(candidate)          # durable before the answer leaves
        except DLedgerError as exc:
            log.error("%s: cannot persist the vote for %s in term %d: %s", ms.self_id, candidate, req.term, exc)
            resp = answer(VoteResult.UNKNOWN)
            resp.code = exc.code
            return resp
        return answer(VoteResult.ACCEPT)

    def handle_heartbeat(self, now: int, req: HeartBeatRequest) -> HeartBeatResponse:
        ms = self.ms

        def answer(code: int, term: int = -1) -> HeartBeatResponse:
            return HeartBeatResponse(group=ms.group, local_id=ms.self_id, remote_id=req.local_id,
                                     leader_id=ms.leader_id, code=code, term=term)

        if not ms.is_peer_member(req.leader_id):
            return answer(Code.UNKNOWN_MEMBER, ms.curr_term)
        if req.leader_id == ms.self_id:
            return answer(Code.UNEXPECTED_MEMBER, ms.curr_term)
        if req.term < ms.curr_term:
            return answer(Code.EXPIRED_TERM, ms.curr_term)
        if req.term == ms.curr_term:
            if ms.leader_id is None:
                self.vote_round = None
                self.last_parse_result = ParseResult.WAIT_TO_REVOTE
                ms.change_to_follower(req.term, req.leader_id)
            elif ms.leader_id != req.leader_id:
                return answer(Code.INCONSISTENT_LEADER)
            self.last_leader_heartbeat_ms = now
            self.node.handler.commit_hint(req.term, req.commit_index)
            return answer(Code.SUCCESS)
        self.become_candidate(now, req.term)
        self.need_increase_term_immediately = True
        return answer(Code.TERM_NOT_READY)

    # =====================================================================================
    # reads that need the leader to confirm it still leads (READ_INDEX_READ)
    # =====================================================================================
    def register_read(self, now: int, token: Any, read_index: int) -> None:
        self.read_waiters.append(_ReadWaiter(token, read_index, now))
        if len(self.ms.peer_ids) == 1:
            self._complete_reads(now, now)
            return
        hb = self.hb_round
        if hb is None or hb.sent_at < now:
            self.last_send_heartbeat_ms = -1          # confirm leadership with a fresh round

    def _complete_reads(self, now: int, round_sent_at: int) -> None:
        if not self.read_waiters:
            return
        keep = []
        for w in self.read_waiters:
            if w.registered_at <= round_sent_at:
                self.node.complete_read(w.token, Code.SUCCESS, w.read_index)
            else:
                keep.append(w)
        self.read_waiters = keep

    def fail_pending(self, code: int) -> None:
        """Shutting down: answer every read and transfer still waiting."""
        self._fail_reads(code)
        ms = self.ms
        waiting, self.transfer_wait = self.transfer_wait, None
        task, self.take_leadership_task = self.take_leadership_task, None
        for reply in ([waiting[1]] if waiting else []) + ([task[0]] if task else []):
            if reply is not None:
                reply(LeadershipTransferResponse(group=ms.group, local_id=ms.self_id, leader_id=ms.leader_id,
                                                 term=ms.curr_term, code=code))

    def _fail_reads(self, code: int) -> None:
        waiters, self.read_waiters = self.read_waiters, []
        for w in waiters:
            self.node.complete_read(w.token, code, -1)

    # =====================================================================================
    # leadership transfer (SPEC §4.7)
    # =====================================================================================
    def handle_leadership_transfer(self, now: int, req: LeadershipTransferRequest, reply: Reply | None):
        """Returns a response now, or None when ``reply`` will be called later."""
        ms = self.ms

        def answer(code: int) -> LeadershipTransferResponse:
            return LeadershipTransferResponse(group=ms.group, local_id=ms.self_id, remote_id=req.local_id,
                                              leader_id=ms.leader_id, term=ms.curr_term, code=code)

        if req.transferee_id == ms.self_id:
            if req.transfer_id != ms.leader_id:
                return answer(Code.INCONSISTENT_LEADER)
            self.transfer_wait = (req, reply, now + self.cfg.leadership_transfer_wait_timeout)
            self._check_transfer_wait(now)
            return None
        if req.transfer_id != ms.self_id:
            return answer(Code.UNEXPECTED_ARGUMENT)
        transferee = req.transferee_id
        if not ms.is_peer_member(transferee):
            return answer(Code.UNKNOWN_MEMBER)
        if ms.curr_term != req.term:
            return answer(Code.INCONSISTENT_TERM)
        if ms.role is not Role.LEADER:
            return answer(Code.NOT_LEADER)
        lag = ms.ledger_end_index - self.node.pusher.match_index(transferee)
        if lag >= self.cfg.max_leadership_transfer_wait_index:
            return answer(Code.FALL_BEHIND_TOO_MUCH)
        if ms.transferee is not None:
            return answer(Code.LEADER_TRANSFERRING)
        ms.transferee = transferee
        term = ms.curr_term
        fwd = LeadershipTransferRequest(group=ms.group, leader_id=ms.self_id, local_id=ms.self_id,
                                        remote_id=transferee, term=term,
                                        take_leadership_ledger_index=ms.ledger_end_index,
                                        transfer_id=ms.self_id, transferee_id=transferee)

        def on_reply(now_: int, src: str, resp) -> None:
            code = Code.NETWORK_ERROR if resp is None else resp.code
            if code != Code.SUCCESS or (ms.curr_term == term and ms.transferee is not None):
                ms.transferee = None
            if reply is not None:
                reply(answer(code))

        self.node.send(transferee, fwd, on_reply)
        return None

    def _check_transfer_wait(self, now: int) -> None:
        req, reply, deadline = self.transfer_wait
        ms = self.ms

        def done(code: int) -> None:
            self.transfer_wait = None
            if reply is not None:
                reply(LeadershipTransferResponse(group=ms.group, local_id=ms.self_id, remote_id=req.local_id,
                                                 leader_id=ms.leader_id, term=ms.curr_term, code=code))

        if ms.ledger_end_index >= req.take_leadership_ledger_index:
            if ms.curr_term != req.term:
                done(Code.INCONSISTENT_TERM)
                return
            self.transfer_wait = None
            target = req.term + 1
            ms.term_to_take_leadership = target
            self.become_candidate(now, target)
            self.need_increase_term_immediately = True
            self.take_leadership_task = (reply, target)
        elif now >= deadline:
            done(Code.TAKE_LEADERSHIP_FAILED)

    def on_role_change(self, change) -> None:
        """TakeLeadershipTask.check of SPEC §4.7, run on every role change."""
        if change.role is not Role.CANDIDATE:
            self.need_increase_term_immediately = False
        if change.role is not Role.LEADER:
            self.hb_round = None
            if self.read_waiters:
                self._fail_reads(Code.NOT_LEADER)
        task = self.take_leadership_task
        if task is None:
            return
        reply, target = task
        term, role = change.term, change.role
        code = None
        if term > target:
            code = Code.EXPIRED_TERM
        elif term == target:
            if role is Role.LEADER:
                code = Code.SUCCESS
            elif role is Role.FOLLOWER:
                code = Code.TAKE_LEADERSHIP_FAILED
        elif role is Role.FOLLOWER:
            code = Code.TAKE_LEADERSHIP_FAILED
        if code is None:
            return
        self.take_leadership_task = None
        self.ms.term_to_take_leadership = -1
        if reply is not None:
            ms = self.ms
            reply(LeadershipTransferResponse(group=ms.group, local_id=ms.self_id, leader_id=ms.leader_id,
                                             term=ms.curr_term, code=code))

    def _check_preferred_leader(self, now: int) -> None:
        ms = self.ms
        preferred = self.cfg.preferred_leader_id_list()
        if ms.self_id in preferred or ms.transferee is not None:
            return
        best, best_lag = None, None
        for pid in preferred:
            if pid == ms.self_id or not ms.is_peer_member(pid) or not ms.peers_live.get(pid):
                continue
            lag = ms.ledger_end_index - self.node.pusher.match_index(pid)
            if best_lag is None or lag < best_lag:
                best, best_lag = pid, lag
        if best is not None and best_lag < self.cfg.max_leadership_transfer_wait_index:
            req = LeadershipTransferRequest(group=ms.group, local_id=ms.self_id, remote_id=ms.self_id,
                                            term=ms.curr_term, transfer_id=ms.self_id, transferee_id=best)
            self.handle_leadership_transfer(now, req, None)
