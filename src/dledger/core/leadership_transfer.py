"""LeadershipTransfer: handing leadership to a chosen member, and the preferred leader.

The old leader (asked by a client, or by itself for a preferred leader):
- refuses when the transferee is unknown (``admit``), when the request names another term
  (the term gate, ``core.term_gate``), when this node does not lead (the node's step
  functions), when the transferee is ``max_leadership_transfer_wait_index`` or more
  entries behind, and when a transfer is already running; otherwise marks ``transferee``
  (new appends fail with LEADER_TRANSFERRING) and forwards the request to the transferee,
  answering the client with the transferee's answer.

The transferee:
- waits (up to ``leadership_transfer_wait_timeout``) until its log reaches the index the old
  leader named (``wait_to_take``), then, if its term is still the one the request named,
  becomes a candidate of the next term at once, "taking leadership": short
  vote delays, its requests marked ``leadership_transfer`` (they pass leader stickiness), and
  other candidates with no longer a log refused with REJECT_TAKING_LEADERSHIP. Unlike Java
  DLedger, this applies to any transferee, not only to ids listed as preferred;
- answers the old leader when the take-over is decided, on a role change (DLedger's
  TakeLeadershipTask): SUCCESS as leader of the target term, TAKE_LEADERSHIP_FAILED as a
  follower, EXPIRED_TERM past it.

A leader with ``preferred_leader_ids`` checks every ``preferred_leader_check_interval_ms``
whether a live preferred member is close enough behind, and transfers to the closest. A leader
whose state machine waits for a snapshot (only a leader sends one) hands leadership to the
member furthest ahead that does not wait for one too (``hand_over``), as often.

State: member state and config. Who asked is a token (a host's, or one standing for a peer's
request, which the node answers over the network). The decisions are intents
(``core.intents``) returned to the node: the forwarded request (``Send``, its answer handed
back to ``on_answer``), answers (``Complete``), and ``TakeLeadership(target, token)`` (the
elector joins the target term, ``TAKE_LEADERSHIP``, and keeps the task). The pusher's water
marks come in as arguments (``start``, ``check_preferred``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, NamedTuple

from dledger.core import term_gate
from dledger.core.intents import NONE, Complete, Send, TakeLeadership
from dledger.core.member_state import MemberState, Role
from dledger.protocol import DLedgerResponseCode as Code, LeadershipTransferRequest, LeadershipTransferResponse

log = logging.getLogger(__name__)


class TransferWait(NamedTuple):
    """The transferee waits until its log reaches ``req.take_leadership_ledger_index``; ``token``
    (None: nobody) is answered."""

    req: LeadershipTransferRequest
    token: Any
    deadline: int


class TakeLeadershipTask(NamedTuple):
    """The transferee stands in ``target_term``; ``token`` (the old leader's request) is
    answered when the take-over is decided."""

    token: Any
    target_term: int


class _Forward(NamedTuple):
    """The old leader forwarded ``req`` to the transferee in ``term``; ``token`` is answered."""

    req: LeadershipTransferRequest
    token: Any
    term: int


class LeadershipTransfer:
    def __init__(self, member_state: MemberState, config, *, now_ms: int) -> None:
        self.member_state = member_state
        self.cfg = config
        self.take_leadership_task: TakeLeadershipTask | None = None
        self.transfer_wait: TransferWait | None = None
        self.next_preferred_check_ms = now_ms + config.preferred_leader_check_interval_ms
        #: when a leader that cannot apply next tries to hand leadership over (``hand_over``)
        self.next_hand_over_ms = now_ms

    # -- the old leader -----------------------------------------------------------------------
    def answer(self, req: LeadershipTransferRequest, code: int) -> LeadershipTransferResponse:
        member = self.member_state
        return LeadershipTransferResponse(group=member.group, local_id=member.self_id, remote_id=req.local_id,
                                          leader_id=member.leader_id, term=member.curr_term, code=code)

    def admit(self, req: LeadershipTransferRequest) -> LeadershipTransferResponse | None:
        """A transfer to another member is judged on who it names before its term
        (``core.term_gate``): the answer when that refuses it, else None."""
        member = self.member_state
        if req.transfer_id != member.self_id:
            return self.answer(req, Code.UNEXPECTED_ARGUMENT)
        if not member.is_voter(req.transferee_id):
            return self.answer(req, Code.UNKNOWN_MEMBER)        # (a learner cannot lead)
        return None

    def start(self, now: int, req: LeadershipTransferRequest, token: Any, match: int):
        """This leader, asked in its term to hand leadership to ``req.transferee_id`` (whose
        water mark is ``match``): refuses, or marks the transferee and forwards the request to
        it. Returns the response now (None: ``token`` is answered later) and the intents."""
        member = self.member_state
        transferee = req.transferee_id
        lag = member.ledger_end_index - match
        me = member.self_id
        if lag >= self.cfg.max_leadership_transfer_wait_index:
            log.info("%s: leadership transfer to %s refused: it is %d entries behind (at most %d)", me, transferee,
                     lag, self.cfg.max_leadership_transfer_wait_index - 1)
            return self.answer(req, Code.FALL_BEHIND_TOO_MUCH), NONE
        if member.transferee is not None:
            log.info("%s: leadership transfer to %s refused: a transfer to %s is running", me, transferee,
                     member.transferee)
            return self.answer(req, Code.LEADER_TRANSFERRING), NONE
        log.info("%s: leadership transfer to %s started in term %d: it takes over once its log reaches index %d "
                 "(%d entries behind); appends are refused meanwhile", me, transferee, member.curr_term,
                 member.ledger_end_index, max(lag, 0))
        member.transferee = transferee
        member.fence_lease()
        term = member.curr_term
        fwd = LeadershipTransferRequest(group=member.group, leader_id=member.self_id, local_id=member.self_id,
                                        remote_id=transferee, term=term,
                                        take_leadership_ledger_index=member.ledger_end_index,
                                        transfer_id=member.self_id, transferee_id=transferee)
        return None, (Send(transferee, fwd, _Forward(req, token, term)),)

    def on_answer(self, resp: LeadershipTransferResponse | None, fwd: _Forward) -> tuple:
        """The transferee's answer to the forwarded request (None: unanswered): the asker gets
        it."""
        member = self.member_state
        code = Code.NETWORK_ERROR if resp is None else resp.code
        if code == Code.SUCCESS:
            log.info("%s: leadership transfer to %s done: it leads term %d", member.self_id, fwd.req.transferee_id,
                     resp.term)
        else:
            log.info("%s: leadership transfer to %s failed: %s", member.self_id, fwd.req.transferee_id,
                     "no answer" if resp is None else Code.of(code).name)
        if code != Code.SUCCESS or (member.curr_term == fwd.term and member.transferee is not None):
            member.transferee = None
        if fwd.token is None:
            return NONE
        return (Complete(fwd.token, self.answer(fwd.req, code)),)

    def leading(self, now: int) -> None:
        """Just elected: the first preferred-leader check is one interval away."""
        self.next_preferred_check_ms = now + self.cfg.preferred_leader_check_interval_ms

    def preferred_check_due(self, now: int) -> bool:
        return bool(self.cfg.preferred_leader_ids) and now >= self.next_preferred_check_ms

    def check_preferred(self, now: int, water_marks: Mapping[str, int]) -> tuple:
        """The leader's periodic check (when due): transfer to the closest live preferred
        member, if close enough. ``water_marks``: every member's, as the pusher knows them."""
        self.next_preferred_check_ms = now + self.cfg.preferred_leader_check_interval_ms
        member = self.member_state
        preferred = self.cfg.preferred_leader_id_list()
        if member.self_id in preferred or member.transferee is not None:
            return NONE
        best, best_lag = None, None
        for pid in preferred:
            if pid == member.self_id or not member.is_voter(pid) or not member.peers_live.get(pid):
                continue
            lag = member.ledger_end_index - water_marks[pid]
            if best_lag is None or lag < best_lag:
                best, best_lag = pid, lag
        if best is not None and best_lag < self.cfg.max_leadership_transfer_wait_index:
            log.info("%s: %s is a preferred leader and %d entries behind: transferring leadership to it",
                     member.self_id, best, best_lag)
            req = LeadershipTransferRequest(group=member.group, local_id=member.self_id, remote_id=member.self_id,
                                            term=member.curr_term, transfer_id=member.self_id, transferee_id=best)
            return self.start(now, req, None, water_marks[best])[1]
        return NONE

    def hand_over(self, now: int, water_marks: Mapping[str, int], exclude) -> tuple:
        """This leader cannot apply what it commits (its state machine waits for a snapshot,
        which only a leader sends): transfer to the live member furthest ahead, not in
        ``exclude`` (members that wait for a snapshot too), when close enough. Tried once per
        ``preferred_leader_check_interval_ms``."""
        if now < self.next_hand_over_ms:
            return NONE
        self.next_hand_over_ms = now + self.cfg.preferred_leader_check_interval_ms
        member = self.member_state
        if member.transferee is not None:
            return NONE
        best = max((p for p in member.remote_peer_ids if member.peers_live.get(p) and p not in exclude
                    and member.is_voter(p)),
                   key=lambda p: water_marks.get(p, -1), default=None)
        if best is None:
            return NONE
        lag = member.ledger_end_index - water_marks.get(best, -1)
        if lag >= self.cfg.max_leadership_transfer_wait_index:
            return NONE
        log.warning("%s: this leader's state machine waits for a snapshot, which only a leader sends: handing "
                    "leadership to %s (%d entries behind)", member.self_id, best, lag)
        req = LeadershipTransferRequest(group=member.group, local_id=member.self_id, remote_id=member.self_id,
                                        term=member.curr_term, transfer_id=member.self_id, transferee_id=best)
        return self.start(now, req, None, water_marks.get(best, -1))[1]

    # -- the transferee -----------------------------------------------------------------------
    def wait_to_take(self, now: int, req: LeadershipTransferRequest, token: Any):
        """This node is the transferee ``req`` names: it waits until its log reaches the index
        the old leader named (its term is judged then: it may still move meanwhile). Returns the
        response now (None: ``token`` is answered later) and the intents."""
        member = self.member_state
        if req.transfer_id != member.leader_id:
            log.info("%s: asked by %s to take leadership, which it does not follow (its leader: %s): refused",
                     member.self_id, req.transfer_id, member.leader_id)
            return self.answer(req, Code.INCONSISTENT_LEADER), NONE
        log.info("%s: asked by %s to take leadership in term %d: waiting for its log to reach index %d (at %d)",
                 member.self_id, req.transfer_id, req.term + 1, req.take_leadership_ledger_index,
                 member.ledger_end_index)
        self.transfer_wait = TransferWait(req, token, now + self.cfg.leadership_transfer_wait_timeout)
        return None, self.maintain(now)

    def maintain(self, now: int) -> tuple:
        """The transferee's wait: take leadership once caught up (``TakeLeadership``), or give
        up at the deadline."""
        if self.transfer_wait is None:
            return NONE
        req, token, deadline = self.transfer_wait
        member = self.member_state

        def done(code: int) -> tuple:
            self.transfer_wait = None
            if token is None:
                return NONE
            return (Complete(token, LeadershipTransferResponse(
                group=member.group, local_id=member.self_id, remote_id=req.local_id, leader_id=member.leader_id,
                term=member.curr_term, code=code)),)

        if member.ledger_end_index >= req.take_leadership_ledger_index:
            if not term_gate.same(req.term, member.curr_term):
                log.info("%s: taking leadership from %s failed: the term moved to %d", member.self_id,
                         req.transfer_id, member.curr_term)
                return done(Code.INCONSISTENT_TERM)
            self.transfer_wait = None
            target = req.term + 1
            log.info("%s: caught up to index %d: standing in term %d to take leadership from %s", member.self_id,
                     req.take_leadership_ledger_index, target, req.transfer_id)
            member.term_to_take_leadership = target
            return (TakeLeadership(target, token),)
        if now >= deadline:
            log.info("%s: taking leadership from %s failed: its log reached index %d, not %d, in %d ms",
                     member.self_id, req.transfer_id, member.ledger_end_index, req.take_leadership_ledger_index,
                     self.cfg.leadership_transfer_wait_timeout)
            return done(Code.TAKE_LEADERSHIP_FAILED)
        return NONE

    def taking(self, token: Any, target: int) -> None:
        """This node stands in ``target`` (``TakeLeadership`` applied); ``token`` is answered
        when the take-over is decided."""
        self.take_leadership_task = TakeLeadershipTask(token, target)

    def on_role_change(self, change) -> tuple:
        """DLedger's TakeLeadershipTask check, run on every role change."""
        task = self.take_leadership_task
        if task is None:
            return NONE
        token, target = task
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
            return NONE
        self.take_leadership_task = None
        member = self.member_state
        member.term_to_take_leadership = -1
        if code == Code.SUCCESS:
            log.info("%s: took leadership in term %d", member.self_id, term)
        else:
            log.info("%s: taking leadership in term %d failed: %s (%s in term %d)", member.self_id, target,
                     Code.of(code).name, role.value, term)
        if token is None:
            return NONE
        return (Complete(token, LeadershipTransferResponse(group=member.group, local_id=member.self_id,
                                                           leader_id=member.leader_id, term=member.curr_term,
                                                           code=code)),)

    def fail_pending(self, code: int) -> list[Complete]:
        """Shutting down: answer the transfer still waiting, then the take-over."""
        member = self.member_state
        waiting, self.transfer_wait = self.transfer_wait, None
        task, self.take_leadership_task = self.take_leadership_task, None
        tokens = ([waiting.token] if waiting else []) + ([task.token] if task else [])
        return [Complete(token, LeadershipTransferResponse(group=member.group, local_id=member.self_id,
                                                           leader_id=member.leader_id, term=member.curr_term,
                                                           code=code))
                for token in tokens if token is not None]
