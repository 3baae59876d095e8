"""LeaderElector: DLedger's name for everything that decides who leads, stepped with
``now_ms`` instead of a thread that polls every 10 ms.

It composes one part per concept and runs the state maintainer over them:
- ``vote.Voting``: the candidate's rounds and the voter's rules;
- ``heartbeat.Heartbeats``: the leader's rounds, check-quorum and lease, the follower's
  view of its leader;
- ``read_index.ReadIndex``: reads waiting for a confirmation of leadership;
- ``leadership_transfer.LeadershipTransfer``: transfers and the preferred leader;
- ``rejoin.Rejoin`` (built by the node, shared with the replication side): whether this
  member may stand, vote and answer a leader while it recovers.

Each part gets the member state, the config and the narrow callables it needs, never the
node nor another part; the wiring below is the only place that knows them all.

Rules kept here:
- one step (``maintain``) per entry point: the transferee's wait first, then the role's own
  step (leader: heartbeat rounds, check-quorum, preferred leader; follower: stand for
  election after ``max_heart_beat_leak`` silent intervals, probing at once in the current
  term; candidate: vote rounds);
- a store error in a step (the term file could not be written) answers nothing on the unsaved
  state and retries the step after one heartbeat interval;
- a leader whose store failed a sync (``store.failed``) steps down; recovery
  (``core.rejoin``) says who may stand and vote;
- with ``enable_leader_elector`` off (the test harness's forced roles) nobody stands for
  election and nobody steps down, but a higher term seen is still caught up.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from dledger.core.heartbeat import Heartbeats
from dledger.core.leadership_transfer import LeadershipTransfer
from dledger.core.member_state import MemberState, Role, RoleEvent
from dledger.core.read_index import ReadIndex
from dledger.core.rejoin import Rejoin
from dledger.core.vote import ParseResult, VoteTally, Voting, parse_vote_tally
from dledger.errors import DLedgerError
from dledger.protocol import DLedgerResponseCode as Code

__all__ = ["LeaderElector", "ParseResult", "VoteTally", "parse_vote_tally"]

log = logging.getLogger(__name__)


class LeaderElector:
    def __init__(self, member_state: MemberState, config, rng, *, now_ms: int,
                 send: Callable[[str, Any, Callable], int], complete_read: Callable[[Any, int, int], None],
                 commit_hint: Callable[[int, int], None], match_index: Callable[[str], int],
                 recovery: Rejoin, peer_recovering: Callable[[int, str, bool, int], None],
                 round_trip_ms: Callable[[int, int], int] | None = None) -> None:
        self.member_state = member_state
        self.cfg = config
        self.recovery = recovery
        self.reads = ReadIndex(complete_read)
        self.voting = Voting(member_state, config, rng, now_ms=now_ms, send=send, become_leader=self.become_leader,
                             recovery=recovery, round_trip_ms=round_trip_ms)
        self.heartbeats = Heartbeats(member_state, config, now_ms=now_ms, send=send, confirmed=self.reads.confirmed,
                                     fail_reads=self.reads.fail, step_down=self.voting.become_candidate,
                                     commit_hint=commit_hint, may_follow=recovery.may_follow,
                                     recovering=lambda: recovery.recovering,
                                     incarnation=lambda: recovery.incarnation, peer_recovering=peer_recovering)
        self.transfer = LeadershipTransfer(member_state, config, now_ms=now_ms, send=send, match_index=match_index,
                                           catch_up_term=self.voting.catch_up_term)
        #: after a store error (the term file could not be written) wait before retrying
        self.backoff_until = -1

    # =====================================================================================
    # transitions the node and the pusher ask for
    # =====================================================================================
    def become_candidate(self, now: int, term: int, event: RoleEvent) -> None:
        """Step down (or stay) as candidate, knowing ``term``, because of ``event``; the next
        vote after a random delay."""
        self.voting.become_candidate(now, term, event)

    def step_aside(self, now: int) -> None:
        """A leader stuck on a damaged entry steps down and lets the others stand first
        (``core.damaged_tail``)."""
        if self.member_state.role is Role.LEADER and self.cfg.enable_leader_elector:
            self.voting.stand_aside(now)

    def become_leader(self, now: int, term: int, *, forced: bool = False) -> None:
        """Lead ``term``: a passed vote (or, ``forced``, the test harness's roles)."""
        self.recovery.on_won_election()          # a recovering winner won a unanimous round
        self.member_state.on_event(RoleEvent.FORCED_LEADER if forced else RoleEvent.WON_VOTE, term)
        self.transfer.leading(now)
        self.heartbeats.start_leading(now)

    def heard_leader(self, now: int) -> None:
        """The leader this node follows spoke (a heartbeat or an accepted push)."""
        self.heartbeats.heard_leader(now)

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
            log.error("%s: election step failed: %s; retrying", self.member_state.self_id, exc)
            self.backoff_until = now + self.cfg.heart_beat_time_interval_ms

    def _maintain(self, now: int) -> None:
        if self.transfer.transfer_wait is not None:
            self.transfer.maintain(now)
        if not self.cfg.enable_leader_elector:
            self.voting.maintain_forced()
            return
        member = self.member_state
        role = member.role
        if role is Role.LEADER and self.recovery.failed:
            # the store failed a sync: nothing this leader writes is durable any more
            log.error("%s: the store failed (%s): stepping down", member.self_id, self.member_state.store.failed)
            self.voting.become_candidate(now, member.curr_term, RoleEvent.STORE_FAILED)
        elif role is Role.LEADER:
            if self.heartbeats.maintain(now) and self.cfg.preferred_leader_ids:
                self.transfer.maybe_check_preferred(now)
        elif role is Role.FOLLOWER:
            if self.heartbeats.leader_silent(now):
                self.voting.become_candidate(now, member.curr_term, RoleEvent.ELECTION_TIMEOUT)
                # probe at once in the current term: it moves no term, and the answers tell
                # whether the others lost the leader too (then the next round takes a new term)
                self.voting.probe_now(now)
        else:
            self.voting.maintain(now)

    def on_role_change(self, change) -> None:
        self.voting.on_role_change(change)
        if change.role is not Role.LEADER:
            self.heartbeats.on_role_change(change)
            if self.reads:
                self.reads.fail(Code.NOT_LEADER)
        self.transfer.on_role_change(change)

    # =====================================================================================
    # requests
    # =====================================================================================
    def register_read(self, now: int, token: Any, read_index: int) -> None:
        """Complete ``token`` at ``read_index`` once a quorum confirms this leader after ``now``."""
        self.reads.add(now, token, read_index)
        if len(self.member_state.majority) == 1:
            self.reads.confirmed(now)
            return
        self.heartbeats.request_round(now)

    def fail_pending(self, code: int) -> None:
        """Shutting down: answer every read and transfer still waiting."""
        self.reads.fail(code)
        self.transfer.fail_pending(code)
