"""LeaderElector: DLedger's name for everything that decides who leads, stepped with
``now_ms`` instead of a thread that polls every 10 ms.

It composes one part per concept:
- ``vote.Voting``: the candidate's rounds and the voter's rules;
- ``heartbeat.Heartbeats``: the leader's rounds, check-quorum and lease, the follower's
  view of its leader;
- ``read_index.ReadIndex``: reads waiting for a confirmation of leadership;
- ``leadership_transfer.LeadershipTransfer``: transfers and the preferred leader;
- ``rejoin.Rejoin`` (built by the node, shared with the replication side): whether this
  member may stand, vote and answer a leader while it recovers.

Each part holds state and returns intents (``core.intents``); none holds the node or another
part. The elector is where the role transitions those intents ask for happen
(``become_candidate`` for ``StepDown``, ``join_term`` for ``JoinTerm``, ``follow``,
``become_leader`` for ``Won``, ``step_aside``, ``take_leadership``); the node applies every
intent (``Node._apply``) and runs DLedger's state maintainer, one step per entry point, in
the step function of the node's role (``core.step``).

Rules kept here and there:
- the state maintainer's step: the transferee's wait first, then the role's own step (leader:
  heartbeat rounds, check-quorum, preferred leader; follower: stand for election after
  ``max_heart_beat_leak`` silent intervals, probing at once in the current term; candidate:
  vote rounds);
- a store error in a step (the term file could not be written) answers nothing on the unsaved
  state and retries the step after one heartbeat interval (``failed_step``);
- a leader whose store failed a sync (``store.failed``) steps down; recovery
  (``core.rejoin``) says who may stand and vote;
- with ``enable_leader_elector`` off (the test harness's forced roles) nobody stands for
  election and nobody steps down, but a higher term seen is still caught up.
"""

from __future__ import annotations

import logging
from typing import Any

from dledger.core.heartbeat import Heartbeats
from dledger.core.intents import NONE
from dledger.core.leadership_transfer import LeadershipTransfer
from dledger.core.member_state import MemberState, Role, RoleEvent
from dledger.core.read_index import ReadIndex
from dledger.core.rejoin import Rejoin
from dledger.core.round_trip import RoundTrips
from dledger.core.vote import ParseResult, VoteTally, Voting, parse_vote_tally
from dledger.errors import DLedgerError
from dledger.protocol import DLedgerResponseCode as Code

__all__ = ["LeaderElector", "ParseResult", "VoteTally", "parse_vote_tally"]

log = logging.getLogger(__name__)


class LeaderElector:
    def __init__(self, member_state: MemberState, config, rng, *, now_ms: int, recovery: Rejoin,
                 round_trips: RoundTrips | None = None) -> None:
        self.member_state = member_state
        self.cfg = config
        self.recovery = recovery
        self.reads = ReadIndex()
        # (the first vote delay is drawn from rng here)
        self.voting = Voting(member_state, config, rng, now_ms=now_ms, recovery=recovery, round_trips=round_trips)
        self.heartbeats = Heartbeats(member_state, config, now_ms=now_ms, recovery=recovery)
        self.transfer = LeadershipTransfer(member_state, config, now_ms=now_ms)
        #: after a store error (the term file could not be written) wait before retrying
        self.backoff_until = -1

    # =====================================================================================
    # transitions the intents ask for
    # =====================================================================================
    def become_candidate(self, now: int, term: int, event: RoleEvent, why: str = "") -> None:
        """Step down (or stay) as candidate, knowing ``term``, because of ``event``; the next
        vote after a random delay (``StepDown``)."""
        self.voting.become_candidate(now, term, event, why)

    def join_term(self, now: int, term: int, event: RoleEvent, why: str = "") -> None:
        """A higher ``term`` was seen: become its candidate and campaign in it at once
        (``JoinTerm``)."""
        self.voting.catch_up_term(now, term, event, why)

    def follow(self, term: int, leader_id: str) -> None:
        """A leader of this term spoke: follow it (``Follow``)."""
        self.voting.follow(term, leader_id)

    def step_aside(self, now: int) -> None:
        """A leader stuck on a damaged entry steps down and lets the others stand first
        (``StandAside``, from ``core.damaged_tail``)."""
        if self.member_state.role is Role.LEADER and self.cfg.enable_leader_elector:
            self.voting.stand_aside(now)

    def become_leader(self, now: int, term: int, *, forced: bool = False, votes: str = "") -> list:
        """Lead ``term``: a passed vote (``Won``, ``votes`` its tally in words) or, ``forced``,
        the test harness's roles. Returns the first heartbeat round."""
        self.recovery.on_won_election()          # a recovering winner won a unanimous round
        self.member_state.on_event(RoleEvent.FORCED_LEADER if forced else RoleEvent.WON_VOTE, term, why=votes)
        self.transfer.leading(now)
        return self.heartbeats.start_leading(now)

    def take_leadership(self, now: int, target: int, token: Any) -> None:
        """The transferee caught up: stand in ``target`` at once; ``token`` is answered when
        the take-over is decided (``TakeLeadership``)."""
        self.voting.catch_up_term(now, target, RoleEvent.TAKE_LEADERSHIP,
                                  f"a leadership transfer from {self.member_state.leader_id}")
        self.transfer.taking(token, target)

    def heard_leader(self, now: int) -> None:
        """The leader this node follows spoke (a heartbeat or an accepted push)."""
        self.heartbeats.heard_leader(now)

    def failed_step(self, now: int, exc: DLedgerError) -> None:
        """A step of the state maintainer failed on the store (the term file could not be
        written): nothing was answered on the unsaved state; try again after a heartbeat
        interval."""
        log.error("%s: election step failed: %s; retrying", self.member_state.self_id, exc)
        self.backoff_until = now + self.cfg.heart_beat_time_interval_ms

    def store_failed(self) -> None:
        """The leader's store failed a sync: it steps down (``STORE_FAILED``)."""
        log.error("%s: the store failed (%s): stepping down", self.member_state.self_id,
                  self.member_state.store.failed)

    # =====================================================================================
    # timing
    # =====================================================================================
    def note_contact(self, now: int, peer: str, sent_ms: int) -> None:
        """A request sent at ``sent_ms`` in this leadership was answered SUCCESS by ``peer``."""
        self.heartbeats.note_contact(now, peer, sent_ms)

    def lease_valid(self, now: int) -> bool:
        return self.heartbeats.lease_valid(now)

    def next_deadline(self, now: int) -> int | None:
        member, voting = self.member_state, self.voting
        if not self.cfg.enable_leader_elector:
            return now if voting.need_increase_term_immediately else None
        out = []
        if now < self.backoff_until:
            return self.backoff_until
        if voting.need_increase_term_immediately and member.role is Role.CANDIDATE:
            return now
        if member.role is Role.LEADER:
            out.extend(self.heartbeats.leader_deadlines(now))
            if self.cfg.preferred_leader_ids:
                out.append(self.transfer.next_preferred_check_ms)
        elif member.role is Role.FOLLOWER:
            out.append(self.heartbeats.follower_deadline())
        else:
            out.append(voting.deadline())
        if self.transfer.transfer_wait is not None:
            out.append(self.transfer.transfer_wait.deadline)
        return min(out)

    def on_role_change(self, change) -> list | tuple:
        self.voting.on_role_change(change)
        out: list = []
        if change.role is not Role.LEADER:
            self.heartbeats.on_role_change(change)
            if self.reads:
                out.extend(self.reads.fail(Code.NOT_LEADER))
        out.extend(self.transfer.on_role_change(change))
        return out or NONE

    # =====================================================================================
    # reads
    # =====================================================================================
    def register_read(self, now: int, token: Any, read_index: int) -> list | tuple:
        """Complete ``token`` at ``read_index`` once a quorum confirms this leader after ``now``."""
        self.reads.add(now, token, read_index)
        if len(self.member_state.majority) == 1:
            return self.reads.confirmed(now)
        self.heartbeats.request_round(now)
        return NONE

    def fail_pending(self, code: int) -> list:
        """Shutting down: answer every read and transfer still waiting."""
        return self.reads.fail(code) + self.transfer.fail_pending(code)
