"""Heartbeats: the leader's rounds, check-quorum and the read lease; the follower's view of
its leader (DLedger's LeaderElector, heartbeat part).

The leader:
- sends a heartbeat round every ``heart_beat_time_interval_ms``, carrying its commit index;
  a round that reaches a quorum of SUCCESS answers confirms leadership as of the moment it
  was sent (reads waiting for that confirmation complete then);
- counts any SUCCESS answer to a request of its leadership, push or heartbeat, as contact
  (``note_contact``): leadership is confirmed as of the oldest contact time of a quorum,
  so that under load, pushes keep it confirmed even when heartbeat answers queue behind them;
- steps down (check-quorum) when nothing confirmed it for ``max_heart_beat_leak``
  intervals, and when a peer reports a higher term; a new leader counts its election as a
  confirmation (DLedger steps down when its first round misses a quorum);
- holds a lease (LEASE_READ) for ``lease_ratio`` of the election timeout after the last
  confirmation, except in a term the member state fenced (``MemberState.lease_fenced``: a
  leadership transfer started, or the term is led again after a restart).

A follower records when it last heard its leader (a heartbeat of its term from its leader,
``leader_heard``, or a push); after
``max_heart_beat_leak`` intervals of silence it stands for election. ``has_live_leader`` is
leader stickiness: a follower that heard its leader within the election timeout, a leader
confirmed within it and a node that started less than one election timeout ago all refuse
to join a higher term.

A recovering follower (protocol-aware recovery, ``core.rejoin``) marks its answers
``recovering``, with its ``incarnation`` (its SUCCESS still confirms the leader: a node that
votes for no one cannot help elect another leader), and the leader tells the pusher
(``peer_recovering``, which keeps the incarnation for the pushes to echo); while it
relearns its term it answers TERM_NOT_READY (``may_follow``), which confirms nothing.

A heartbeat request is judged here on who sent it and on whether this node may answer a
leader (``admit``); its term is judged by the term gate (``core.term_gate``: a lower term
gets EXPIRED_TERM, a higher one makes this node join it as candidate) and its role by the
node's step functions (``core.step``: a candidate follows the leader, a follower answers its
own leader only). An answer saying this leader is behind ends the round at once with a step
down to that term.

State: member state, config and recovery (``core.rejoin``: whether this node may answer a
leader, whether it is recovering and its incarnation). Its decisions are intents
(``core.intents``) returned to the node: heartbeats to send (``Send``), reads a round
confirmed (``ReadsConfirmed``) or failed (``FailReads``), a step down (``StepDown``), a
follower that recovers (``PeerRecovering``, for the pusher) and a leader's commit index
(``CommitHint``, for the entry handler).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dledger.core.intents import NONE, CommitHint, FailReads, PeerRecovering, ReadsConfirmed, Send, StepDown
from dledger.core.member_state import MemberState, Role, RoleEvent
from dledger.protocol import DLedgerResponseCode as Code, HeartBeatRequest, HeartBeatResponse


def election_timeout_ms(config) -> int:
    """How long a member waits without news before it acts: ``max_heart_beat_leak`` intervals."""
    return config.max_heart_beat_leak * config.heart_beat_time_interval_ms


@dataclass(slots=True)
class HeartbeatRound:
    """One round of heartbeats and its answers (this node counts as one success)."""

    term: int
    sent_at: int
    peers: int
    responded: set = field(default_factory=set)
    succ: int = 1
    not_ready: int = 0
    #: the highest term an answer said this leader is behind on (``term_gate.higher_term``)
    higher_term: int | None = None
    inconsistent_leader: bool = False
    #: who answered so (for the log line of a step down)
    higher_from: str | None = None
    inconsistent_from: str | None = None
    quorum_reached: bool = False
    finished: bool = False


class Heartbeats:
    def __init__(self, member_state: MemberState, config, *, now_ms: int, recovery) -> None:
        self.member_state = member_state
        self.cfg = config
        self.election_timeout_ms = election_timeout_ms(config)
        #: the member's recovery (``core.rejoin.Rejoin``), consulted, never changed here
        self.recovery = recovery
        self.started_ms = now_ms
        #: follower: when the leader was last heard (heartbeat or push)
        self.last_leader_heartbeat_ms = now_ms
        #: leader: when the last round was sent (-1: send one now)
        self.last_send_heartbeat_ms = -1
        #: leader: leadership confirmed by a quorum as of this time (check-quorum, lease)
        self.last_succ_heartbeat_ms = -1
        self.round: HeartbeatRound | None = None
        #: leader: peer -> send time of the newest request it answered SUCCESS
        self.contact: dict[str, int] = {}

    # -- liveness and the lease ---------------------------------------------------------------
    def note_contact(self, now: int, peer: str, sent_ms: int) -> None:
        """A request sent at ``sent_ms`` in this leadership was answered SUCCESS by ``peer``."""
        contact = self.contact
        if sent_ms > contact.get(peer, -1):
            contact[peer] = sent_ms
            member = self.member_state
            heard = dict(contact)
            heard[member.self_id] = now                 # the leader hears itself now
            since = member.majority.committed_index(heard)
            if since > self.last_succ_heartbeat_ms:
                self.last_succ_heartbeat_ms = since

    def lease_valid(self, now: int) -> bool:
        return (self.member_state.role is Role.LEADER and self.last_succ_heartbeat_ms >= 0
                and not self.member_state.lease_fenced()
                and now < self.last_succ_heartbeat_ms + int(self.cfg.lease_ratio * self.election_timeout_ms))

    def has_live_leader(self, now: int) -> bool:
        member = self.member_state
        if now - self.started_ms < self.election_timeout_ms:
            return True
        if member.role is Role.FOLLOWER:
            return member.leader_id is not None and now - self.last_leader_heartbeat_ms < self.election_timeout_ms
        if member.role is Role.LEADER:
            return now - self.last_succ_heartbeat_ms < self.election_timeout_ms
        return False

    def heard_leader(self, now: int) -> None:
        self.last_leader_heartbeat_ms = now

    def leader_silent(self, now: int) -> bool:
        return now - self.last_leader_heartbeat_ms > self.election_timeout_ms

    def follower_deadline(self) -> int:
        return self.last_leader_heartbeat_ms + self.election_timeout_ms + 1

    def leader_deadlines(self, now: int) -> tuple[int, int]:
        """When the next round is due, and when check-quorum would step down."""
        due = now if self.last_send_heartbeat_ms < 0 \
            else self.last_send_heartbeat_ms + self.cfg.heart_beat_time_interval_ms
        return due, self.last_succ_heartbeat_ms + self.election_timeout_ms + 1

    def on_role_change(self, change) -> None:
        if change.role is not Role.LEADER:
            self.round = None

    # -- the leader's rounds ------------------------------------------------------------------
    def start_leading(self, now: int) -> list:
        """Just elected: the election counts as a confirmation; the first round goes out now."""
        self.contact = {}
        self.last_send_heartbeat_ms = -1
        self.last_succ_heartbeat_ms = now
        self.round = None
        return self._send_round(now)

    def request_round(self, now: int) -> None:
        """A read needs a confirmation newer than the last round: send one now."""
        rnd = self.round
        if rnd is None or rnd.sent_at < now:
            self.last_send_heartbeat_ms = -1

    def maintain(self, now: int) -> list | tuple:
        """The leader's step: end the round that is due, check the quorum, send the next round.
        A ``StepDown`` among the intents returned ends the step (the leader stepped down)."""
        interval = self.cfg.heart_beat_time_interval_ms
        rnd = self.round
        if rnd is not None and not rnd.finished and now >= rnd.sent_at + interval:
            out = self._finish_round(now, rnd)
            if out:
                return out                      # it steps down
        if now - self.last_succ_heartbeat_ms > self.election_timeout_ms:
            return (StepDown(self.member_state.curr_term, RoleEvent.QUORUM_LOST, self._quorum_lost(now)),)
        if self.last_send_heartbeat_ms < 0 or now - self.last_send_heartbeat_ms >= interval:
            return self._send_round(now)
        return NONE

    def _send_round(self, now: int) -> list:
        member = self.member_state
        self.last_send_heartbeat_ms = now
        rnd = HeartbeatRound(member.curr_term, now, len(member.remote_peer_ids) + 1,
                             succ=1 if member.is_voter() else 0)
        rnd.responded.add(member.self_id)
        self.round = rnd
        out: list = []
        for peer in member.remote_peer_ids:
            req = HeartBeatRequest(group=member.group, local_id=member.self_id, remote_id=peer,
                                   leader_id=member.self_id, term=rnd.term, commit_index=member.committed_index,
                                   members=member.peers_text, config_index=max(member.config_index, -1))
            out.append(Send(peer, req, rnd))
        out.extend(self._progress(now, rnd))
        return out

    def on_answer(self, now: int, peer: str | None, resp: HeartBeatResponse | None, rnd: HeartbeatRound,
                  higher: int | None) -> list | tuple:
        """``peer``'s answer to a heartbeat of round ``rnd`` (None: unanswered); ``higher``: the
        term above this node's it claims (``core.term_gate``)."""
        member = self.member_state
        if rnd.finished or peer in rnd.responded or member.role is not Role.LEADER or member.curr_term != rnd.term:
            return NONE
        out: list = []
        rnd.responded.add(peer)
        code = Code.NETWORK_ERROR if resp is None else resp.code
        member.peers_live[peer] = code != Code.NETWORK_ERROR
        if resp is not None and resp.recovering:
            out.append(PeerRecovering(peer, code == Code.SUCCESS, resp.incarnation))
        voter = member.is_voter(peer)              # a learner's answer counts toward no quorum
        if code == Code.SUCCESS:
            if voter:
                rnd.succ += 1
        elif code == Code.EXPIRED_TERM:
            if higher is not None and (rnd.higher_term is None or higher > rnd.higher_term):
                rnd.higher_term = higher
                rnd.higher_from = peer
        elif code == Code.INCONSISTENT_LEADER:
            rnd.inconsistent_leader = True
            rnd.inconsistent_from = peer
        elif code == Code.TERM_NOT_READY and voter:
            rnd.not_ready += 1
        out.extend(self._progress(now, rnd))
        if len(rnd.responded) >= rnd.peers or rnd.higher_term is not None:
            out.extend(self._finish_round(now, rnd))
        return out

    def _progress(self, now: int, rnd: HeartbeatRound) -> tuple:
        if not rnd.quorum_reached and self.member_state.majority.is_quorum(rnd.succ):
            rnd.quorum_reached = True
            self.last_succ_heartbeat_ms = max(self.last_succ_heartbeat_ms, rnd.sent_at)
            return (ReadsConfirmed(rnd.sent_at),)
        return NONE

    def _finish_round(self, now: int, rnd: HeartbeatRound) -> tuple:
        """End ``rnd``; returns the intents of a step down, or nothing."""
        rnd.finished = True
        if not self.cfg.enable_leader_elector:
            return NONE                         # roles are forced: nobody steps down
        if rnd.higher_term is not None:
            return FailReads(Code.NOT_LEADER), StepDown(rnd.higher_term, RoleEvent.HIGHER_TERM_SEEN,
                                                        f"{rnd.higher_from} answered a heartbeat with term "
                                                        f"{rnd.higher_term}")
        if rnd.quorum_reached:
            return NONE
        if self.member_state.majority.is_quorum(rnd.succ + rnd.not_ready):
            self.last_send_heartbeat_ms = -1                      # resend at once
        elif rnd.inconsistent_leader or now - self.last_succ_heartbeat_ms > self.election_timeout_ms:
            if rnd.inconsistent_leader:
                return (StepDown(rnd.term, RoleEvent.INCONSISTENT_LEADER,
                                 f"{rnd.inconsistent_from} follows another leader in term {rnd.term}"),)
            return (StepDown(rnd.term, RoleEvent.QUORUM_LOST, self._quorum_lost(now)),)
        return NONE

    def _quorum_lost(self, now: int) -> str:
        """Why check-quorum stepped this leader down, in words: the last contact with each peer."""
        member = self.member_state
        last = ", ".join(f"{p} {now - self.contact[p]} ms ago" if p in self.contact else f"{p} never"
                         for p in member.remote_peer_ids)
        return (f"no quorum answered for {now - self.last_succ_heartbeat_ms} ms (an election timeout is "
                f"{self.election_timeout_ms} ms); last answer of a request of this leadership: {last}")

    # -- the follower -------------------------------------------------------------------------
    def answer(self, req: HeartBeatRequest, code: int, term: int = -1) -> HeartBeatResponse:
        member = self.member_state
        recovering = self.recovery.recovering
        return HeartBeatResponse(group=member.group, local_id=member.self_id, remote_id=req.local_id,
                                 leader_id=member.leader_id, code=code, term=term, recovering=recovering,
                                 incarnation=self.recovery.incarnation if recovering else 0)

    def admit(self, req: HeartBeatRequest) -> HeartBeatResponse | None:
        """Who sent the heartbeat, and whether this node may answer a leader at all, are judged
        before its term (``core.term_gate``): the answer when either refuses, else None."""
        member = self.member_state
        if member.refuses_outsider(req.leader_id, req.config_index):
            # a leader this node's committed configuration does not name, and that knows no newer
            # one, is not followed (a leader named by no uncommitted entry may be the one to cut it)
            return self.answer(req, Code.UNKNOWN_MEMBER, member.curr_term)
        if req.leader_id == member.self_id:
            return self.answer(req, Code.UNEXPECTED_MEMBER, member.curr_term)
        if not self.recovery.may_follow():
            return self.answer(req, Code.TERM_NOT_READY)          # relearning its term: no answer counts yet
        return None

    def leader_heard(self, now: int, req: HeartBeatRequest) -> tuple:
        """The leader this node follows sent ``req`` (of this node's term): it is alive, and its
        commit index is a hint (for the entry handler)."""
        self.last_leader_heartbeat_ms = now
        return (CommitHint(req.term, req.commit_index),)
